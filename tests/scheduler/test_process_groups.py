"""A Slurm command killed at its deadline takes everything it started with it.

Site wrappers run the real squeue without `exec`: the stand-in here starts `sleep 300`
in the background, writes its pid to a file and waits (or exits, leaving the sleep with
the pipe open). After the deadline that pid must be gone, in the source and through
`nvwatch doctor`.
Every wait is a bounded poll on the event; a sleep left behind is killed by its pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil

from nvwatch.agent.sources.scheduler.source import SchedulerSource
from tests.scheduler.test_failures import NVWATCH, _path_with

WAITING = "/bin/sleep 300 &\necho $! > {pid}\nwait"
# the wrapper exits at once; its background child keeps squeue's stdout open
LEAVING = "/bin/sleep 300 &\necho $! > {pid}\nexit 0"


def _pid(path: Path, within_s: float = 10.0) -> int:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n"):
            return int(text)
        time.sleep(0.02)
    raise AssertionError(f"the wrapper wrote no pid to {path} in {within_s} s")


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """Whether `pid` ends (or is a zombie left to init) within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def _kill_left(path: Path) -> None:
    """The sleep's pid, killed if the code under test left it running."""
    if path.exists() and path.read_text().endswith("\n"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(path.read_text()), signal.SIGKILL)


def test_a_wrappers_child_dies_with_it_at_the_deadline(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    env = _path_with(tmp_path, WAITING.format(pid=pid_file))
    source = SchedulerSource(interval=3600.0, timeout=0.5, max_accounts=5, env=env)
    try:
        assert source.refresh() is None
        assert _gone(_pid(pid_file)), "the wrapper's child outlived the timed-out squeue"
    finally:
        source.close()
        _kill_left(pid_file)


def test_a_child_holding_stdout_open_does_not_hold_the_read_past_the_deadline(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "child.pid"
    env = _path_with(tmp_path, LEAVING.format(pid=pid_file))
    source = SchedulerSource(interval=3600.0, timeout=0.5, max_accounts=5, env=env)
    refresh = threading.Thread(target=source.refresh, daemon=True)
    started = time.monotonic()
    refresh.start()
    try:
        refresh.join(5.0)
        assert not refresh.is_alive(), "the read waited on the child's open pipe"
        assert time.monotonic() - started < 5.0
        assert _gone(_pid(pid_file))
    finally:
        source.close()
        _kill_left(pid_file)  # releases a read that hung on the pipe
        refresh.join(5.0)


def test_doctor_leaves_no_child_of_a_command_it_gave_up_on(tmp_path: Path) -> None:
    """doctor reads Slurm once, to each command's deadline: past it the wrapper and its
    child are killed, and the reason names the deadline."""
    pid_file = tmp_path / "child.pid"
    env = {
        k: v for k, v in _path_with(tmp_path, WAITING.format(pid=pid_file)).items()
        if not k.startswith("NVWATCH_")
    }  # fmt: skip
    try:
        done = subprocess.run(
            [NVWATCH, "doctor", "--sources", "scheduler", "--scheduler-timeout", "2s"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr
        assert "squeue did not finish within 2 s" in done.stdout
        assert _gone(_pid(pid_file)), "doctor left the squeue wrapper's child running"
    finally:
        _kill_left(pid_file)
