"""NVML calls per GPU per poll, counted by the simulated library (call_counts).

On a real node every NVML call is an ioctl into the driver, so the source reads every
GPU-level value that has a field id through one nvmlDeviceGetFieldValues batch per GPU
and keeps static readings between slow refreshes (STATIC_REFRESH_S).
"""

from __future__ import annotations

from collections import Counter

import pynvml
import pytest

from benchmarks.nvml_calls import NEW_READINGS
from nvwatch.agent.sources.nvml import NvmlSource
from nvwatch.agent.sources.nvml.static import STATIC_REFRESH_S
from nvwatch.sim.nvml import fields as sim_fields
from nvwatch.sim.nvml.abi import ERROR_INVALID_ARGUMENT, ERROR_NOT_SUPPORTED
from tests.nvml.conftest import Node, NodeFactory
from tests.nvml.helpers import poll

WARM_POLLS = 2  # the first poll discovers links and reads static values
COUNTED_POLLS = 5

# Measured at 4e5c2dd, before the field batch took ECC, retirement, remapped rows,
# PCIe replays, violation times and the NVLink error counters of links 12+, and before
# the supported clock-event mask was kept: dgx-h100 120, dgx1-v100 33 calls per GPU per
# poll (dgx-a100 29). After: 35, 16 and 16; with the enforced power limit in the batch
# and the process list in one call: 33, 14 and 14. The bound is half of before.
BEFORE = {"dgx-h100": 120, "dgx1-v100": 33, "dgx-a100": 29}


def _calls(n: Node, source: NvmlSource, polls: int) -> Counter[tuple[str, int | None]]:
    """Calls the library answered during `polls` polls, by (function, GPU)."""
    before = Counter(n.lib.call_counts)
    poll(source, n.clock, polls)
    counted = Counter(n.lib.call_counts)
    counted.subtract(before)
    return +counted


def _per_gpu_per_poll(counted: Counter[tuple[str, int | None]], gpus: int, polls: int) -> float:
    return sum(c for (_, gpu), c in counted.items() if gpu is not None) / gpus / polls


@pytest.mark.parametrize("profile", sorted(BEFORE))
@pytest.mark.parametrize("detail", ["link", "gpu"])
def test_calls_per_gpu_per_poll_are_half_of_before(
    node: NodeFactory, profile: str, detail: str
) -> None:
    n = node(profile)
    source = n.source(nvlink_detail=detail)
    poll(source, n.clock, WARM_POLLS)
    counted = _calls(n, source, COUNTED_POLLS)
    # per-process utilization came after *before*: counted apart, like with like
    # (its own cost, one call per GPU with processes: test_process_utilization.py)
    new = Counter({key: c for key, c in counted.items() if key[0] in NEW_READINGS})
    per_poll = _per_gpu_per_poll(counted - new, n.lib.profile.gpu_count, COUNTED_POLLS)
    assert per_poll <= BEFORE[profile] / 2, sorted(counted.items())
    assert _per_gpu_per_poll(new, n.lib.profile.gpu_count, COUNTED_POLLS) <= 1
    # one batch per GPU per poll carries every field-backed value
    for gpu in range(n.lib.profile.gpu_count):
        assert counted[("nvmlDeviceGetFieldValues", gpu)] == COUNTED_POLLS


