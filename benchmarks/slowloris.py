"""The agent under 1,000 slowloris connections: scrape latency, threads, RSS.

    python -m benchmarks.slowloris [--profile dgx-h100] [--connections 1000]

Starts `nvwatch serve --simulate=<profile>` in its own process, measures its threads and
RSS, opens the connections (each sends a request head that never ends), times fresh
scrapes while they are open, closes them and measures the RSS again. Prints one JSON
object. Targets: fresh scrape <= 50 ms, threads bounded, RSS back within 5 MB.
Not part of benchmarks/run.py (docs/performance.md is not regenerated from it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import nvwatch_command, percentile, running
from nvwatch.sim.ports import free_port

PARTIAL = b"GET /metrics HTTP/1.1\r\nHost: node\r\nX-Slow: "
SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n"
MIB = 1024 * 1024


def _scrape_seconds(port: int) -> float:
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(SCRAPE)
        while sock.recv(1 << 16):
            pass
    return time.perf_counter() - started


@contextlib.contextmanager
def _slowloris(port: int, count: int) -> Iterator[int]:
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(PARTIAL)
            held.append(sock)
        yield len(held)
    finally:
        for sock in held:
            sock.close()


def _settle(agent: psutil.Process) -> tuple[int, float]:
    time.sleep(2.0)  # a poll or two, and the server's sweep of closed connections
    return agent.num_threads(), agent.memory_info().rss / MIB


def measure(profile: str, connections: int, scrapes: int) -> dict[str, object]:
    # the driver holds one descriptor per connection too
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, connections + 256)), hard))
    port = free_port()
    argv = [*nvwatch_command(), "serve", f"--simulate={profile}", f"--listen=127.0.0.1:{port}"]
    with running(argv, f"http://127.0.0.1:{port}/healthz") as process:
        agent = psutil.Process(process.pid)
        for _ in range(5):
            _scrape_seconds(port)
        threads_before, rss_before = _settle(agent)
        with _slowloris(port, connections) as opened:
            time.sleep(1.0)
            took = [_scrape_seconds(port) for _ in range(scrapes)]
            threads_during, rss_during = agent.num_threads(), agent.memory_info().rss / MIB
        threads_after, rss_after = _settle(agent)
    return {
        "profile": profile,
        "slowloris_connections": opened,
        "scrape_ms": {
            "p50": round(percentile(took, 50) * 1e3, 2),
            "p99": round(percentile(took, 99) * 1e3, 2),
            "max": round(max(took) * 1e3, 2),
        },
        "threads": {"before": threads_before, "during": threads_during, "after": threads_after},
        "rss_mib": {
            "before": round(rss_before, 1),
            "during": round(rss_during, 1),
            "after": round(rss_after, 1),
            "after_minus_before": round(rss_after - rss_before, 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(measure(args.profile, args.connections, args.scrapes), indent=2))


if __name__ == "__main__":
    main()
