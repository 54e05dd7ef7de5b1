"""NVML calls per GPU per poll, counted by the simulated library (call_counts).

On a real node every NVML call is an ioctl into the driver, so the source reads every
GPU-level value that has a field id through one nvmlDeviceGetFieldValues batch per GPU
and keeps static readings between slow refreshes (STATIC_REFRESH_S).
"""

from __future__ import annotations

from collections import Counter

import pynvml
import pytest

from agent.sim.nvml import fields as sim_fields
from agent.sim.nvml.abi import ERROR_INVALID_ARGUMENT, ERROR_NOT_SUPPORTED
from agent.sources.nvml import NvmlSource
from agent.sources.nvml.static import STATIC_REFRESH_S
from tests.nvml.conftest import Node, NodeFactory
from tests.nvml.helpers import poll

WARM_POLLS = 2  # the first poll discovers links and reads static values
COUNTED_POLLS = 5

# Measured at 4e5c2dd, before the field batch took ECC, retirement, remapped rows,
# PCIe replays, violation times and the NVLink error counters of links 12+, and before
# the supported clock-event mask was kept: dgx-h100 120, dgx1-v100 33 calls per GPU per
# poll. After: 35 and 16. The bound is half of before.
BEFORE = {"dgx-h100": 120, "dgx1-v100": 33}


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
    per_poll = _per_gpu_per_poll(counted, n.lib.profile.gpu_count, COUNTED_POLLS)
    assert per_poll <= BEFORE[profile] / 2, sorted(counted.items())
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

    results = Results(settings={}, nvml_calls=[measure_nvml_calls("dgx1-v100", polls=3)])
    assert results.nvml_calls[0].batches_per_gpu_per_poll == 1
    assert [v.passed for v in nvml_calls_verdicts(results)] == [True]
    assert "| dgx1-v100 | 8 | **16.0** | 33 | 1 |" in nvml_calls_section(results)


def test_a_missed_call_target_is_explained() -> None:
    from benchmarks.nvml_calls import NvmlCalls
    from benchmarks.report.misses import misses_section
    from benchmarks.report.model import Results

    calls = NvmlCalls("geforce-workstation", 4, 3, 17.0, 1.0, 18.5)
    text = misses_section(Results(settings={}, nvml_calls=[calls]))
    assert "- **NVML calls**: geforce-workstation NVML calls per GPU per poll" in text