@pytest.mark.parametrize("code", [ERROR_NOT_SUPPORTED, ERROR_INVALID_ARGUMENT])
def test_a_field_answering_not_supported_falls_back_to_its_call_alone(
    node: NodeFactory, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # an older driver: the batch succeeds, but this one entry says NotSupported (or
    # InvalidArgument, for an id the driver does not know)
    field_id = pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL
    monkeypatch.setitem(sim_fields.FIELDS, field_id, lambda gpu, scope: (code, 0, 0))
    n = node("dgx1-v100", scenario="ecc-dbe")
    source = n.source()
    poll(source, n.clock, WARM_POLLS)
    counted = _calls(n, source, COUNTED_POLLS)
    sample = source.collect()  # same clock instant as the last counted poll
    gpus = n.lib.profile.gpu_count
    for gpu in range(gpus):
        # the corrected volatile count alone, once a poll; the other three stay batched
        assert counted[("nvmlDeviceGetTotalEccErrors", gpu)] == COUNTED_POLLS
        assert counted[("nvmlDeviceGetFieldValues", gpu)] == COUNTED_POLLS
    for read, simulated in zip(sample.gpus, n.lib.gpus, strict=True):
        assert read.ecc_corrected_volatile == int(simulated.ecc.corrected_volatile)
        assert read.ecc_uncorrected_volatile == int(simulated.ecc.uncorrected_volatile)
        assert read.ecc_corrected_aggregate == int(simulated.ecc.corrected_aggregate)


def test_the_power_limit_comes_from_the_batch_or_else_its_call(
    node: NodeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = node("dgx-a100", gpu_scenarios={1: "power-capped"})
    source = n.source()
    poll(source, n.clock, WARM_POLLS)
    counted = _calls(n, source, COUNTED_POLLS)
    sample = source.collect()
    assert counted[("nvmlDeviceGetEnforcedPowerLimit", 0)] == 0
    limits = [gpu.power_limit_watts for gpu in sample.gpus]
    assert limits == [gpu.power_limit_w for gpu in n.lib.gpus]
    assert len(set(limits)) > 1  # the capped GPU differs: a value, not a copy of the TDP
    # a driver without the field: the call, once a poll, same values
    field_id = pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT
    monkeypatch.setitem(sim_fields.FIELDS, field_id, lambda gpu, scope: (ERROR_NOT_SUPPORTED, 0, 0))
    old = node("dgx-a100", gpu_scenarios={1: "power-capped"})
    source = old.source()
    poll(source, old.clock, WARM_POLLS)
    counted = _calls(old, source, COUNTED_POLLS)
    sample = source.collect()
    assert counted[("nvmlDeviceGetEnforcedPowerLimit", 0)] == COUNTED_POLLS
    assert [gpu.power_limit_watts for gpu in sample.gpus] == limits


def test_the_process_list_takes_one_call_however_many_processes(node: NodeFactory) -> None:
    n = node("dgx-a100")
    source = n.source()
    poll(source, n.clock, WARM_POLLS)
    counted = _calls(n, source, COUNTED_POLLS)
    sample = source.collect()
    busy = [gpu.index for gpu in n.lib.gpus if gpu.process_memory_bytes]
    assert busy  # the profile's job holds memory on its GPUs
    for gpu in range(n.lib.profile.gpu_count):
        assert counted[("nvmlDeviceGetComputeRunningProcesses_v3", gpu)] == COUNTED_POLLS
    for index in busy:
        (process,) = sample.gpus[index].processes
        assert process.pid == n.lib.worker_pid(index)
        assert process.memory_bytes == n.lib.gpus[index].process_memory_bytes


def test_a_process_list_longer_than_the_first_room_is_read_whole(
    node: NodeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvwatch.agent.sources.nvml import process_list
    from nvwatch.sim.nvml.memory import MemoryQueries

    many = [(100_000 + i, (i + 1) << 20) for i in range(process_list.FIRST_ROOM + 3)]
    monkeypatch.setattr(MemoryQueries, "_processes", lambda self, gpu: many)
    n = node("dgx1-v100")
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        before = n.lib.call_counts[("nvmlDeviceGetComputeRunningProcesses_v3", 0)]
        listed = process_list.compute_processes(handle)
    finally:
        pynvml.nvmlShutdown()
    assert [(p.pid, p.usedGpuMemory) for p in listed] == many
    # the first try had too little room, the second the whole list
    assert n.lib.call_counts[("nvmlDeviceGetComputeRunningProcesses_v3", 0)] == before + 2


def test_static_readings_are_read_again_on_the_slow_cadence(node: NodeFactory) -> None:
    n = node("dgx1-v100")
    source = n.source()
    poll(source, n.clock, WARM_POLLS)
    name = "nvmlDeviceGetPowerManagementDefaultLimit"
    assert _calls(n, source, COUNTED_POLLS)[(name, 0)] == 0
    n.clock.advance(STATIC_REFRESH_S)
    source.collect()
    assert n.lib.call_counts[(name, 0)] == 2  # the first poll's read, and the refresh
    # identity and NVLink far ends too: read at start, then once more
    links = len(n.lib.gpus[0].links)
    assert n.lib.call_counts[("nvmlDeviceGetVbiosVersion", 0)] == 2
    assert n.lib.call_counts[("nvmlDeviceGetNvLinkRemotePciInfo_v2", 0)] == 2 * links


def test_the_benchmark_reports_the_figure_and_judges_it() -> None:
    from benchmarks.nvml_calls import measure_nvml_calls
    from benchmarks.report.model import Results
    from benchmarks.report.nvml_calls import nvml_calls_section, nvml_calls_verdicts

    calls = measure_nvml_calls("dgx1-v100", polls=3)
    results = Results(settings={}, nvml_calls=[calls])
    assert calls.batches_per_gpu_per_poll == 1
    assert calls.per_gpu_per_poll <= 33 / 2
    assert [v.passed for v in nvml_calls_verdicts(results)] == [True]
    row = f"| dgx1-v100 | 8 | **{calls.per_gpu_per_poll:.1f}** | 33 | 1 |"
    assert row in nvml_calls_section(results)


def test_a_missed_call_target_is_explained() -> None:
    from benchmarks.nvml_calls import NvmlCalls
    from benchmarks.report.misses import misses_section
    from benchmarks.report.model import Results

    calls = NvmlCalls("geforce-workstation", 4, 3, 17.0, 1.0, 18.5)
    text = misses_section(Results(settings={}, nvml_calls=[calls]))
    assert "- **NVML calls**: geforce-workstation NVML calls per GPU per poll" in text
