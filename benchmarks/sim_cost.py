"""Whole-process CPU of the simulated agent and of the simulated fleet, simulator included.

Both are separate processes measured from outside: the serve figure is the CPU time of the
process and its children (user + system, from /proc through psutil) over a steady stretch
after a warm-up, per second of wall time (`cpu_window`, which benchmarks/peer_cost.py uses
too); the fleet figure is what `nvwatch simulate fleet --stats-every` prints for each
period (the process's CPU as a share of one core, its RSS, polls done).
"""

from __future__ import annotations

import contextlib
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.common import REPO_ROOT, nvwatch_command, running
from nvwatch.sim.ports import free_port

# `fleet: N nodes, CPU X% of one core over Ts, RSS M MB, P polls, ...`
_STATS = re.compile(
    r"fleet: (?P<nodes>\d+) nodes, CPU (?P<cpu>[\d.]+)% of one core over \d+s, "
    r"RSS (?P<rss>\d+) MB, (?P<polls>\d+) polls"
)


@dataclass(frozen=True)
class ServeCpu:
    profile: str
    interval: float
    sources: str  # "default" or the --sources value
    seconds: float
    cpu_ms_per_s: float


@dataclass(frozen=True)
class FleetCpu:
    nodes: int
    profile: str
    interval: float
    periods: int
    share_pct: float  # median over the periods after the first (start-up polls)
    worst_pct: float
    rss_mb: float
    polls: int  # polls done in the periods judged


def serve_argv(profile: str, interval: float, port: int, *flags: str) -> list[str]:
    """`nvwatch serve --simulate PROFILE --interval I` on loopback, with any other flags."""
    return [
        *nvwatch_command(),
        "serve",
        f"--simulate={profile}",
        f"--interval={interval:g}s",
        f"--listen=127.0.0.1:{port}",
        *flags,
    ]


def tree_cpu_seconds(processes: Sequence[psutil.Process]) -> float:
    """User + system CPU seconds of `processes`; one that has exited counts nothing."""
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def cpu_window(
    pid: int, seconds: float, warmup: float, every_second: Callable[[], None] | None = None
) -> tuple[float, float]:
    """(wall seconds, CPU ms per second) of `pid` and its descendants over `seconds` after
    `warmup`. `every_second`, if given, runs once a second through the window from this
    process (a scraper, as Prometheus would be), so its own CPU is not counted."""
    root = psutil.Process(pid)
    time.sleep(warmup)
    # the tree as it stands after the warm-up: a wrapper (`simulate exec`), the exporter,
    # the simulated job's idle workers; none of them starts processes in the steady state
    tree = [root, *root.children(recursive=True)]
    cpu0, wall0 = tree_cpu_seconds(tree), time.monotonic()
    end, tick = wall0 + seconds, 0
    while time.monotonic() < end:
        if every_second is not None:
            every_second()
        # sleep to the next whole second of the window, so a slow call shifts nothing
        tick += 1
        time.sleep(max(0.0, min(end, wall0 + tick) - time.monotonic()))
    cpu1, wall1 = tree_cpu_seconds(tree), time.monotonic()
    return wall1 - wall0, 1e3 * (cpu1 - cpu0) / (wall1 - wall0)


def measure_serve_cpu(
    profile: str, interval: float, seconds: float, warmup: float, log_dir: Path
) -> ServeCpu:
    """CPU per second of `nvwatch serve --simulate PROFILE --interval I` (default sources),
    not scraped."""
    port = free_port()
    log = log_dir / f"nvwatch-serve-cpu-{profile}.log"
    argv = serve_argv(profile, interval, port)
    with running(argv, f"http://127.0.0.1:{port}/healthz", log=log) as process:
        wall, cpu_ms_per_s = cpu_window(process.pid, seconds, warmup)
    return ServeCpu(profile, interval, "default", wall, cpu_ms_per_s)


def measure_fleet_cpu(
    nodes: int, profile: str, interval: float, periods: int, stats_every: int = 2
) -> FleetCpu:
    """Run a fleet for `periods` stats periods (plus one for start-up) and parse its lines."""
    period = interval * stats_every
    argv = [
        *nvwatch_command(),
        *("simulate", "fleet", "--profile", f"{profile}:{nodes}"),
        *("--interval", f"{interval:g}s", "--stats-every", str(stats_every)),
        *("--duration", f"{period * (periods + 1) + period / 2:g}s", "--base-port", "0"),
    ]
    done = subprocess.run(
        argv,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=period * (periods + 1) + 300,
        check=True,
    )
    stats = [m for m in map(_STATS.search, done.stderr.splitlines()) if m is not None]
    if not stats:
        raise RuntimeError(f"no stats line from the fleet:\n{done.stderr[-2000:]}")
    judged = stats[1:] or stats  # the first period holds every node's first polls
    shares = [float(m["cpu"]) for m in judged]
    return FleetCpu(
        nodes=nodes,
        profile=profile,
        interval=interval,
        periods=len(judged),
        share_pct=statistics.median(shares),
        worst_pct=max(shares),
        rss_mb=max(float(m["rss"]) for m in judged),
        polls=sum(int(m["polls"]) for m in judged),
    )
