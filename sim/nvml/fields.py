"""nvmlDeviceGetFieldValues: one small reader per field id, looked up in a table.

A reader answers (nvmlReturn, valueType, value) for one GPU and the entry's scopeId
(the link, for per-link NVLink fields). Each entry carries its own return code, as in
the real library: an id the board lacks, or one not in the table, is NotSupported for
that entry while the call itself succeeds.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Mapping
from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.gpu.state import LinkState
from nvwatch.sim.nvml.abi import (
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    KIB,
    SUCCESS,
    as_int,
    deref,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call
from nvwatch.sim.nvml.ecc import page_retirement_supported
from nvwatch.sim.nvml.nvlink import NVLINK_VERSION_ENUM, has_nvlink, has_nvlink_ecc

FieldValue = tuple[int, int, float]  # (nvmlReturn, valueType, value)
FieldReader = Callable[[SimulatedGpu, int], FieldValue]  # (gpu, scopeId) -> value

_UI = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
_ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
_UNKNOWN_FIELD: FieldValue = (ERROR_NOT_SUPPORTED, _UI, 0)

# raw = data + ~ 6% flit header/CRC overhead (NVLink 128b data in 136b flits)
_NVLINK_RAW_OVERHEAD = 1.0625

# --- reader builders ---------------------------------------------------------------------


def _always(gpu: SimulatedGpu) -> bool:
    return True


def _has_ecc(gpu: SimulatedGpu) -> bool:
    return gpu.model.ecc


def _has_row_remapping(gpu: SimulatedGpu) -> bool:
    return gpu.model.row_remapping


def _device_field(
    supported: Callable[[SimulatedGpu], bool],
    value_type: int,
    read: Callable[[SimulatedGpu], float],
) -> FieldReader:
    """A field of the whole device (scopeId ignored), NotSupported unless `supported`."""

    def reader(gpu: SimulatedGpu, scope: int) -> FieldValue:
        if not supported(gpu):
            return ERROR_NOT_SUPPORTED, value_type, 0
        return SUCCESS, value_type, read(gpu)

    return reader


def _link_field(value_type: int, read: Callable[[SimulatedGpu, LinkState], float]) -> FieldReader:
    """An NVLink field whose scopeId names the link."""

    def reader(gpu: SimulatedGpu, scope: int) -> FieldValue:
        if not has_nvlink(gpu):
            return ERROR_NOT_SUPPORTED, _UI, 0
        if scope >= len(gpu.links):
            return ERROR_INVALID_ARGUMENT, _UI, 0
        return SUCCESS, value_type, read(gpu, gpu.links[scope])

    return reader


def _link_errors(kind: str, link: int | None) -> FieldReader:
    """An NVLink error counter: one link's (the link is in the field id), or the total."""

    def reader(gpu: SimulatedGpu, scope: int) -> FieldValue:
        if not has_nvlink(gpu) or (kind == "ecc" and not has_nvlink_ecc(gpu)):
            return ERROR_NOT_SUPPORTED, _ULL, 0
        if link is None:
            links = range(len(gpu.links))
            return SUCCESS, _ULL, sum(gpu.nvlink_error_count(i, kind) for i in links)
        if link >= len(gpu.links):
            return ERROR_NOT_SUPPORTED, _ULL, 0
        return SUCCESS, _ULL, gpu.nvlink_error_count(link, kind)

    return reader


# --- the table, by area ----------------------------------------------------------------


def _nvlink_error_fields() -> dict[int, FieldReader]:
    fields: dict[int, FieldReader] = {}
    # (kind, first id for links 0-5, total id, first id for links 6-11) from nvml.h
    for kind, low, total, high in (
        ("crc_flit", 32, 38, 96),
        ("crc_data", 39, 45, 102),
        ("replay", 46, 52, 108),
        ("recovery", 53, 59, 114),
    ):
        for link in range(6):
            fields[low + link] = _link_errors(kind, link)
            fields[high + link] = _link_errors(kind, link + 6)
        fields[total] = _link_errors(kind, None)
    for link in range(12):
        fields[148 + link] = _link_errors(
            "ecc", link
        )  # NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0..
    fields[160] = _link_errors("ecc", None)
    return fields


