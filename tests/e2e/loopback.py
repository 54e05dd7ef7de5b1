"""Services a test or benchmark runs on 127.0.0.1: a free endpoint for each, processes
whose output goes to a log, bounded waits, readiness probes and Prometheus-API queries.

Shared by the e2e stacks (stack.py, vm_stack.py) and the scale benchmark
(benchmarks/scale/stack.py). Light on purpose (no nvwatch import beyond the port
helper), so that the benchmark can use it without loading the agent.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from nvwatch.sim.ports import free_port

T = TypeVar("T")
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Endpoint:
    """Where one service listens: a port on HOST that was free when it was picked."""

    port: int

    @classmethod
    def free(cls) -> Endpoint:
        return cls(free_port(HOST))

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float,
    every: float = 0.5,
    explain: Callable[[], str] | None = None,
) -> T:
    """Call `probe` until it returns something other than None/False, at most `timeout` s.
    `explain`: on timeout, says where the awaited thing stopped (added to the message)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = probe()
            if result:
                return result
        except (OSError, ValueError) as exc:  # not up yet
            last_error = exc
        time.sleep(every)
    where = f"; {explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} ({last_error}){where}")


def answers_ok(url: str, timeout: float = 2.0) -> bool:
    """`url` answers 200 now; False while the service is not (yet) listening."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def spawn_logged(argv: Sequence[str], log: Path, **popen: Any) -> subprocess.Popen[bytes]:
    """Start `argv` with stdout and stderr appended to `log`; `popen`: Popen's options.

    Appended, not truncated: a restarted process keeps its predecessor's last words.
    """
    with log.open("ab") as out:
        return subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, **popen)


def log_tail(log: Path, lines: int = 3) -> str:
    """The last lines of a log on one line, for an assertion message."""
    return " | ".join(log.read_text(errors="replace").splitlines()[-lines:])[:2000]


def instant_query(
    base: str, expr: str, at: float | None = None, timeout: float = 10.0
) -> list[dict[str, Any]]:
    """`expr` at `at` (now if None) on a Prometheus-compatible API: its result list, a
    scalar as one series without labels."""
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise AssertionError(f"query failed: {expr}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    if body["data"]["resultType"] == "scalar":
        return [{"metric": {}, "value": result}]
    return result


def range_query(
    base: str, expr: str, start: float, end: float, step: float, timeout: float = 10.0
) -> dict[float, list[dict[str, Any]]]:
    """`expr` evaluated at every `step` from `start` to `end` in one request: for each
    evaluation time (rounded to the millisecond), the series it returned, as an instant
    query at that time would (a range query is that instant query at each step)."""
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    url = f"{base}/api/v1/query_range?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise AssertionError(f"query failed: {expr}: {body}")
    at_each: dict[float, list[dict[str, Any]]] = {}
    for series in body["data"]["result"]:
        for when, value in series["values"]:
            at_each.setdefault(round(float(when), 3), []).append(
                {"metric": series["metric"], "value": [when, value]}
            )
    return at_each
