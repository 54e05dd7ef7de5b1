"""`nvwatch serve` on 127.0.0.1 for a while, scraped once a second: its RSS, its CPU per
second and the scrape latency (median, p99, max), as a node's Prometheus would see it."""

from __future__ import annotations

import csv
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import stop as stop_process

READY_TIMEOUT_S = 30.0


def free_port() -> int:
    """A loopback port nothing listened on a moment ago (the agent binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
    return body


def _percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(min(rank, len(ordered))) - 1]


def measure_serve(
    argv: Sequence[str], seconds: float, raw: Path, cwd: Path, env: dict[str, str]
) -> dict[str, Any]:
    """Start `argv --listen 127.0.0.1:PORT`, wait for /metrics, scrape it every second
    for `seconds`; files serve-samples.csv, serve-last.prom and serve.log under `raw`."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with (raw / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [*argv, "--listen", f"127.0.0.1:{port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        try:
            return _scrape(process, url, seconds, raw)
        finally:
            stop_process(process)


def _scrape(
    process: subprocess.Popen[bytes], url: str, seconds: float, raw: Path
) -> dict[str, Any]:
    started = time.monotonic()
    body = b""
    while time.monotonic() - started < READY_TIMEOUT_S:
        if process.poll() is not None:
            return {"error": f"serve exited with {process.returncode} before answering"}
        try:
            body = _get(url, 2.0)
            break
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    else:
        return {"error": f"no answer on {url} after {READY_TIMEOUT_S:.0f}s"}
    ready_s = time.monotonic() - started
    agent = psutil.Process(process.pid)
    rows: list[dict[str, float]] = []
    errors = 0
    first = time.monotonic()
    cpu0 = sum(agent.cpu_times()[:2])
    for tick in range(int(seconds) + 1):
        time.sleep(max(0.0, first + tick - time.monotonic()))
        if process.poll() is not None:
            break
        before = time.perf_counter()
        try:
            body = _get(url, 5.0)
        except (urllib.error.URLError, OSError):
            errors += 1
            continue
        latency = time.perf_counter() - before
        try:
            cpu = sum(agent.cpu_times()[:2])
            rss = agent.memory_info().rss
        except psutil.Error:
            break
        rows.append(
            {
                "t_s": round(time.monotonic() - first, 3),
                "latency_s": latency,
                "rss_bytes": rss,
                "cpu_s": cpu - cpu0,
                "body_bytes": len(body),
            }
        )
    (raw / "serve-last.prom").write_bytes(body)
    polls = _poll_durations(body)
    with (raw / "serve-samples.csv").open("w", newline="") as out:
        writer = csv.DictWriter(
            out, fieldnames=["t_s", "latency_s", "rss_bytes", "cpu_s", "body_bytes"]
        )
        writer.writeheader()
        writer.writerows(rows)
    if not rows:
        return {"error": "no scrape answered", "scrape_errors": errors}
    latencies = [r["latency_s"] for r in rows]
    span = rows[-1]["t_s"] or 1.0
    return {
        "seconds": span,
        "ready_s": ready_s,
        "scrapes": len(rows),
        "scrape_errors": errors,
        "latency_s": {
            "median": _percentile(latencies, 50),
            "p99": _percentile(latencies, 99),
            "max": max(latencies),
        },
        "rss_bytes": {
            "first": rows[0]["rss_bytes"],
            "last": rows[-1]["rss_bytes"],
            "max": max(r["rss_bytes"] for r in rows),
        },
        "cpu_per_s": rows[-1]["cpu_s"] / span,
        "body_bytes": rows[-1]["body_bytes"],
        # the agent's own account of its last poll, per source (seconds)
        "poll_duration_s": polls,
    }


def _poll_durations(body: bytes) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    try:
        for family in text_string_to_metric_families(body.decode()):
            if family.name == "nvwatch_agent_poll_duration_seconds":
                for sample in family.samples:
                    found[sample.labels.get("source", "")] = float(sample.value)
    except ValueError:
        return {}
    return found
