"""The cores a benchmark's processes used over a window, read from the kernel's counts."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from benchmarks.scale.stack import Sampler


def _burn(cpu_seconds: float) -> None:
    """Spend `cpu_seconds` of this process's CPU time, however loaded the machine."""
    me = psutil.Process()
    until = sum(me.cpu_times()[:2]) + cpu_seconds
    while sum(me.cpu_times()[:2]) < until:
        sum(i * i for i in range(10_000))


def test_a_busy_process_reads_busy_and_a_sleeping_one_idle() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sampler = Sampler()
        sampler.watch("busy", os.getpid())
        sampler.watch("sleeping", sleeper.pid)
        began = time.monotonic()
        over_window = sampler.cores_used()
        _burn(0.3)
        used = over_window()
        wall = time.monotonic() - began
    finally:
        sleeper.kill()
        sleeper.wait()
    assert used["busy"] * wall >= 0.3 * 0.95
    assert used["sleeping"] * wall < 0.1
    # the machine's busy cores hold the busy process's (the kernel counts in ticks)
    assert used["machine"] >= used["busy"] - 0.05 / wall
    assert used["machine"] <= (psutil.cpu_count() or 1) + 0.05


def test_a_process_gone_reads_nan_rather_than_ending_the_run() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    sampler = Sampler()
    sampler.watch("gone", gone.pid)
    over_window = sampler.cores_used()
    gone.wait()
    used = over_window()
    assert used["gone"] != used["gone"]  # NaN: its CPU time can no longer be read
    assert used["machine"] >= 0.0
