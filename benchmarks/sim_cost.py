"""Whole-process CPU of the simulated agent and of the simulated fleet, simulator included.

Both are separate processes measured from outside: the serve figure is the process's CPU
time (user + system, from /proc through psutil) over a steady stretch after a warm-up,
per second of wall time; the fleet figure is what `nvwatch simulate fleet --stats-every`
prints for each period (the process's CPU as a share of one core, its RSS, polls done).
"""

from __future__ import annotations

import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.common import REPO_ROOT, nvwatch_command, running
from nvwatch.agent.sim.ports import free_port

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


def measure_serve_cpu(
    profile: str, interval: float, seconds: float, warmup: float, log_dir: Path
) -> ServeCpu:
    """CPU per second of `nvwatch serve --simulate PROFILE --interval I` (default sources)."""
    port = free_port()
    argv = [
        *nvwatch_command(),
        "serve",
        f"--simulate={profile}",
        f"--interval={interval:g}s",
        f"--listen=127.0.0.1:{port}",
    ]
    log = log_dir / f"nvwatch-serve-cpu-{profile}.log"
    with running(argv, f"http://127.0.0.1:{port}/healthz", log=log) as process:
        agent = psutil.Process(process.pid)
        time.sleep(warmup)
        cpu0, wall0 = sum(agent.cpu_times()[:2]), time.monotonic()
        time.sleep(seconds)
        cpu1, wall1 = sum(agent.cpu_times()[:2]), time.monotonic()
    return ServeCpu(
        profile, interval, "default", wall1 - wall0, 1e3 * (cpu1 - cpu0) / (wall1 - wall0)
    )


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
