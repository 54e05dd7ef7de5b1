"""The device layer's conversions: what NVML hands back, made safe for one value."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml
import pytest

from nvwatch.agent.catalogue import CATALOGUE
from nvwatch.agent.sources.nvml.device import (
    bus_key,
    error_name,
    plain_int,
    plain_number,
    text,
)
from nvwatch.sim import nvml as sim_nvml
from tests.nvml.conftest import NodeFactory
from tests.nvml.helpers import exposition, names_for_gpu, poll, value


def test_text_decodes_bytes_and_stops_at_nul() -> None:
    assert text(b"Tesla T4\x00garbage") == "Tesla T4"
    assert text(" 535.216.03 ") == "535.216.03"
    assert text(None) == ""


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(42, 42.0), (0, 0.0), (0xFFFFFFFF, None), (2**64 - 1, None), (-3, None),
     (float("nan"), None), (True, None), ("12", None), (1.5, 1.5)],
)  # fmt: skip
def test_plain_number_drops_sentinels_and_garbage(raw: object, expected: float | None) -> None:
    assert plain_number(raw) == expected


def test_plain_int() -> None:
    assert plain_int(7.9) == 7
    assert plain_int(None) is None


def test_bus_key_is_the_sysfs_form_or_none() -> None:
    # the parser itself is tested with the affinity tests (tests/infiniband)
    assert bus_key("00010000:3B:00.0") == "10000:3b:00.0"
    assert bus_key("00000000:3B:00.0") == bus_key("0000:3b:00.0") == "0000:3b:00.0"
    assert bus_key("garbage from one call") is None


def test_error_names() -> None:
    assert error_name(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "GpuIsLost"


# What each NVML error means for the GPU that answered it (NVML's reference): these say
# the GPU, or the driver behind it, can no longer be trusted this poll; every other code
# is about the one value asked for (not supported, no data yet, a timeout, a bad size...).
GPU_GONE = {
    pynvml.NVML_ERROR_GPU_IS_LOST: "fell off the bus or became inaccessible",
    pynvml.NVML_ERROR_RESET_REQUIRED: "must be reset before it can be used again",
    pynvml.NVML_ERROR_IRQ_ISSUE: "the kernel saw an interrupt problem with the GPU",
    pynvml.NVML_ERROR_UNKNOWN: "an internal driver error",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "the driver is gone",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "library and kernel module disagree",
    pynvml.NVML_ERROR_UNINITIALIZED: "the library lost its initialisation",
}
CODES = [
    *sorted(
        {v for k, v in vars(pynvml).items() if k.startswith("NVML_ERROR_") and isinstance(v, int)}
        - {pynvml.NVML_SUCCESS}
    ),
    12345,  # and a code this pynvml does not know
]


class _FailingUtilization:
    """nvmlDeviceGetUtilizationRates of one GPU answers `code` while `failing`."""

    def __init__(self, inner: sim_nvml.SimulatedNvml, victim: int, code: int) -> None:
        self.inner, self.victim, self.code = inner, inner.handle_address(victim), code
        self.failing = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)
        if name != "nvmlDeviceGetUtilizationRates":
            return real

        def answer(handle: Any, *args: Any) -> Any:
            if self.failing and ctypes.cast(handle, ctypes.c_void_p).value == self.victim:
                return self.code
            return real(handle, *args)

        return answer


_NAMES = {v: k for k, v in vars(pynvml).items() if k.startswith("NVML_ERROR_")}


@pytest.mark.parametrize("code", CODES, ids=lambda code: _NAMES.get(code, str(code)))
def test_a_failed_call_takes_the_gpu_down_only_when_the_gpu_is_gone(
    node: NodeFactory, code: int
) -> None:
    """One GPU's utilization query fails with `code`: the poll reports that GPU down,
    its other GPUs untouched, for the codes of GPU_GONE; for every other code the GPU
    stays up and only its utilization is missing."""
    wrapped: list[_FailingUtilization] = []

    def wrap(lib: sim_nvml.SimulatedNvml) -> _FailingUtilization:
        wrapped.append(_FailingUtilization(lib, victim=1, code=code))
        return wrapped[-1]

    n = node("inference-t4", wrap=wrap)
    source = n.source()
    healthy = poll(source, n.clock, 2)[-1]
    wrapped[-1].failing = True
    failed = poll(source, n.clock, 1)[-1]
    assert [g.up for g in healthy.gpus] == [True] * 4
    assert [g.up for g in failed.gpus] == [True, code not in GPU_GONE, True, True]
    before, after = exposition(healthy), exposition(failed)
    for gpu in (0, 2, 3):
        assert names_for_gpu(after, gpu) == names_for_gpu(before, gpu), gpu
    left = {name for name, _ in names_for_gpu(after, 1)}
    if code in GPU_GONE:  # a GPU down keeps its identity and up series alone
        assert left <= {m.name for m in CATALOGUE if m.even_when_down}
        assert value(after, "nvwatch_gpu_up", gpu="1") == 0
    else:  # what the failed call reads, and nothing else
        lost = {name for name, _ in names_for_gpu(before, 1) - names_for_gpu(after, 1)}
        assert lost == {m.name for m in CATALOGUE if "nvmlDeviceGetUtilizationRates" in m.origin}
