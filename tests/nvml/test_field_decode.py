"""The field batch's decoder against pynvml's own reading of the same array.

`decode_answer` reads nvmlDeviceGetFieldValues' answer from the array's bytes (one
struct loop); pynvml reads it attribute by attribute through ctypes. Both must agree,
through the device layer's `plain_number` (sentinels, negatives and non-finite values
are no value), for every value type the union has, including the narrow and signed
members written over a union whose other bytes hold garbage, as a driver may leave them.
"""

from __future__ import annotations

import ctypes
import math
import sys

import pynvml
import pytest

from nvwatch.agent.sources.nvml.device import plain_number
from nvwatch.agent.sources.nvml.fields import _BITS_LAYOUT, decode_answer

_MEMBERS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: ("dVal", [0.0, 1.5, -2.25, math.inf, 1e300]),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: ("uiVal", [0, 7, 2**32 - 1]),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: ("ulVal", [0, 2**40 + 3]),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: ("ullVal", [0, 2**64 - 1, 12345678901234]),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: ("sllVal", [-1, -(2**63), 2**63 - 1]),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: ("siVal", [-1, -(2**31), 5]),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: ("usVal", [0, 65535, 80]),
}


def _answer() -> tuple[ctypes.Array[pynvml.c_nvmlFieldValue_t], list[tuple[int, object]]]:
    cases = [(t, v) for t, (_, values) in _MEMBERS.items() for v in values]
    array = (pynvml.c_nvmlFieldValue_t * (len(cases) + 1))()
    for entry, (value_type, value) in zip(array, cases, strict=False):
        entry.value.ullVal = 0xA5A5A5A5A5A5A5A5  # garbage in the bytes a narrow member leaves
        setattr(entry.value, _MEMBERS[value_type][0], value)
        entry.valueType = value_type
        entry.nvmlReturn = pynvml.NVML_SUCCESS
    array[len(cases)].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    array[len(cases)].valueType = 99  # no such type: no value
    return array, cases


def test_every_value_type_decodes_as_pynvml_reads_it() -> None:
    # the one-struct path is the one under test wherever the layout allows it
    assert _BITS_LAYOUT or sys.byteorder != "little"
    array, cases = _answer()
    values, failed = decode_answer(array, len(array))
    expected = [
        plain_number(getattr(entry.value, _MEMBERS[int(entry.valueType)][0]))
        for entry in array[: len(cases)]
    ]
    assert values[: len(cases)] == expected
    # the cases hold values that are kept and values that are no value
    assert None in expected and any(v is not None and v > 0 for v in expected)
    assert values[-1] is None
    assert failed == {len(cases): pynvml.NVML_ERROR_NOT_SUPPORTED}


def test_the_attribute_path_decodes_alike() -> None:
    # a list of entries, not a ctypes array: the path for wrapped or older bindings
    array, _ = _answer()
    assert decode_answer(list(array), len(array)) == decode_answer(array, len(array))


@pytest.mark.parametrize("count", [0, 1, 5])
def test_only_the_first_count_entries_are_read(count: int) -> None:
    array, _ = _answer()
    values, _ = decode_answer(array, count)
    assert len(values) == count