def _scoped_link_errors(kind: str) -> FieldReader:
    """NVML_FI_DEV_NVLINK_ERROR_DL_<kind>: one link's counter, the link in scopeId."""

    def reader(gpu: SimulatedGpu, scope: int) -> FieldValue:
        if not has_nvlink(gpu):
            return ERROR_NOT_SUPPORTED, _ULL, 0
        if scope >= len(gpu.links):
            return ERROR_INVALID_ARGUMENT, _ULL, 0
        return SUCCESS, _ULL, gpu.nvlink_error_count(scope, kind)

    return reader


def _nvlink_link_fields() -> dict[int, FieldReader]:
    # throughput counters are cumulative KiB (nvml.h says KiB for these fields)
    return {
        pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: _device_field(
            has_nvlink, _UI, lambda gpu: len(gpu.links)
        ),
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: _link_field(
            _ULL, lambda gpu, link: int(link.tx_bytes) // KIB
        ),
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: _link_field(
            _ULL, lambda gpu, link: int(link.rx_bytes) // KIB
        ),
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX: _link_field(
            _ULL, lambda gpu, link: int(link.tx_bytes * _NVLINK_RAW_OVERHEAD) // KIB
        ),
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX: _link_field(
            _ULL, lambda gpu, link: int(link.rx_bytes * _NVLINK_RAW_OVERHEAD) // KIB
        ),
        pynvml.NVML_FI_DEV_NVLINK_GET_SPEED: _link_field(  # MB/s per direction
            _UI, lambda gpu, link: int(gpu.model.nvlink_bytes_per_second / 1e6)
        ),
        pynvml.NVML_FI_DEV_NVLINK_GET_STATE: _link_field(_UI, lambda gpu, link: int(link.up)),
        # the same counts as nvmlDeviceGetNvLinkErrorCounter(link, DL_REPLAY/DL_RECOVERY);
        # DL_CRC is left unanswered: nvml.h does not say flit or data
        pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: _scoped_link_errors("replay"),
        pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: _scoped_link_errors("recovery"),
        pynvml.NVML_FI_DEV_NVLINK_GET_VERSION: _link_field(
            _UI, lambda gpu, link: NVLINK_VERSION_ENUM[gpu.model.nvlink_version]
        ),
    }


def _device_fields() -> dict[int, FieldReader]:
    return {
        pynvml.NVML_FI_DEV_MEMORY_TEMP: _device_field(
            lambda gpu: gpu.model.memory_temperature,
            _UI,
            lambda gpu: round(gpu.memory_temperature_c),
        ),
        pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: _device_field(
            lambda gpu: gpu.model.energy_counter, _ULL, lambda gpu: int(gpu.energy_mj)
        ),
        # nvml.h: "Limit currently enforced in milliwatts", nvmlDeviceGetEnforcedPowerLimit's
        pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT: _device_field(
            _always, _UI, lambda gpu: round(gpu.power_limit_w * 1000)
        ),
        pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: _device_field(
            _always, _UI, lambda gpu: int(gpu.pcie_replays)
        ),
        pynvml.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER: _device_field(_always, _UI, lambda gpu: 0),
        # cumulative bytes (nvml.h: "PCIe transmit bytes"), a plain byte count unlike the
        # KiB/s of nvmlDeviceGetPcieThroughput; the simulator keeps bytes, so no scaling
        pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: _device_field(
            _always, _ULL, lambda gpu: int(gpu.pcie_tx_bytes)
        ),
        pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: _device_field(
            _always, _ULL, lambda gpu: int(gpu.pcie_rx_bytes)
        ),
    }


