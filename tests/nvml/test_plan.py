"""Each GPU's plan follows its decisions and its links, whichever changes first.

The plan (agent/sources/nvml/plan.py) holds the field request, the field/call decisions
and each NVLink link's sources; these tests change one of its inputs at a time and check
what a poll reads afterwards: which entries the batch asks for, which calls are made,
and that the values equal those of an untouched node.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from nvwatch.agent.sources.nvml.samples import NvLinkSample
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml import fields as sim_fields
from nvwatch.sim.nvml.abi import ERROR_NOT_SUPPORTED
from tests.nvml.conftest import Node, NodeFactory
from tests.nvml.helpers import poll

POLLS = 4
_LINK_STATE_CALL = "nvmlDeviceGetNvLinkState"
_ERROR_COUNTER_CALL = "nvmlDeviceGetNvLinkErrorCounter"


class _ProbeFails:
    """Fails nvmlDeviceGetNvLinkState on one GPU while `failing`: its link probe is
    interrupted (a transient error, not "no such link") and tried again next poll."""

    def __init__(self, inner: sim_nvml.SimulatedNvml, victim: int) -> None:
        self.inner = inner
        self.victim = inner.handle_address(victim)
        self.failing = True

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)
        if name != _LINK_STATE_CALL:
            return real

        def maybe_fail(handle: Any, *args: Any) -> Any:
            address = ctypes.cast(handle, ctypes.c_void_p).value
            if self.failing and address == self.victim:
                return pynvml.NVML_ERROR_TIMEOUT
            return real(handle, *args)

        return maybe_fail


class _CountedField:
    """A field reader that counts how often the batch asks for it, per GPU."""

    def __init__(self, reader: Callable[[SimulatedGpu, int], sim_fields.FieldValue]) -> None:
        self.reader = reader
        self.asked: Counter[int] = Counter()

    def __call__(self, gpu: SimulatedGpu, scope: int) -> sim_fields.FieldValue:
        self.asked[gpu.index] += 1
        return self.reader(gpu, scope)


def _calls(n: Node, polls: int, run: Callable[[], object]) -> Counter[tuple[str, int | None]]:
    before = Counter(n.lib.call_counts)
    for _ in range(polls):
        run()
    counted = Counter(n.lib.call_counts)
    counted.subtract(before)
    return +counted


def _links(node: NodeFactory, profile: str) -> list[tuple[NvLinkSample, ...]]:
    """Each GPU's links after POLLS polls of an untouched node."""
    clean = node(profile)
    sample = poll(clean.source(), clean.clock, POLLS)[-1]
    clean.sources[-1].close()
    return [gpu.nvlinks for gpu in sample.gpus]


def test_links_found_on_a_later_poll_are_read_from_the_batch(node: NodeFactory) -> None:
    expected = _links(node, "dgx-h100")
    wrapper: list[_ProbeFails] = []

    def wrap(lib: sim_nvml.SimulatedNvml) -> object:
        wrapper.append(_ProbeFails(lib, victim=0))
        return wrapper[-1]

    n = node("dgx-h100", wrap=wrap)
    source = n.source()
    (first,) = poll(source, n.clock, 1)
    assert first.gpus[0].nvlinks == () and first.gpus[1].nvlinks  # probe interrupted
    wrapper[-1].failing = False
    samples = poll(source, n.clock, POLLS - 1)
    assert [gpu.nvlinks for gpu in samples[-1].gpus] == expected
    counted = _calls(n, 2, lambda: poll(source, n.clock, 1))
    # once found, the links' state and counters come from the batch exactly as on a GPU
    # whose probe never failed: no per-link state call, the same error counter calls
    # (those of links 12+ that have no field id)
    assert counted[(_LINK_STATE_CALL, 0)] == 0
    assert counted[(_ERROR_COUNTER_CALL, 0)] == counted[(_ERROR_COUNTER_CALL, 1)] > 0


def test_a_link_field_the_driver_lacks_falls_back_for_that_link_alone(
    node: NodeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _links(node, "dgx-h100")
    # NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L3 (nvml.h: 32 + link for links 0-5)
    field_id = pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L3
    counted_field = _CountedField(lambda gpu, scope: (ERROR_NOT_SUPPORTED, 0, 0))
    monkeypatch.setitem(sim_fields.FIELDS, field_id, counted_field)
    n = node("dgx-h100")
    source = n.source()
    samples = poll(source, n.clock, POLLS)
    gpus = n.lib.profile.gpu_count
    # asked once (the first poll decided "call"), never again
    assert counted_field.asked == Counter(dict.fromkeys(range(gpus), 1))
    # the counter is the call's now, with the value the field would have given
    assert [gpu.nvlinks for gpu in samples[-1].gpus] == expected
    with_fallback = _calls(n, 2, lambda: poll(source, n.clock, 1))
    monkeypatch.undo()
    clean = node("dgx-h100")
    clean_source = clean.source()
    poll(clean_source, clean.clock, POLLS)
    without = _calls(clean, 2, lambda: poll(clean_source, clean.clock, 1))
    for gpu in range(gpus):
        # one call a poll more than a driver with the field: link 3's flit CRC alone
        extra = with_fallback[(_ERROR_COUNTER_CALL, gpu)] - without[(_ERROR_COUNTER_CALL, gpu)]
        assert extra == 2


def test_decisions_taken_before_the_links_are_found_still_hold_after(
    node: NodeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    energy = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    counted_field = _CountedField(lambda gpu, scope: (ERROR_NOT_SUPPORTED, 0, 0))
    monkeypatch.setitem(sim_fields.FIELDS, energy, counted_field)
    wrapper: list[_ProbeFails] = []

    def wrap(lib: sim_nvml.SimulatedNvml) -> object:
        wrapper.append(_ProbeFails(lib, victim=0))
        return wrapper[-1]

    n = node("dgx-h100", wrap=wrap)
    source = n.source()
    poll(source, n.clock, 1)  # GPU 0: energy decided "call", no links yet
    wrapper[-1].failing = False
    (sample,) = poll(source, n.clock, 1)  # links found: a new request for them
    assert sample.gpus[0].nvlinks
    counted = _calls(n, 2, lambda: poll(source, n.clock, 1))
    # the new request leaves energy out: it is the call's for good
    assert counted_field.asked[0] == 1
    assert counted[("nvmlDeviceGetTotalEnergyConsumption", 0)] == 2
    assert sample.gpus[0].energy_joules is not None
