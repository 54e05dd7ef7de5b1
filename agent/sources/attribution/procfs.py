"""What /proc says about a pid, under a configurable root (tests use a fixture tree).

A pid that has exited is `None`, never an error: NVML's list and /proc drift apart every
poll. A pid whose entry exists but cannot be read (no permission, hidepid) raises
`ProcUnreadable`, which a resolver reports as its error.
"""

from __future__ import annotations

import functools
import pwd
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

# /proc/<pid>/environ of a real job is a few KiB; a megabyte bounds a hostile one
_MAX_ENVIRON_BYTES = 1 << 20


class ProcUnreadable(OSError):
    """A /proc entry exists and cannot be read; the message names it."""


class ProcFS:
    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = root
        # joined as text: pathlib's parsing was a third of a refresh of 64 processes
        self._prefix = str(root).rstrip("/") + "/"

    def _read(self, pid: int, name: str, limit: int = 1 << 16) -> bytes | None:
        path = f"{self._prefix}{pid}/{name}"
        try:
            with open(path, "rb") as file:
                return file.read(limit)
        except (FileNotFoundError, ProcessLookupError):
            return None  # the process has exited
        except OSError as exc:
            raise ProcUnreadable(f"cannot read {path}: {exc.strerror or exc}") from exc

    def cgroup_paths(self, pid: int) -> tuple[str, ...] | None:
        """The cgroup path of every hierarchy ("4:memory:/slurm/..." -> "/slurm/...")."""
        data = self._read(pid, "cgroup")
        if data is None:
            return None
        lines = data.decode("utf-8", "replace").splitlines()
        return tuple(line.split(":", 2)[2] for line in lines if line.count(":") >= 2)

    def start_time(self, pid: int) -> int | None:
        """When the process started (clock ticks since boot, field 22 of /proc/<pid>/stat):
        with the pid, what tells a process from a later one that reused its pid. None when
        the process has exited or its stat has no such field."""
        data = self._read(pid, "stat")
        if data is None:
            return None
        # the command name, in parentheses, may itself hold spaces and parentheses
        fields = data[data.rfind(b")") + 2 :].split()
        return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None

    def uid(self, pid: int) -> int | None:
        """The real uid, from the "Uid:" line of /proc/<pid>/status."""
        data = self._read(pid, "status")
        if data is None:
            return None
        for line in data.decode("utf-8", "replace").splitlines():
            if line.startswith("Uid:"):
                fields = line.split()
                return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
        return None

    def environ(self, pid: int) -> dict[str, str] | None:
        """The environment the process started with (root, or its own user, may read it)."""
        data = self._read(pid, "environ", _MAX_ENVIRON_BYTES)
        if data is None:
            return None
        result: dict[str, str] = {}
        for entry in data.split(b"\0"):
            key, sep, value = entry.partition(b"=")
            if sep and key:
                result[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
        return result


class PerProcess(Generic[T]):
    """What a resolver found about each process, kept while the process lives.

    A process's cgroup (its job, its pod) and its environment are fixed when it starts,
    so a refresh re-reads only /proc/<pid>/stat of a process it knows: the same start
    time is the same process. A refresh of 64 GPU processes then costs 64 small reads,
    not 64 x 4 reads and passwd lookups. Entries of pids no refresh shows are dropped.
    """

    def __init__(self, proc: ProcFS) -> None:
        self._proc = proc
        self._known: dict[int, tuple[int, T]] = {}

    def get(self, pid: int, find: Callable[[int], T]) -> T:
        """The cached finding for `pid`, or `find(pid)` (which may raise: not cached)."""
        started = self._proc.start_time(pid)
        known = self._known.get(pid)
        if known is not None and started is not None and known[0] == started:
            return known[1]
        found = find(pid)
        if started is not None:
            self._known[pid] = (started, found)
        return found

    def keep_only(self, pids: Iterable[int]) -> None:
        alive = set(pids)
        for pid in [p for p in self._known if p not in alive]:
            del self._known[pid]


@functools.lru_cache(maxsize=4096)
def user_name(uid: int) -> str:
    """The login name of `uid`, or the number when the node's passwd does not know it
    (cached: a passwd lookup may read /etc/passwd or ask LDAP each time)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
