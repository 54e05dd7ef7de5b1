"""Real processes the simulated NVML reports on its GPUs, named in a file.

`nvwatch serve --simulate P --sim-process-file PATH` and NVWATCH_SIM_PROCESS_FILE (read
by `serve` and by `nvwatch simulate exec`'s children) name a file of lines

    # <gpu index>[/<GPU instance id>] <pid> [<memory MiB>]
    0 41234 2048
    3 41250
    4/9 41260 1024

and each pid is listed by nvmlDeviceGetComputeRunningProcesses of that GPU, next to the
simulated job's own worker; with a GPU instance id, in that MIG instance of a GPU in MIG
mode (on its MIG device and, with the instance's ids, on the GPU). So a test can start a
real process (a Slurm job, a process in a fixture cgroup) and have the agent attribute a
GPU to it. Memory left out is NVML's
"not available" (pynvml reads usedGpuMemory None): the file did not say.

Cost: the file is stat()ed at most once per simulated instant (under `serve`, once per
poll step) and parsed again only when it changed; the pids it names are checked at the
same instant, and those no longer running (zombies included: a process that has exited
holds no GPU context) are dropped. A bad line gives one warning per read and is skipped;
a missing file lists no processes until it appears.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

MIB = 1024 * 1024
ENV_VAR = "NVWATCH_SIM_PROCESS_FILE"
LINE_SYNTAX = "<gpu index>[/<GPU instance id>] <pid> [<memory MiB>]"


@dataclasses.dataclass(frozen=True)
class ClaimedProcess:
    """One line of the file: `pid` uses GPU `gpu`, holding `memory_bytes` (None: not said)."""

    gpu: int
    pid: int
    memory_bytes: int | None
    gpu_instance_id: int | None = None  # "3/9": GPU 3's MIG GPU instance 9


def parse_line(text: str, gpu_count: int) -> ClaimedProcess | None:
    """The process a line names; None for a blank or comment line; ValueError if bad."""
    fields = text.split("#", 1)[0].split()
    if not fields:
        return None
    if not 2 <= len(fields) <= 3:
        raise ValueError(f"expected {LINE_SYNTAX}")
    gpu_text, _, instance_text = fields[0].partition("/")
    gpu, pid = _natural(gpu_text, "gpu index"), _natural(fields[1], "pid")
    instance = _natural(instance_text, "GPU instance id") if instance_text else None
    if gpu >= gpu_count:
        raise ValueError(f"no GPU {gpu} (the node has {gpu_count})")
    if pid == 0:
        raise ValueError("pid 0 is not a process")
    memory = _natural(fields[2], "memory MiB") * MIB if len(fields) == 3 else None
    return ClaimedProcess(gpu, pid, memory, instance)


def _natural(field: str, what: str) -> int:
    if not field.isascii() or not field.isdigit() or len(field) > 12:
        raise ValueError(f"{what} {field!r} is not a whole number")
    return int(field)


def parse(text: str, gpu_count: int, name: str) -> list[ClaimedProcess]:
    """The processes `text` names, warning once for each bad or repeated line."""
    claims: list[ClaimedProcess] = []
    seen: set[tuple[int, int]] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            claim = parse_line(line, gpu_count)
        except ValueError as exc:
            log.warning("%s:%d: %s; line skipped: %s", name, number, exc, line.strip()[:80])
            continue
        if claim is None:
            continue
        if (claim.gpu, claim.pid) in seen:
            log.warning(
                "%s:%d: pid %d already on GPU %d; line skipped", name, number, claim.pid, claim.gpu
            )
            continue
        seen.add((claim.gpu, claim.pid))
        claims.append(claim)
    return claims


def pid_running(pid: int) -> bool:
    """True while `pid` is a live process (not exited, not a zombie awaiting its parent)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # not ours to read: it exists
        return True


_FileKey = tuple[int, int, int]  # (inode, size, mtime ns): changes whenever the file does


class ProcessFile:
    """The processes a file names for a node of `gpu_count` GPUs, kept up to date lazily."""

    def __init__(
        self,
        path: Path,
        gpu_count: int,
        *,
        running: Callable[[int], bool] = pid_running,
    ) -> None:
        self.path = path
        self.gpu_count = gpu_count
        self._running = running
        self._key: _FileKey | None = None
        self._missing_said = False
        self._claims: list[ClaimedProcess] = []
        self._checked_at: float | None = None
        self._by_gpu: dict[tuple[int, int | None], list[tuple[int, int | None]]] = {}

    def processes(
        self, gpu: int, now: float, gpu_instance_id: int | None = None
    ) -> list[tuple[int, int | None]]:
        """(pid, bytes or None) of the live processes the file puts on GPU `gpu` at `now`
        (with `gpu_instance_id`: in that MIG GPU instance of it, lines "GPU/GI PID")."""
        if now != self._checked_at:
            self._checked_at = now
            self._reload_if_changed()
            self._by_gpu = _by_gpu(c for c in self._claims if self._running(c.pid))
        return self._by_gpu.get((gpu, gpu_instance_id), [])

    def _reload_if_changed(self) -> None:
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            if not self._missing_said:
                log.warning(
                    "simulated process file %s: %s; no processes from it until it can be read",
                    self.path,
                    exc.strerror or exc,
                )
                self._missing_said = True
            self._key, self._claims = None, []
            return
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key == self._key:
            return
        try:
            text = self.path.read_text(errors="replace")
        except OSError as exc:
            log.warning("simulated process file %s: %s", self.path, exc.strerror or exc)
            self._key, self._claims = None, []
            return
        self._key, self._missing_said = key, False
        self._claims = parse(text, self.gpu_count, str(self.path))


def _by_gpu(
    claims: Iterable[ClaimedProcess],
) -> dict[tuple[int, int | None], list[tuple[int, int | None]]]:
    grouped: dict[tuple[int, int | None], list[tuple[int, int | None]]] = {}
    for claim in claims:
        key = (claim.gpu, claim.gpu_instance_id)
        grouped.setdefault(key, []).append((claim.pid, claim.memory_bytes))
    return grouped


def from_environment(gpu_count: int, environ: Mapping[str, str]) -> ProcessFile | None:
    """The ProcessFile NVWATCH_SIM_PROCESS_FILE names, if it is set (for `simulate exec`)."""
    path = environ.get(ENV_VAR)
    return ProcessFile(Path(path), gpu_count) if path else None
