"""Process name and user are read once per process, not once per poll, and a pid that
now belongs to another process is read again."""

from __future__ import annotations

import getpass
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from nvwatch.agent.sources.nvml import processes as processes_module
from nvwatch.agent.sources.nvml.processes import ProcessOwners


def test_a_real_process_is_named_and_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    real = processes_module._process_owner

    def counted(pid: int) -> dict[str, str]:
        reads.append(pid)
        return real(pid)

    monkeypatch.setattr(processes_module, "_process_owner", counted)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        owners = ProcessOwners()
        first = owners.of(child.pid)
        owners.end_poll()
        again = owners.of(child.pid)
        assert (
            first == again == {"name": psutil.Process(child.pid).name(), "user": getpass.getuser()}
        )
        assert reads == [child.pid]
    finally:
        child.kill()
        child.wait()
    # gone: /proc/<pid> is gone, so it is named "" rather than served stale, and psutil
    # (which reads the same directory) is not asked
    assert owners.of(child.pid) == {"name": "", "user": ""}
    assert reads == [child.pid]


def test_a_new_process_directory_is_read_again_and_unasked_pids_are_dropped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    names = iter(["first", "second", "third"])
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))
    monkeypatch.setattr(
        processes_module, "_process_owner", lambda _pid: {"name": next(names), "user": "u"}
    )
    (tmp_path / "4242").mkdir()
    owners = ProcessOwners()
    assert owners.of(4242)["name"] == "first"
    assert owners.of(4242)["name"] == "first"  # same directory: kept
    owners.end_poll()
    # the pid's process ended and the pid came back with another process
    (tmp_path / "4242").rmdir()
    time.sleep(0.01)
    (tmp_path / "4242").mkdir()
    assert owners.of(4242)["name"] == "second"
    owners.end_poll()
    owners.end_poll()  # a poll that did not list it: the entry goes
    assert owners.of(4242)["name"] == "third"
