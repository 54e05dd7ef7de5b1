"""Per-process reads: the process list and, on GPUs with processes, their utilization
(nvmlDeviceGetProcessUtilization), one driver call each per poll; samples since the
previous poll's newest, idle processes 0, and absent (never 0) where NVML cannot say.

Values are compared with the simulator's state (the GPU's utilization, which its one job
worker does all of), never with what the simulated library answered.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from nvwatch.agent.sources.nvml.samples import GpuSample
from nvwatch.sim.node.process_file import ProcessFile
from nvwatch.sim.nvml import SimulatedNvml
from nvwatch.sim.nvml.abi import ERROR_NOT_SUPPORTED, SUCCESS, address_of, as_int, deref
from tests.nvml.conftest import NodeFactory
from tests.nvml.helpers import exposition, poll, select, value

CALL = "nvmlDeviceGetProcessUtilization"
LIST = "nvmlDeviceGetComputeRunningProcesses_v3"
SM = "nvwatch_gpu_process_sm_utilization_ratio"
MEMORY = "nvwatch_gpu_process_memory_utilization_ratio"
PERCENT = 0.01  # NVML reports whole percent
POLLS = 5


def _calls(lib: SimulatedNvml, call: str = CALL) -> Counter[int | None]:
    return Counter({gpu: n for (name, gpu), n in lib.call_counts.items() if name == call})


def test_one_call_per_gpu_with_processes_and_none_without(node: NodeFactory) -> None:
    idle = {2: "idle", 5: "idle"}
    n = node("dgx-h100", gpu_scenarios=idle)
    source = n.source()
    poll(source, n.clock, 2)
    before, listed_before = _calls(n.lib), _calls(n.lib, LIST)
    samples = poll(source, n.clock, POLLS)
    counted, listed = _calls(n.lib), _calls(n.lib, LIST)
    counted.subtract(before)
    listed.subtract(listed_before)
    for gpu in n.lib.gpus:
        busy = bool(gpu.process_memory_bytes)
        assert busy == (gpu.index not in idle)
        # buffers sized from what the poll knows: no call that only asks for a count, so
        # the utilization call is paid for by the list's saved one
        assert counted[gpu.index] == (POLLS if busy else 0), gpu.index
        assert listed[gpu.index] == POLLS, gpu.index
    last = samples[-1]
    for sample, gpu in zip(last.gpus, n.lib.gpus, strict=True):
        if not gpu.process_memory_bytes:
            assert sample.processes == ()
            continue
        (process,) = sample.processes
        assert process.sm_utilization_ratio == pytest.approx(gpu.utilization, abs=PERCENT)
        assert process.memory_utilization_ratio == pytest.approx(
            gpu.memory_utilization, abs=PERCENT
        )


class _Recording:
    """The library, with each nvmlDeviceGetProcessUtilization's last-seen stamp recorded
    and the samples it wrote."""

    def __init__(self, inner: SimulatedNvml) -> None:
        self.inner = inner
        self.asked: list[int] = []
        self.answered: list[int] = []

    def nvmlDeviceGetProcessUtilization(
        self, handle: Any, samples: Any, count: Any, last_seen: Any
    ) -> int:
        ret = int(self.inner.nvmlDeviceGetProcessUtilization(handle, samples, count, last_seen))
        if address_of(handle) == self.inner.handle_address(0):
            self.asked.append(as_int(last_seen))
            if ret == SUCCESS:
                written = deref(samples)
                self.answered += [written[i].timeStamp for i in range(as_int(deref(count)))]
        return ret

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_each_poll_asks_for_the_samples_after_the_previous_polls_newest(
    node: NodeFactory,
) -> None:
    recording: list[_Recording] = []

    def wrap(lib: SimulatedNvml) -> _Recording:
        recording.append(_Recording(lib))
        return recording[0]

    n = node("dgx1-v100", wrap=wrap)
    poll(n.source(), n.clock, 3)
    lib = recording[0]
    # the first read takes NVML's whole buffer; each later one starts at the newest
    # sample the previous one returned
    assert lib.asked == [0, *lib.answered[:-1]]
    assert all(b > a for a, b in zip(lib.answered, lib.answered[1:], strict=False))


def test_a_process_without_samples_is_idle_not_absent(node: NodeFactory, tmp_path: Path) -> None:
    # a real process NVML lists on GPU 0 next to the job's worker: it holds memory but
    # runs no kernels, so NVML keeps no sample for it
    path = tmp_path / "processes"
    path.write_text(f"0 {os.getpid()} 512\n")
    n = node("dgx-a100")
    n.lib.process_file = ProcessFile(path, n.lib.profile.gpu_count)
    (sample,) = poll(n.source(), n.clock, 1)
    series = exposition(sample)
    gpu = n.lib.gpus[0]
    worker = str(n.lib.worker_pid(0))
    assert value(series, SM, gpu="0", pid=worker) == pytest.approx(gpu.utilization, abs=PERCENT)
    assert value(series, SM, gpu="0", pid=str(os.getpid())) == 0.0
    assert value(series, MEMORY, gpu="0", pid=str(os.getpid())) == 0.0


class _NotSupportedOn:
    """The library, with nvmlDeviceGetProcessUtilization NotSupported on one GPU."""

    def __init__(self, inner: SimulatedNvml, gpu: int) -> None:
        self.inner = inner
        self.refused = 0
        self._handle = inner.handle_address(gpu)

    def nvmlDeviceGetProcessUtilization(self, handle: Any, *args: Any) -> int:
        if address_of(handle) == self._handle:
            self.refused += 1
            return ERROR_NOT_SUPPORTED
        return int(self.inner.nvmlDeviceGetProcessUtilization(handle, *args))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_not_supported_is_absent_and_not_asked_again_every_poll(node: NodeFactory) -> None:
    wrapped: list[_NotSupportedOn] = []

    def wrap(lib: SimulatedNvml) -> _NotSupportedOn:
        wrapped.append(_NotSupportedOn(lib, gpu=1))
        return wrapped[0]

    n = node("dgx1-v100", wrap=wrap)
    samples = poll(n.source(), n.clock, POLLS)
    series = exposition(samples[-1])
    # GPU 1's process keeps its memory series; its utilization is absent, never 0
    assert select(series, "nvwatch_gpu_process_memory_bytes", gpu="1")
    assert not select(series, SM, gpu="1")
    assert not select(series, MEMORY, gpu="1")
    assert len(select(series, SM)) == n.lib.profile.gpu_count - 1
    # NotSupported is remembered (re-probed after the device layer's interval)
    assert wrapped[0].refused == 1
    gpu1: GpuSample = samples[-1].gpus[1]
    assert gpu1.processes[0].sm_utilization_ratio is None


def test_more_samples_than_the_buffer_are_all_read(
    node: NodeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NVML has more samples than this poll's processes (graphics clients, or processes
    # that exited): pynvml's two-call read, and the listed process still gets its own
    from nvwatch.sim.nvml.processes import ProcessQueries

    real = ProcessQueries._busy_samples

    def crowded(self: ProcessQueries, gpu: Any, last_seen: int) -> list[tuple[int, int, int]]:
        rows = real(self, gpu, last_seen)
        return rows + [(900_000 + i, 50, 50) for i in range(12)] if rows else rows

    monkeypatch.setattr(ProcessQueries, "_busy_samples", crowded)
    n = node("dgx1-v100")
    (sample,) = poll(n.source(), n.clock, 1)
    assert _calls(n.lib)[0] == 3  # the short call, then the wrapper's count and read
    (process,) = sample.gpus[0].processes
    gpu = n.lib.gpus[0]
    assert process.sm_utilization_ratio == pytest.approx(gpu.utilization, abs=PERCENT)
