"""The device layer's conversions: what NVML hands back, made safe for one value."""

from __future__ import annotations

import pynvml
import pytest

from nvwatch.agent.sources.nvml.device import (
    DOWN_CODES,
    bus_key,
    error_name,
    plain_int,
    plain_number,
    text,
)


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


def test_down_codes_and_names() -> None:
    assert pynvml.NVML_ERROR_GPU_IS_LOST in DOWN_CODES
    assert pynvml.NVML_ERROR_NOT_SUPPORTED not in DOWN_CODES
    assert error_name(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "GpuIsLost"
