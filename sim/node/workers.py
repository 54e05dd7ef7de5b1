"""Real processes standing for the simulated job's worker on each busy GPU.

The simulated NVML lists one compute process per busy GPU. Process viewers (nvitop,
gpustat -p, the agent's own process metric) look each pid up in /proc, so a made-up pid
shows as "No Such Process" or, worse, as whatever unrelated process holds that number.
`WorkerProcesses` starts one real, idle process per busy GPU (on a GPU in MIG mode, per
busy MIG instance: "sim-job gpu0 gi9 (...)") and the library reports their pids instead.

Each worker is `cat` reading a pipe only this process holds the other end of, named
`sim-job` and with the command line "sim-job gpu3 (nvwatch dgx-h100)" for viewers to
show: it costs no CPU and ~1 MB. It goes away with its owner however the owner ends:
close() kills and reaps it, and if the owner dies (even by SIGKILL) the kernel closes the
pipe and `cat` exits at end of file, so no worker outlives the simulator.
(PR_SET_PDEATHSIG would tie a worker to the *thread* that started it, which under
`serve` may be a short-lived one.)

Who starts them: `nvwatch simulate exec` (for every pynvml process the command runs,
which find the pids in NVWATCH_SIM_WORKER_PIDS) and `serve --simulate` (one node). A
simulated fleet does not: hundreds of nodes in one process would need thousands of
processes, for agents no person watches with a process viewer; its nodes keep
placeholder pids and its CPU cost does not change.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvwatch.sim.nvml.core import NvmlCore

log = logging.getLogger(__name__)

ENV_VAR = "NVWATCH_SIM_WORKER_PIDS"
PROCESS_NAME = "sim-job"  # the process name (comm) process tables show
_REAP_TIMEOUT_S = 5.0


def worker_name(node: str, gpu: int, gpu_instance: int | None = None) -> str:
    """What a process viewer shows as the worker's command line."""
    instance = f" gi{gpu_instance}" if gpu_instance is not None else ""
    return f"sim-job gpu{gpu}{instance} (nvwatch {node})"


class WorkerProcesses:
    """One idle child process per GPU in `gpus` and per MIG GPU instance in `instances`
    ((GPU index, GPU instance id)); `pids` maps GPU index, `instance_pids` the instance
    to its pid."""

    def __init__(
        self, node: str, gpus: Iterable[int], instances: Iterable[tuple[int, int]] = ()
    ) -> None:
        self._children: list[subprocess.Popen[bytes]] = []
        self.pids: dict[int, int] = {}
        self.instance_pids: dict[tuple[int, int], int] = {}
        cat = shutil.which("cat")
        if cat is None:
            log.warning("no `cat` on PATH: simulated GPU processes keep placeholder pids")
            return
        # The kernel names a process (/proc/PID/comm, what `ps` and psutil's name() show)
        # after the file it executes: run `cat` through a link called PROCESS_NAME. The
        # link is needed only until exec; its directory goes as soon as all have started.
        scratch = tempfile.mkdtemp(prefix="nvwatch-sim-job-")
        try:
            program = os.path.join(scratch, PROCESS_NAME)
            os.symlink(cat, program)
            for gpu in gpus:
                self.pids[gpu] = self._start(program, worker_name(node, gpu))
            for gpu, instance in instances:
                pid = self._start(program, worker_name(node, gpu, instance))
                self.instance_pids[(gpu, instance)] = pid
        except OSError as exc:
            self.close()
            log.warning("cannot start simulated GPU processes (%s): placeholder pids", exc)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _start(self, program: str, name: str) -> int:
        child = subprocess.Popen(
            [name],
            executable=program,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C is for the owner, not them
        )
        self._children.append(child)
        return child.pid

    def close(self) -> None:
        """Stop and reap every worker (idempotent)."""
        for child in self._children:
            if child.stdin is not None:
                child.stdin.close()
            child.kill()
        for child in self._children:
            try:
                child.wait(_REAP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("simulated GPU process %d did not exit", child.pid)
        self._children.clear()
        self.pids = {}
        self.instance_pids = {}

    def __enter__(self) -> WorkerProcesses:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def busy_gpus(lib: NvmlCore) -> list[int]:
    """The GPUs whose simulated job holds memory, so NVML lists a process on them (a GPU
    in MIG mode runs its jobs in its instances: busy_instances)."""
    return [
        gpu.index for gpu in lib.gpus if gpu.process_memory_bytes and not _mig_on(lib, gpu.index)
    ]


def busy_instances(lib: NvmlCore) -> list[tuple[int, int]]:
    """(GPU index, GPU instance id) of the MIG instances whose job holds memory."""
    return [
        (index, device.gpu_instance_id)
        for index, state in sorted(lib.mig.items())
        if state.current
        for device in state.devices
        if state.process_memory_bytes(device)
    ]


def _mig_on(lib: NvmlCore, index: int) -> bool:
    state = lib.mig.get(index)
    return state is not None and state.current


def to_environment(pids: Mapping[int, int]) -> str:
    """NVWATCH_SIM_WORKER_PIDS for a child: "0=4101,1=4102"."""
    return ",".join(f"{gpu}={pid}" for gpu, pid in sorted(pids.items()))


def from_environment(environ: Mapping[str, str]) -> dict[int, int]:
    """GPU index -> worker pid from NVWATCH_SIM_WORKER_PIDS; malformed entries ignored
    (the variable is written by `simulate exec`, not by people)."""
    pids: dict[int, int] = {}
    for item in environ.get(ENV_VAR, "").split(","):
        gpu, _, pid = item.partition("=")
        if gpu.strip().isdigit() and pid.strip().isdigit():
            pids[int(gpu)] = int(pid)
    return pids