def _violation_fields() -> dict[int, FieldReader]:
    """NVML_FI_DEV_PERF_POLICY_<policy> (74 + NVML_PERF_POLICY_<policy>): the same ns as
    nvmlDeviceGetViolationStatus' violationTime, supported where that call is."""
    nanoseconds: dict[int, Callable[[SimulatedGpu], float]] = {
        pynvml.NVML_PERF_POLICY_POWER: lambda gpu: gpu.power_violation_ns,
        pynvml.NVML_PERF_POLICY_THERMAL: lambda gpu: gpu.thermal_violation_ns,
        pynvml.NVML_PERF_POLICY_LOW_UTILIZATION: lambda gpu: gpu.low_util_violation_ns,
    }

    def supported(gpu: SimulatedGpu) -> bool:
        return bool(gpu.model.violation_counters)

    def reading(policy: int) -> Callable[[SimulatedGpu], float]:
        read = nanoseconds.get(policy)
        return (lambda gpu: int(read(gpu))) if read is not None else (lambda gpu: 0)

    return {
        pynvml.NVML_FI_DEV_PERF_POLICY_POWER + policy: _device_field(
            supported, _ULL, reading(policy)
        )
        # ids 74-79 follow policies 0-5; 80/81 are app/base clocks (policies 10/11)
        for policy in range(pynvml.NVML_PERF_POLICY_RELIABILITY + 1)
    }


def _memory_error_fields() -> dict[int, FieldReader]:
    ecc_fields: dict[int, Callable[[SimulatedGpu], float]] = {
        pynvml.NVML_FI_DEV_ECC_CURRENT: lambda gpu: 1,
        pynvml.NVML_FI_DEV_ECC_PENDING: lambda gpu: 1,
        pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: lambda gpu: gpu.ecc.corrected_volatile,
        pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: lambda gpu: gpu.ecc.uncorrected_volatile,
        pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: lambda gpu: gpu.ecc.corrected_aggregate,
        pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: lambda gpu: gpu.ecc.uncorrected_aggregate,
    }
    # pre-Ampere page retirement; NotSupported where row remapping replaced it
    retired_fields: dict[int, Callable[[SimulatedGpu], float]] = {
        pynvml.NVML_FI_DEV_RETIRED_SBE: lambda gpu: len(gpu.ecc.retired_sbe),
        pynvml.NVML_FI_DEV_RETIRED_DBE: lambda gpu: len(gpu.ecc.retired_dbe),
        pynvml.NVML_FI_DEV_RETIRED_PENDING: lambda gpu: int(gpu.ecc.retired_pending),
        pynvml.NVML_FI_DEV_RETIRED_PENDING_SBE: lambda gpu: int(
            gpu.ecc.retired_pending and bool(gpu.ecc.retired_sbe)
        ),
        pynvml.NVML_FI_DEV_RETIRED_PENDING_DBE: lambda gpu: int(
            gpu.ecc.retired_pending and bool(gpu.ecc.retired_dbe)
        ),
    }
    remap_fields: dict[int, Callable[[SimulatedGpu], float]] = {
        pynvml.NVML_FI_DEV_REMAPPED_COR: lambda gpu: gpu.ecc.remapped_correctable,
        pynvml.NVML_FI_DEV_REMAPPED_UNC: lambda gpu: gpu.ecc.remapped_uncorrectable,
        pynvml.NVML_FI_DEV_REMAPPED_PENDING: lambda gpu: int(gpu.ecc.remap_pending),
        pynvml.NVML_FI_DEV_REMAPPED_FAILURE: lambda gpu: int(gpu.ecc.remap_failure),
    }
    return {
        **{i: _device_field(_has_ecc, _ULL, read) for i, read in ecc_fields.items()},
        **{
            i: _device_field(page_retirement_supported, _ULL, read)
            for i, read in retired_fields.items()
        },
        **{i: _device_field(_has_row_remapping, _UI, read) for i, read in remap_fields.items()},
    }


