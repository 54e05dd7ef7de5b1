"""Real processes for attribution tests, and a fixture /proc tree that describes them.

The pids are real (a `sleep` each test starts and kills); their cgroup, uid and
environment come from a fixture tree under a temporary --proc-root, in whichever layout a
test needs, since this machine's own cgroups show none of them.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

Spawn = Callable[[], subprocess.Popen[bytes]]


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A short temporary directory: the kubelet's Unix socket is made under it, and a socket
    path is limited to 107 bytes, which pytest's own (per xdist worker, per test name) can
    pass."""
    path = Path(tempfile.mkdtemp(prefix="nvwatch-attr-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start real processes; every one is killed and reaped at teardown."""
    children: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        child = subprocess.Popen(["sleep", "300"])
        children.append(child)
        return child

    yield start
    for child in children:
        child.kill()
        child.wait(timeout=10)


@dataclass
class ProcTree:
    """A /proc root on disk: `add` writes one pid's cgroup, status and environ files."""

    root: Path

    def add(
        self,
        pid: int,
        cgroup: str = "0::/user.slice/user-0.slice/session-1.scope",
        uid: int = 0,
        environ: Mapping[str, str] | None = None,
        start_time: int = 4242,
    ) -> Path:
        entry = self.root / str(pid)
        entry.mkdir(parents=True, exist_ok=True)
        # /proc/<pid>/stat: field 22 is the start time (what tells a reused pid apart)
        rest = " ".join(["0"] * 17)  # fields 5 to 21
        (entry / "stat").write_text(f"{pid} (sleep) S 1 {rest} {start_time} 0 0\n")
        (entry / "cgroup").write_text(cgroup.strip() + "\n")
        (entry / "status").write_text(
            f"Name:\tsleep\nState:\tS (sleeping)\nPid:\t{pid}\n"
            f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        )
        env = {"PATH": "/usr/bin:/bin", **(environ or {})}
        environ_bytes = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
        (entry / "environ").write_bytes(environ_bytes)
        return entry


@pytest.fixture
def proc_tree(tmp_path: Path) -> ProcTree:
    return ProcTree(tmp_path / "proc")
