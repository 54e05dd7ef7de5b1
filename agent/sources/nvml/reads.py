"""Device reads: one GPU's readings for one poll, one small function per area.

Each area returns its part of the GpuSample as a typed dict keyed by GpuSample field
names (readings.py: mypy checks each name and type against GpuSample), and names the
NVML call or field id it reads and the `nvidia-smi --query-gpu` field it matches (or
the nvidia-smi view that shows the value, where --query-gpu has no field for it).
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pynvml

from nvwatch.agent.sources.nvml.device import Device, plain_int, plain_number, text
from nvwatch.agent.sources.nvml.fields import FieldAnswers
from nvwatch.agent.sources.nvml.plan import GpuPlan
from nvwatch.agent.sources.nvml.readings import (
    ClockReadings,
    EccReadings,
    MemoryReadings,
    PcieReadings,
    PowerReadings,
    RetirementReadings,
    ThermalReadings,
    UtilizationReadings,
)
from nvwatch.agent.sources.nvml.samples import (
    CLOCK_EVENT_REASONS,
    THROTTLE_POLICIES,
    GpuInfo,
)
from nvwatch.agent.sources.nvml.static import Kept
from nvwatch.agent.sources.nvml.units import NS_PER_S, int_or_none, kib, mhz, milli, percent


def _field_or_call(
    plan: GpuPlan, answers: FieldAnswers, family: str, call: Callable[[], float | None]
) -> float | None:
    """The family's field value, or its call's where the plan gives the family to it."""
    return call() if plan.by_call(family) else answers.value(family)


def identity(
    dev: Device, info: GpuInfo, driver_version: str, cuda_version: str, refresh: bool = False
) -> GpuInfo:
    """name, uuid, pci.bus_id, serial, vbios_version: nvmlDeviceGetName, ...GetUUID,
    ...GetPciInfo_v3, ...GetSerial, ...GetVbiosVersion; those still unknown, or all when
    `refresh` (static values, re-read on the slow cadence; a failed re-read keeps the
    last answer)."""
    if not refresh and info.name and info.uuid and info.pci_bus_id and info.vbios:
        return info  # serial is left out: boards without one would be re-read forever

    def read(old: str, key: str, fn: Callable[..., Any]) -> str:
        return old if old and not refresh else text(dev.call(key, fn)) or old

    pci_bus_id = info.pci_bus_id
    if not pci_bus_id or refresh:
        pci = dev.call("pci_info", pynvml.nvmlDeviceGetPciInfo_v3)
        pci_bus_id = (text(pci.busId) if pci is not None else "") or pci_bus_id
    return GpuInfo(
        name=read(info.name, "name", pynvml.nvmlDeviceGetName),
        uuid=read(info.uuid, "uuid", pynvml.nvmlDeviceGetUUID),
        pci_bus_id=pci_bus_id,
        serial=read(info.serial, "serial", pynvml.nvmlDeviceGetSerial),
        vbios=read(info.vbios, "vbios", pynvml.nvmlDeviceGetVbiosVersion),
        driver_version=driver_version,
        cuda_version=cuda_version,
    )


def utilization(dev: Device) -> UtilizationReadings:
    """utilization.gpu, utilization.memory: nvmlDeviceGetUtilizationRates (percent)."""
    util = dev.call("utilization", pynvml.nvmlDeviceGetUtilizationRates)
    return {
        "utilization_ratio": percent(util.gpu) if util is not None else None,
        "memory_utilization_ratio": percent(util.memory) if util is not None else None,
    }


def memory(dev: Device) -> MemoryReadings:
    """memory.total, memory.used, memory.free: nvmlDeviceGetMemoryInfo (bytes).

    Version 2 first, whose `used` leaves out the driver-reserved part (memory.reserved),
    as nvidia-smi does; version 1 on drivers that do not know v2.
    """
    info = dev.call("memory_v2", pynvml.nvmlDeviceGetMemoryInfo, pynvml.nvmlMemory_v2)
    if info is None and dev.is_unsupported("memory_v2"):
        info = dev.call("memory_v1", pynvml.nvmlDeviceGetMemoryInfo)
    return {
        "memory_total_bytes": plain_int(info.total) if info is not None else None,
        "memory_used_bytes": plain_int(info.used) if info is not None else None,
        "memory_free_bytes": plain_int(info.free) if info is not None else None,
    }


def power(dev: Device, kept: Kept, plan: GpuPlan, answers: FieldAnswers) -> PowerReadings:
    """power.draw (nvmlDeviceGetPowerUsage), enforced.power.limit
    (NVML_FI_DEV_POWER_CURRENT_LIMIT, or ...GetEnforcedPowerLimit when the batch lacks it),
    power.default_limit (...GetPowerManagementDefaultLimit), all mW; and the energy
    counter in mJ (not paired with nvidia-smi; DCGM's DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION):
    NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, or nvmlDeviceGetTotalEnergyConsumption when the
    batch lacks it."""
    h = pynvml
    if plan.by_call("energy"):
        energy = plain_number(dev.call("energy", h.nvmlDeviceGetTotalEnergyConsumption))
    else:
        energy = answers.value("energy")
    tdp = kept.get(
        "tdp", lambda: milli(dev.call("tdp", h.nvmlDeviceGetPowerManagementDefaultLimit))
    )
    return {
        "power_watts": milli(dev.call("power", h.nvmlDeviceGetPowerUsage)),
        "power_limit_watts": milli(
            _field_or_call(
                plan,
                answers,
                "power_limit",
                lambda: plain_number(dev.call("power_limit", h.nvmlDeviceGetEnforcedPowerLimit)),
            )
        ),
        "power_tdp_watts": tdp,
        "energy_joules": milli(energy),
    }


def thermal(dev: Device, kept: Kept, answers: FieldAnswers) -> ThermalReadings:
    """temperature.gpu, temperature.memory (NVML_FI_DEV_MEMORY_TEMP), fan.speed
    (nvmlDeviceGetFanSpeed, percent), and the thresholds of nvidia-smi -q -d TEMPERATURE
    (nvmlDeviceGetTemperatureThreshold: slowdown, shutdown, GPU and memory max)."""

    def threshold(key: str, which: int) -> float | None:
        return kept.get(
            key,
            lambda: plain_number(
                dev.call(f"threshold:{which}", pynvml.nvmlDeviceGetTemperatureThreshold, which)
            ),
        )

    return {
        "temperature_gpu_celsius": _gpu_temperature(dev),
        "temperature_memory_celsius": answers.value("memory_temp"),
        "threshold_slowdown_celsius": threshold(
            "t_slowdown", pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        "threshold_shutdown_celsius": threshold(
            "t_shutdown", pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
        ),
        "threshold_gpu_max_celsius": threshold(
            "t_gpu_max", pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX
        ),
        "threshold_memory_max_celsius": threshold(
            "t_memory_max", pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX
        ),
        "fan_speed_ratio": percent(dev.call("fan", pynvml.nvmlDeviceGetFanSpeed)),
    }


def _gpu_temperature(dev: Device) -> float | None:
    """temperature.gpu: nvmlDeviceGetTemperatureV, or the deprecated call on old drivers."""
    sensor = pynvml.NVML_TEMPERATURE_GPU
    value = dev.call("temperature_v", pynvml.nvmlDeviceGetTemperatureV, sensor)
    if value is None and dev.is_unsupported("temperature_v"):
        value = dev.call("temperature", pynvml.nvmlDeviceGetTemperature, sensor)
    return plain_number(value)


def clocks(dev: Device, kept: Kept, plan: GpuPlan, answers: FieldAnswers) -> ClockReadings:
    """clocks.sm, clocks.mem, clocks.gr (nvmlDeviceGetClockInfo) and clocks.max.sm,
    clocks.max.memory, clocks.max.graphics (nvmlDeviceGetMaxClockInfo), all MHz; the
    clock-event reasons and the violation (throttle) time."""
    h = pynvml

    def current(key: str, clock: int) -> float | None:
        return mhz(dev.call(f"clock:{key}", h.nvmlDeviceGetClockInfo, clock))

    def maximum(key: str, clock: int) -> float | None:
        return kept.get(
            f"max_{key}",
            lambda: mhz(dev.call(f"max_clock:{key}", h.nvmlDeviceGetMaxClockInfo, clock)),
        )

    return {
        "clock_sm_hertz": current("sm", h.NVML_CLOCK_SM),
        "clock_memory_hertz": current("mem", h.NVML_CLOCK_MEM),
        "clock_graphics_hertz": current("gr", h.NVML_CLOCK_GRAPHICS),
        "clock_sm_max_hertz": maximum("sm", h.NVML_CLOCK_SM),
        "clock_memory_max_hertz": maximum("mem", h.NVML_CLOCK_MEM),
        "clock_graphics_max_hertz": maximum("gr", h.NVML_CLOCK_GRAPHICS),
        "clock_events": _clock_events(dev, kept),
        "throttle_seconds": _throttle(dev, plan, answers),
    }


def _clock_events(dev: Device, kept: Kept) -> MappingProxyType[str, bool]:
    """clocks_event_reasons.supported / .active: nvmlDeviceGet{Supported,Current}Clocks
    EventReasons (driver 535+), or the older ...ClocksThrottleReasons of the same bits.
    The supported mask is the board's and static: kept."""
    h = pynvml

    def supported_mask() -> float | None:
        mask = dev.call("events_supported", h.nvmlDeviceGetSupportedClocksEventReasons)
        if mask is None and dev.is_unsupported("events_supported"):
            mask = dev.call("throttle_supported", h.nvmlDeviceGetSupportedClocksThrottleReasons)
        return plain_number(mask)

    supported = kept.get("events_supported", supported_mask)
    current = dev.call("events_current", h.nvmlDeviceGetCurrentClocksEventReasons)
    if current is None and dev.is_unsupported("events_current"):
        current = dev.call("throttle_current", h.nvmlDeviceGetCurrentClocksThrottleReasons)
    mask = int(supported) if supported is not None else None
    active = plain_int(current)
    if active is None:
        return MappingProxyType({})
    if mask is None:
        # without the mask, report only what is known to be on: absent beats a false 0
        return MappingProxyType({n: True for n, bit in CLOCK_EVENT_REASONS if active & bit})
    return MappingProxyType(
        {name: bool(active & bit) for name, bit in CLOCK_EVENT_REASONS if mask & bit}
    )


def _throttle(dev: Device, plan: GpuPlan, answers: FieldAnswers) -> MappingProxyType[str, float]:
    """Violation time per policy: NVML_FI_DEV_PERF_POLICY_*, or nvmlDeviceGetViolationStatus,
    ns (nvidia-smi -q -d PERFORMANCE)."""
    result = {}
    for name, policy in THROTTLE_POLICIES:
        key = f"violation:{policy}"

        def call(policy: int = policy, key: str = key) -> float | None:
            status = dev.call(key, pynvml.nvmlDeviceGetViolationStatus, policy)
            return plain_number(status.violationTime) if status is not None else None

        ns = _field_or_call(plan, answers, key, call)
        if ns is not None:
            result[name] = ns / NS_PER_S
    return MappingProxyType(result)


def pcie(dev: Device, kept: Kept, plan: GpuPlan, answers: FieldAnswers) -> PcieReadings:
    """PCIe throughput (nvmlDeviceGetPcieThroughput, KiB/s; no --query-gpu field,
    nvidia-smi dmon -s t: NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES are cumulative bytes, not the
    same value), replays (NVML_FI_DEV_PCIE_REPLAY_COUNTER or nvmlDeviceGetPcieReplayCounter),
    and
    pcie.link.gen.current/.max, pcie.link.width.current/.max
    (nvmlDeviceGet{Curr,Max}PcieLink{Generation,Width})."""
    h = pynvml
    replays = _field_or_call(
        plan,
        answers,
        "pcie_replay",
        lambda: plain_number(dev.call("pcie_replay", h.nvmlDeviceGetPcieReplayCounter)),
    )
    gen_max = kept.get(
        "pcie_gen_max",
        lambda: plain_number(dev.call("pcie_gen_max", h.nvmlDeviceGetMaxPcieLinkGeneration)),
    )
    width_max = kept.get(
        "pcie_width_max",
        lambda: plain_number(dev.call("pcie_width_max", h.nvmlDeviceGetMaxPcieLinkWidth)),
    )
    return {
        "pcie_tx_bytes_per_second": kib(
            dev.call("pcie_tx", h.nvmlDeviceGetPcieThroughput, h.NVML_PCIE_UTIL_TX_BYTES)
        ),
        "pcie_rx_bytes_per_second": kib(
            dev.call("pcie_rx", h.nvmlDeviceGetPcieThroughput, h.NVML_PCIE_UTIL_RX_BYTES)
        ),
        "pcie_replays": int_or_none(replays),
        "pcie_link_generation_current": plain_int(
            dev.call("pcie_gen", h.nvmlDeviceGetCurrPcieLinkGeneration)
        ),
        "pcie_link_generation_max": int_or_none(gen_max),
        "pcie_link_width_current": plain_int(
            dev.call("pcie_width", h.nvmlDeviceGetCurrPcieLinkWidth)
        ),
        "pcie_link_width_max": int_or_none(width_max),
    }


def ecc(dev: Device, plan: GpuPlan, answers: FieldAnswers) -> EccReadings:
    """ecc.errors.{corrected,uncorrected}.{volatile,aggregate}.total:
    NVML_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL, or nvmlDeviceGetTotalEccErrors(error type,
    counter type)."""
    h = pynvml
    corrected = h.NVML_MEMORY_ERROR_TYPE_CORRECTED
    uncorrected = h.NVML_MEMORY_ERROR_TYPE_UNCORRECTED

    def count(family: str, kind: int, scope: int) -> int | None:
        def call() -> float | None:
            key = f"ecc:{kind}:{scope}"
            return plain_number(dev.call(key, h.nvmlDeviceGetTotalEccErrors, kind, scope))

        return int_or_none(_field_or_call(plan, answers, family, call))

    return {
        "ecc_corrected_volatile": count("ecc_sbe_vol", corrected, h.NVML_VOLATILE_ECC),
        "ecc_corrected_aggregate": count("ecc_sbe_agg", corrected, h.NVML_AGGREGATE_ECC),
        "ecc_uncorrected_volatile": count("ecc_dbe_vol", uncorrected, h.NVML_VOLATILE_ECC),
        "ecc_uncorrected_aggregate": count("ecc_dbe_agg", uncorrected, h.NVML_AGGREGATE_ECC),
    }


def retirement(dev: Device, plan: GpuPlan, answers: FieldAnswers) -> RetirementReadings:
    """retired_pages.sbe, retired_pages.dbe (NVML_FI_DEV_RETIRED_SBE/DBE, or the length
    of nvmlDeviceGetRetiredPages' list), retired_pages.pending (NVML_FI_DEV_RETIRED_PENDING
    or ...GetRetiredPagesPendingStatus), and --query-remapped-rows=remapped_rows.correctable,
    .uncorrectable,.pending,.failure (NVML_FI_DEV_REMAPPED_* or nvmlDeviceGetRemappedRows,
    read once for every value that falls back)."""
    h = pynvml

    def retired(cause: int) -> float | None:
        pages = dev.call(f"retired:{cause}", h.nvmlDeviceGetRetiredPages, cause)
        return len(pages) if pages is not None else None

    def pending() -> float | None:
        return plain_number(dev.call("retired_pending", h.nvmlDeviceGetRetiredPagesPendingStatus))

    remapped_rows: list[Any] = []

    def remapped(position: int) -> float | None:
        if not remapped_rows:
            rows = dev.call("remapped_rows", h.nvmlDeviceGetRemappedRows)
            remapped_rows.append(rows if rows is not None and len(rows) == 4 else None)
        rows = remapped_rows[0]
        return plain_number(rows[position]) if rows is not None else None

    def value(family: str, call: Callable[[], float | None]) -> float | None:
        return _field_or_call(plan, answers, family, call)

    sbe = h.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    dbe = h.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    return {
        "retired_pages_sbe": int_or_none(value("retired_sbe", lambda: retired(sbe))),
        "retired_pages_dbe": int_or_none(value("retired_dbe", lambda: retired(dbe))),
        "retired_pages_pending": _flag(value("retired_pending", pending)),
        "remapped_rows_correctable": int_or_none(value("remapped_cor", lambda: remapped(0))),
        "remapped_rows_uncorrectable": int_or_none(value("remapped_unc", lambda: remapped(1))),
        "remapped_rows_pending": _flag(value("remapped_pending", lambda: remapped(2))),
        "remapped_rows_failure": _flag(value("remapped_failure", lambda: remapped(3))),
    }


def _flag(value: float | None) -> bool | None:
    return bool(value) if value is not None else None
