"""The shapes of one GPU's readings, one per area of reads.py, as GpuSample names them.

Each area's function returns one of these and the source unpacks them into `GpuSample`
(`GpuSample(..., **power, ...)`), so mypy checks every key against GpuSample's fields
and every value against the field's type: a misspelt name or a value of the wrong type
fails the type check, not the first poll on a real node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict


class UtilizationReadings(TypedDict):
    utilization_ratio: float | None
    memory_utilization_ratio: float | None


class MemoryReadings(TypedDict):
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None


class PowerReadings(TypedDict):
    power_watts: float | None
    power_limit_watts: float | None
    power_tdp_watts: float | None
    energy_joules: float | None


class ThermalReadings(TypedDict):
    temperature_gpu_celsius: float | None
    temperature_memory_celsius: float | None
    threshold_slowdown_celsius: float | None
    threshold_shutdown_celsius: float | None
    threshold_gpu_max_celsius: float | None
    threshold_memory_max_celsius: float | None
    fan_speed_ratio: float | None


class ClockReadings(TypedDict):
    clock_sm_hertz: float | None
    clock_memory_hertz: float | None
    clock_graphics_hertz: float | None
    clock_sm_max_hertz: float | None
    clock_memory_max_hertz: float | None
    clock_graphics_max_hertz: float | None
    clock_events: Mapping[str, bool]
    throttle_seconds: Mapping[str, float]


class PcieReadings(TypedDict):
    pcie_tx_bytes_per_second: float | None
    pcie_rx_bytes_per_second: float | None
    pcie_replays: int | None
    pcie_link_generation_current: int | None
    pcie_link_generation_max: int | None
    pcie_link_width_current: int | None
    pcie_link_width_max: int | None


class EccReadings(TypedDict):
    ecc_corrected_volatile: int | None
    ecc_corrected_aggregate: int | None
    ecc_uncorrected_volatile: int | None
    ecc_uncorrected_aggregate: int | None


class RetirementReadings(TypedDict):
    retired_pages_sbe: int | None
    retired_pages_dbe: int | None
    retired_pages_pending: bool | None
    remapped_rows_correctable: int | None
    remapped_rows_uncorrectable: int | None
    remapped_rows_pending: bool | None
    remapped_rows_failure: bool | None
