"""`nvwatch simulate fleet --stats-every N` prints, every N intervals, what the whole
process costs: its CPU as a share of one core, its RSS and the polls done."""

from __future__ import annotations

import re
import subprocess
import sys

STATS = re.compile(
    r"fleet: 2 nodes, CPU (?P<cpu>[\d.]+)% of one core over \d+s, RSS (?P<rss>\d+) MB, "
    r"(?P<polls>\d+) polls"
)


def test_stats_every_prints_cpu_share_rss_and_polls() -> None:
    argv = [
        *(sys.executable, "-m", "nvwatch.agent.cli", "simulate", "fleet"),
        *("--profile", "dgx1-v100:2", "--interval", "0.5s", "--stats-every", "2"),
        *("--duration", "3s", "--base-port", "0"),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = [m for m in map(STATS.search, done.stderr.splitlines()) if m is not None]
    assert lines, done.stderr
    first = lines[0]
    assert 0 < float(first["cpu"]) < 800  # a share of one core, per period
    assert int(first["rss"]) > 10
    # two nodes polling every 0.5 s for a 1 s period: about four polls
    assert 2 <= int(first["polls"]) <= 8
