"""The field batch's decoder against pynvml's own reading of the same array.

`_entry_fields` reads nvmlDeviceGetFieldValues' answer from the array's bytes (one
struct loop); pynvml reads it attribute by attribute through ctypes. Both must agree
for every value type the union has, including the narrow and signed members written
over a union whose other bytes hold garbage, as a driver may leave them.
"""

from __future__ import annotations

import ctypes
import math
import sys

import pynvml
import pytest

from nvwatch.agent.sources.nvml.fields import _BITS_LAYOUT, _entry_fields

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
    decoded = list(_entry_fields(array, len(array)))
    expected = [
        (int(entry.nvmlReturn), getattr(entry.value, _MEMBERS[int(entry.valueType)][0]))
        for entry in array[: len(cases)]
    ]
    assert decoded[: len(cases)] == expected
    assert decoded[-1] == (pynvml.NVML_ERROR_NOT_SUPPORTED, None)


@pytest.mark.parametrize("count", [0, 1, 5])
def test_only_the_first_count_entries_are_read(count: int) -> None:
    array, _ = _answer()
    assert len(list(_entry_fields(array, count))) == count