def _merge(*groups: Mapping[int, FieldReader]) -> dict[int, FieldReader]:
    """One table; an id claimed by two areas is a mistake in this module."""
    table: dict[int, FieldReader] = {}
    for group in groups:
        twice = table.keys() & group.keys()
        if twice:
            raise ValueError(f"field ids answered twice: {sorted(twice)}")
        table.update(group)
    return table


FIELDS: dict[int, FieldReader] = _merge(
    _nvlink_error_fields(),
    _nvlink_link_fields(),
    _device_fields(),
    _memory_error_fields(),
    _violation_fields(),
)


def field_value(gpu: SimulatedGpu, field_id: int, scope: int) -> FieldValue:
    """(nvmlReturn, valueType, value) for one field of one GPU."""
    reader = FIELDS.get(field_id)
    return reader(gpu, scope) if reader is not None else _UNKNOWN_FIELD


# nvmlFieldValue_t's layout, from pynvml's own struct so the two never disagree. The
# batch is read and written through one memoryview with struct, not attribute by
# attribute: each ctypes attribute access on pynvml's structs runs Python-level
# __getattribute__/__setattr__ hooks, which made this call the simulator's largest cost.
_ENTRY = pynvml.c_nvmlFieldValue_t
_ENTRY_SIZE = ctypes.sizeof(_ENTRY)
_IDS = struct.Struct("@II")  # fieldId, scopeId: the first two members
# timestamp, latencyUsec, valueType, nvmlReturn and the union member, contiguous from
# timestamp on: a succeeded entry is one pack_into
_TIMES_AT = _ENTRY.timestamp.offset
_FILLED = {
    _UI: struct.Struct("@qqIII"),
    pynvml.NVML_VALUE_TYPE_DOUBLE: struct.Struct("@qqIId"),
    _ULL: struct.Struct("@qqIIQ"),
}
_TIMES = struct.Struct("@qq")  # a failed entry: timestamp and latencyUsec, then its code
_U32 = struct.Struct("@I")
_RETURN_AT = _ENTRY.nvmlReturn.offset
assert (_ENTRY.fieldId.offset, _ENTRY.scopeId.offset) == (0, 4)
assert [_ENTRY.latencyUsec.offset, _ENTRY.valueType.offset, _RETURN_AT, _ENTRY.value.offset] == [
    _TIMES_AT + 8,
    _TIMES_AT + 16,
    _TIMES_AT + 20,
    _TIMES_AT + 24,
]
_MASKS = {_UI: 0xFFFFFFFF}  # every other integer type is stored as 64 bits


def _write_entry(buffer: memoryview, at: int, result: FieldValue, timestamp: int) -> None:
    """Fill the nvmlFieldValue_t at byte `at`; the value union only when it succeeded.

    Values are stored as ctypes would store them (integers wrapped to the member's
    width); any value type but unsigned int and double is written as unsigned long long.
    """
    ret, value_type, value = result
    if ret != SUCCESS:
        _TIMES.pack_into(buffer, at + _TIMES_AT, timestamp, 0)
        _U32.pack_into(buffer, at + _RETURN_AT, ret)
        return
    filled = _FILLED.get(value_type, _FILLED[_ULL])
    if value_type == pynvml.NVML_VALUE_TYPE_DOUBLE:
        stored: float = float(value)
    else:
        stored = int(value) & _MASKS.get(value_type, 0xFFFFFFFFFFFFFFFF)
    filled.pack_into(buffer, at + _TIMES_AT, timestamp, 0, value_type, ret, stored)


class FieldValueQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetFieldValues(self, gpu: SimulatedGpu, count: Any, values: Any) -> int:
        n = as_int(count)
        array = deref(values)
        buffer = memoryview(array).cast("B")
        if n < 0 or n * _ENTRY_SIZE > len(buffer):
            return ERROR_INVALID_ARGUMENT
        timestamp = self._timestamp_us()
        for i in range(n):
            at = i * _ENTRY_SIZE
            field_id, scope_id = _IDS.unpack_from(buffer, at)
            _write_entry(buffer, at, field_value(gpu, field_id, scope_id), timestamp)
        return SUCCESS
