"""Field batching: many readings of one GPU in one nvmlDeviceGetFieldValues call.

The NVLink counters (data TX/RX, state, speed, error counters) and every GPU-level
reading with a field id (GPU_FIELDS: memory temperature, energy, enforced power limit,
ECC totals, page retirement, remapped rows, PCIe replays, violation times) go through one
nvmlDeviceGetFieldValues call per GPU: one ioctl into the driver for ~40-200 values,
where the per-call functions cost one ioctl each (an H100 with 18 links would need ~130
round trips per poll for NVLink alone). Readings without a field id, or whose field
differs from the call (power draw: NVML_FI_DEV_POWER_INSTANT is not the averaged
nvmlDeviceGetPowerUsage on every board; PCIe throughput: the fields are cumulative
bytes, the call a KiB/s rate), stay on their calls.

The readings are grouped in "families" (e.g. nvlink_tx: one field id per link), each
decided once per GPU to come from the batch or from its call; the decisions, and the
request they leave, are kept in the GPU's plan (plan.py). This module is the batch on
the wire: the request's bytes, the call, and the answer decoded.
"""

from __future__ import annotations

import ctypes
import itertools
import struct
import sys
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import pynvml

from nvwatch.agent.sources.nvml.device import NO_VALUE_SENTINELS, plain_number
from nvwatch.agent.sources.nvml.samples import THROTTLE_POLICIES

#: (field id, scope id) pairs of one family; the scope is the link for per-link fields.
FieldIds = Sequence[tuple[int, int]]


#: The GPU-wide readings of the field batch (NVLink adds its per-link families). One
#: family per value, so a field one board answers NotSupported falls back to its call
#: alone (decided per family, plan.py); each value equals its call's, unit for unit.
GPU_FIELDS: dict[str, FieldIds] = {
    "memory_temp": [(pynvml.NVML_FI_DEV_MEMORY_TEMP, 0)],
    "energy": [(pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 0)],
    # nvml.h: the "limit currently enforced in milliwatts", nvmlDeviceGetEnforcedPowerLimit's
    "power_limit": [(pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT, 0)],
    # the same totals as nvmlDeviceGetTotalEccErrors(type, counter)
    "ecc_sbe_vol": [(pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 0)],
    "ecc_dbe_vol": [(pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, 0)],
    "ecc_sbe_agg": [(pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL, 0)],
    "ecc_dbe_agg": [(pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL, 0)],
    # page counts, where nvmlDeviceGetRetiredPages costs two calls to list the pages
    "retired_sbe": [(pynvml.NVML_FI_DEV_RETIRED_SBE, 0)],
    "retired_dbe": [(pynvml.NVML_FI_DEV_RETIRED_DBE, 0)],
    "retired_pending": [(pynvml.NVML_FI_DEV_RETIRED_PENDING, 0)],
    # the four out-parameters of nvmlDeviceGetRemappedRows
    "remapped_cor": [(pynvml.NVML_FI_DEV_REMAPPED_COR, 0)],
    "remapped_unc": [(pynvml.NVML_FI_DEV_REMAPPED_UNC, 0)],
    "remapped_pending": [(pynvml.NVML_FI_DEV_REMAPPED_PENDING, 0)],
    "remapped_failure": [(pynvml.NVML_FI_DEV_REMAPPED_FAILURE, 0)],
    "pcie_replay": [(pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER, 0)],
    # NVML_FI_DEV_PERF_POLICY_<policy> = 74 + NVML_PERF_POLICY_<policy> for policies 0-5
    # (the ones exported): the violation time nvmlDeviceGetViolationStatus reports, in
    # the same nanoseconds
    **{
        f"violation:{policy}": [(pynvml.NVML_FI_DEV_PERF_POLICY_POWER + policy, 0)]
        for _, policy in THROTTLE_POLICIES
    },
}


# nvmlValueType_t -> the member of the nvmlValue_t union that holds the value
_VALUE_MEMBERS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}

# The answer is decoded from the array's bytes with struct, laid out from pynvml's own
# struct definitions: reading it attribute by attribute runs pynvml's Python-level
# __getattribute__ hook on every access, which was the largest cost of the NVML collect.
_ENTRY = pynvml.c_nvmlFieldValue_t
_ENTRY_SIZE = ctypes.sizeof(_ENTRY)
_HEAD_AT = _ENTRY.valueType.offset
_VALUE_AT = _ENTRY.value.offset
_UNION_TYPES = dict(pynvml.c_nvmlValue_t._fields_)
# valueType -> the union member's struct format (its ctypes type code: "d", "I", "L", ...)
_VALUE_FORMATS = {
    value_type: struct.Struct("@" + _UNION_TYPES[member]._type_)
    for value_type, member in _VALUE_MEMBERS.items()
}


