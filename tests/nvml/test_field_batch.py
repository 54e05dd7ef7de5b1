"""The field batch's decisions when an entry answers something other than a value.

An entry that fails with a transient error leaves its family undecided (no value, no
fallback to the call) until an answer decides it; an entry carrying a code that means
the GPU is gone takes that GPU down, and only that GPU.
"""

from __future__ import annotations

from collections import Counter

import pynvml
import pytest

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml import fields as sim_fields
from tests.nvml.conftest import NodeFactory
from tests.nvml.helpers import poll

_ENERGY = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
_ENERGY_CALL = "nvmlDeviceGetTotalEnergyConsumption"


class _FailingField:
    """A field that answers `code` on the GPUs in `on` while `failing`, else its value."""

    def __init__(self, field_id: int, code: int, on: set[int]) -> None:
        self.inner = sim_fields.FIELDS[field_id]
        self.code = code
        self.on = on
        self.failing = True

    def __call__(self, gpu: SimulatedGpu, scope: int) -> sim_fields.FieldValue:
        if self.failing and gpu.index in self.on:
            return (self.code, 0, 0)
        return self.inner(gpu, scope)


def test_a_transient_entry_error_waits_for_an_answer_rather_than_falling_back(
    node: NodeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = _FailingField(_ENERGY, pynvml.NVML_ERROR_TIMEOUT, on={0, 1, 2, 3})
    monkeypatch.setitem(sim_fields.FIELDS, _ENERGY, failing)
    n = node("dgx1-v100")
    source = n.source()
    before = Counter(n.lib.call_counts)
    for sample in poll(source, n.clock, 3):
        # no value while the entry fails, on the failing GPUs alone
        assert [gpu.energy_joules is None for gpu in sample.gpus] == [True] * 4 + [False] * 4
    failing.failing = False
    (sample,) = poll(source, n.clock, 1)
    for read, simulated in zip(sample.gpus, n.lib.gpus, strict=True):
        assert read.energy_joules == pytest.approx(int(simulated.energy_mj) / 1e3)
    calls = Counter(n.lib.call_counts)
    calls.subtract(before)
    # the batch decided "field" once it answered: the call was never asked
    assert not any(calls[(_ENERGY_CALL, gpu)] for gpu in range(8))


def test_an_entry_saying_the_gpu_is_lost_takes_down_that_gpu_alone(
    node: NodeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = _FailingField(_ENERGY, pynvml.NVML_ERROR_GPU_IS_LOST, on={2})
    monkeypatch.setitem(sim_fields.FIELDS, _ENERGY, failing)
    n = node("dgx-h100")
    source = n.source()
    (sample,) = poll(source, n.clock, 1)
    assert [gpu.up for gpu in sample.gpus] == [index != 2 for index in range(8)]
    assert sample.gpus[2].power_watts is None and sample.gpus[2].nvlinks == ()
    assert all(gpu.nvlinks for gpu in sample.gpus if gpu.index != 2)
    failing.failing = False
    (sample,) = poll(source, n.clock, 1)
    assert all(gpu.up for gpu in sample.gpus)
    assert sample.gpus[2].energy_joules == pytest.approx(int(n.lib.gpus[2].energy_mj) / 1e3)
