"""nvitop and gpustat run unmodified under `nvwatch simulate exec`: no traceback, and the
simulated job's processes are real pids they can show (not "No Such Process").

Three profiles, one per family of answers: dgx-h100 (NVSwitch, Hopper: fabric info,
GPM, no NVENC), dgx1-v100 (direct NVLink 2: the legacy NVLink counters) and
geforce-workstation (fans, a display, no ECC: the consumer NotSupported paths). Every
query on every profile is exercised by tests/sim/test_device_queries.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import psutil
import pytest

from nvwatch.sim.node.workers import worker_name
from nvwatch.sim.profiles import PROFILES

VIEWER_PROFILES = ("dgx-h100", "dgx1-v100", "geforce-workstation")
# a process row of nvitop's one-shot table: │ GPU PID TYPE USER GPU-MEM ... COMMAND │
NVITOP_ROW = re.compile(r"^│\s+(\d+)\s+(\d+)\s+C\s+(\S+)\s.*│$")


def run_under(profile: str, *command: str) -> subprocess.CompletedProcess[str]:
    nvwatch = [sys.executable, "-m", "nvwatch.agent.cli", "simulate", "exec", "--profile", profile]
    env = {"COLUMNS": "120", "TERM": "xterm"}
    return subprocess.run(
        [*nvwatch, "--", *command],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("profile", VIEWER_PROFILES)
def test_nvitop_once_shows_the_simulated_jobs_real_processes(profile: str) -> None:
    done = run_under(profile, sys.executable, "-m", "nvitop", "--once")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stderr, done.stderr
    assert "No Such Process" not in done.stdout
    rows = [NVITOP_ROW.match(line) for line in done.stdout.splitlines()]
    found = [(int(m.group(1)), int(m.group(2)), m.group(3)) for m in rows if m]
    gpus = PROFILES[profile].gpu_count
    assert [gpu for gpu, _, _ in found] == list(range(gpus)), done.stdout
    assert all(user == psutil.Process().username() for *_, user in found)
    for line in done.stdout.splitlines():
        match = NVITOP_ROW.match(line)
        if match:
            assert worker_name(profile, int(match.group(1)))[:12] in line  # COMMAND column
    assert all(_gone(pid) for _, pid, _ in found), "a worker outlived simulate exec"


@pytest.mark.parametrize("profile", VIEWER_PROFILES)
def test_gpustat_reports_every_gpu_with_its_real_process(profile: str) -> None:
    done = run_under(profile, sys.executable, "-m", "gpustat", "--json", "-cpu")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    gpus = report["gpus"]
    assert [gpu["index"] for gpu in gpus] == list(range(PROFILES[profile].gpu_count))
    for gpu in gpus:
        (process,) = gpu["processes"]
        # psutil found the pid: its owner and command line, not gpustat's placeholders
        assert process["username"] == psutil.Process().username()
        assert " ".join(process["full_command"]) == worker_name(profile, gpu["index"])
        assert process["gpu_memory_usage"] > 0
