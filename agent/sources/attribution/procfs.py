"""What /proc says about a pid, under a configurable root (tests use a fixture tree).

A pid that has exited is `None`, never an error: NVML's list and /proc drift apart every
poll. A pid whose entry exists but cannot be read (no permission, hidepid) raises
`ProcUnreadable`, which a resolver reports as its error.
"""

from __future__ import annotations

import pwd
from pathlib import Path

# /proc/<pid>/environ of a real job is a few KiB; a megabyte bounds a hostile one
_MAX_ENVIRON_BYTES = 1 << 20


class ProcUnreadable(OSError):
    """A /proc entry exists and cannot be read; the message names it."""


class ProcFS:
    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = root

    def _read(self, pid: int, name: str, limit: int = 1 << 16) -> bytes | None:
        path = self.root / str(pid) / name
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


def user_name(uid: int) -> str:
    """The login name of `uid`, or the number when the node's passwd does not know it."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