# The whole entry in one struct, the union read as its raw 64 bits: one C loop
# (iter_unpack) decodes a batch. Needs the layout pynvml declares on LP64 little-endian
# machines (valueType, nvmlReturn, then the 8-byte union at the end); anything else
# takes pynvml's attribute-by-attribute path below (correct, only slower).
_WHOLE = struct.Struct(f"@{_HEAD_AT}xIIQ")
_BITS_LAYOUT = (
    _ENTRY.nvmlReturn.offset == _HEAD_AT + 4
    and _VALUE_AT == _HEAD_AT + 8
    and _WHOLE.size == _ENTRY_SIZE
    and sys.byteorder == "little"
    and ctypes.sizeof(ctypes.c_ulong) == 8
)
_ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
_UI = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
_BITS_OF = struct.Struct("@Q")


def _from_bits(value_type: int, bits: int) -> float | int | None:
    """The union member `value_type` names, from the union's raw 64 bits (little-endian:
    a narrower member is the low bytes)."""
    form = _VALUE_FORMATS.get(value_type)
    if form is None:
        return None
    return form.unpack_from(_BITS_OF.pack(bits))[0]  # type: ignore[no-any-return]


def decode_answer(raw: Any, count: int) -> tuple[list[float | None], dict[int, int]]:
    """The first `count` entries of an answer: each one's value as `plain_number` reads
    it (None where the entry failed or holds no value), and the nvmlReturn of each entry
    that failed, by position (in order).

    The loop every GPU's batch goes through each poll (about 160 entries on an H100),
    so the two value types of nearly every field (counters, states, speeds) are inline.
    """
    values: list[float | None] = []
    failed: dict[int, int] = {}
    append = values.append
    if _BITS_LAYOUT and isinstance(raw, ctypes.Array) and raw._type_ is _ENTRY:
        buffer = memoryview(raw).cast("B")[: min(count, len(raw)) * _ENTRY_SIZE]
        for value_type, status, bits in _WHOLE.iter_unpack(buffer):
            if status:
                failed[len(values)] = status
                append(None)
            elif value_type == _ULL:
                append(None if bits in NO_VALUE_SENTINELS else float(bits))
            elif value_type == _UI:
                bits &= 0xFFFFFFFF
                append(None if bits in NO_VALUE_SENTINELS else float(bits))
            else:
                append(plain_number(_from_bits(value_type, bits)))
        return values, failed
    for entry in itertools.islice(raw, count):  # anything else shaped like the answer
        status = int(entry.nvmlReturn)
        if status:
            failed[len(values)] = status
            append(None)
            continue
        member = _VALUE_MEMBERS.get(int(entry.valueType))
        append(plain_number(getattr(entry.value, member)) if member else None)
    return values, failed


# A request entry: fieldId and scopeId, the rest zero
_REQUEST = struct.Struct(f"@II{_ENTRY_SIZE - 8}x")


def pack_request(ids: FieldIds) -> bytes:
    """The request array's bytes: fieldId and scopeId per entry (kept with the plan)."""
    return b"".join([_REQUEST.pack(field_id, scope_id) for field_id, scope_id in ids])


def request_field_values(handle: Any, ids: FieldIds, request: bytes) -> Any:
    """pynvml.nvmlDeviceGetFieldValues, with the request copied from `request`, the
    packed `ids`.

    pynvml fills its request entry by entry through its struct hooks (two per id, more
    than the rest of the batch costs); this is the same call through pynvml's own
    function lookup and return check. Should a future pynvml lack those helpers, its
    public function does the job.
    """
    lookup = getattr(pynvml, "_nvmlGetFunctionPointer", None)
    check = getattr(pynvml, "_nvmlCheckReturn", None)
    if lookup is None or check is None:
        return pynvml.nvmlDeviceGetFieldValues(handle, list(ids))
    values = (_ENTRY * len(ids)).from_buffer_copy(request)
    check(
        lookup("nvmlDeviceGetFieldValues")(handle, ctypes.c_int32(len(ids)), ctypes.byref(values))
    )
    return values


_NO_SPANS: Mapping[str, tuple[int, int]] = MappingProxyType({})


class FieldAnswers:
    """One poll's batch: every asked entry's value in request order (None where the
    entry failed), and where each asked family's entries are."""

    __slots__ = ("_spans", "_values")

    def __init__(
        self,
        values: Sequence[float | None] = (),
        spans: Mapping[str, tuple[int, int]] = _NO_SPANS,
    ) -> None:
        self._values = values
        self._spans = spans  # family -> (first entry, entries)

    def value(self, family: str, position: int = 0) -> float | None:
        """The `position`-th reading of `family` (its link's, for per-link families);
        None for a family the batch was not asked for ("call" mode)."""
        span = self._spans.get(family)
        if span is None or position >= span[1]:
            return None
        return self._values[span[0] + position]


#: the answers of a poll whose batch was not read
NO_ANSWERS = FieldAnswers()
