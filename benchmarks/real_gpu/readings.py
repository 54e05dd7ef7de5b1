"""Direct NVML readings for the real-GPU check's assumptions (docs/hardware-notes.md):
memory v1 and v2, power and energy, PCIe rate against its byte counters, NVLink fields
and counters, violation times and GPM, each call's result or error kept as data."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pynvml

GPM_METRICS = {
    "sm_util": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "any_tensor_util": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "dram_bw_util": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    "fp64_util": pynvml.NVML_GPM_METRIC_FP64_UTIL,
    "fp32_util": pynvml.NVML_GPM_METRIC_FP32_UTIL,
    "fp16_util": pynvml.NVML_GPM_METRIC_FP16_UTIL,
    "pcie_tx_per_sec": pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    "pcie_rx_per_sec": pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    "nvlink_total_rx_per_sec": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    "nvlink_total_tx_per_sec": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
}
PERCENT_METRICS = (
    "sm_util",
    "sm_occupancy",
    "any_tensor_util",
    "dram_bw_util",
    "fp64_util",
    "fp32_util",
    "fp16_util",
)


def try_call(fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """{"value": ...} or {"error": "NotSupported"}: one reading, never an exception."""
    try:
        value = fn(*args)
    except pynvml.NVMLError as err:
        return {"error": type(err).__name__.removeprefix("NVMLError_")}
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if hasattr(value, "_fields_"):
        value = {name: _plain(getattr(value, name)) for name, _ in value._fields_}
    elif isinstance(value, tuple | list):
        value = [_plain(v) for v in value]
    return {"value": value}


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, int | float | str) or value is None:
        return value
    return repr(value)


def nvml_handles() -> list[Any]:
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def read_all(window: float) -> dict[str, Any]:
    """What the assumptions of docs/hardware-notes.md need, read directly from NVML."""
    handles = nvml_handles()
    gpus = []
    for index, h in enumerate(handles):
        gpu: dict[str, Any] = {
            "index": index,
            "name": try_call(pynvml.nvmlDeviceGetName, h),
            "memory_v1": try_call(pynvml.nvmlDeviceGetMemoryInfo, h),
            "memory_v2": try_call(pynvml.nvmlDeviceGetMemoryInfo, h, pynvml.nvmlMemory_v2),
            "power_usage_mw": try_call(pynvml.nvmlDeviceGetPowerUsage, h),
            "power_default_limit_mw": try_call(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, h),
            "power_enforced_limit_mw": try_call(pynvml.nvmlDeviceGetEnforcedPowerLimit, h),
            "power_constraints_mw": try_call(
                pynvml.nvmlDeviceGetPowerManagementLimitConstraints, h
            ),
            "thresholds": {
                name: try_call(pynvml.nvmlDeviceGetTemperatureThreshold, h, which)
                for name, which in (
                    ("shutdown", pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
                    ("slowdown", pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                    ("memory_max", pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX),
                    ("gpu_max", pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
                )
            },
            "max_clocks_mhz": {
                name: try_call(pynvml.nvmlDeviceGetMaxClockInfo, h, clock)
                for name, clock in (
                    ("graphics", pynvml.NVML_CLOCK_GRAPHICS),
                    ("sm", pynvml.NVML_CLOCK_SM),
                    ("memory", pynvml.NVML_CLOCK_MEM),
                )
            },
            "clocks_mhz": {
                "sm": try_call(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
                "memory": try_call(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM),
            },
            "pcie_max": {
                "generation": try_call(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "width": try_call(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
            },
            "retired_pages_sbe": try_call(
                pynvml.nvmlDeviceGetRetiredPages,
                h,
                pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            ),
            "remapped_rows": try_call(pynvml.nvmlDeviceGetRemappedRows, h),
            "violation": {
                str(policy): try_call(pynvml.nvmlDeviceGetViolationStatus, h, policy)
                for policy in range(6)
            },
            "nvlink": _nvlink(h),
            # the first GPU only: the loaded one, and a second of wall time per GPU
            "energy": _energy(h, min(1.0, window)) if index == 0 else None,
        }
        gpus.append(gpu)
    first = handles[0] if handles else None
    return {
        "driver_version": try_call(pynvml.nvmlSystemGetDriverVersion),
        "nvml_version": try_call(pynvml.nvmlSystemGetNVMLVersion),
        "cuda_driver_version": try_call(pynvml.nvmlSystemGetCudaDriverVersion),
        "gpus": gpus,
        "pcie_rate": _pcie_rate(first, window) if first is not None else None,
        "gpm": gpm(first, 0.5) if first is not None else None,
    }


def _fields(h: Any, ids: list[tuple[int, int]]) -> list[dict[str, Any]]:
    from benchmarks.real_gpu.expectations import entry_value

    try:
        values = pynvml.nvmlDeviceGetFieldValues(h, ids)
    except pynvml.NVMLError as err:
        return [{"field": f, "scope": s, "error": type(err).__name__} for f, s in ids]
    return [
        {
            "field": int(v.fieldId),
            "scope": int(v.scopeId),
            "return": int(v.nvmlReturn),
            "value": entry_value(v),
            "timestamp_us": int(v.timestamp),
        }
        for v in values
    ]


def _nvlink(h: Any) -> dict[str, Any]:
    """Every link's state, version, speed field, data counters and error counters, by the
    call and by field id (lane ids for links 0-11, scoped ids above)."""
    links = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        state = try_call(pynvml.nvmlDeviceGetNvLinkState, h, link)
        if "error" in state and link > 0:
            break
        entry: dict[str, Any] = {
            "link": link,
            "state": state,
            "version": try_call(pynvml.nvmlDeviceGetNvLinkVersion, h, link),
            "errors_by_call": {
                str(counter): try_call(pynvml.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
                for counter in range(5)
            },
        }
        ids = [
            (pynvml.NVML_FI_DEV_NVLINK_GET_SPEED, link),
            (pynvml.NVML_FI_DEV_NVLINK_GET_STATE, link),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link),
            (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, link),
            (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, link),
            (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, link),
        ]
        for prefix in ("REPLAY", "RECOVERY", "CRC_FLIT", "CRC_DATA", "ECC_DATA"):
            lane = getattr(pynvml, f"NVML_FI_DEV_NVLINK_{prefix}_ERROR_COUNT_L{link}", None)
            if lane is not None:
                ids.append((lane, 0))
        entry["fields"] = _fields(h, ids)
        links.append(entry)
    return {
        "links": links,
        "link_count_field": _fields(h, [(pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0)]),
    }


def _energy(h: Any, seconds: float) -> dict[str, Any]:
    """The energy counter over `seconds` against the mean of power readings meanwhile."""
    try:
        first = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    except pynvml.NVMLError as err:
        return {"error": type(err).__name__}
    started = time.monotonic()
    powers: list[int] = []
    while time.monotonic() - started < seconds and len(powers) < 500:
        with contextlib.suppress(pynvml.NVMLError):
            powers.append(pynvml.nvmlDeviceGetPowerUsage(h))
        time.sleep(0.02)
    last = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    elapsed = time.monotonic() - started
    return {
        "energy_mj": [first, last],
        "seconds": elapsed,
        "mean_power_mw": sum(powers) / len(powers) if powers else None,
        "energy_power_mw": (last - first) / elapsed if elapsed > 0 else None,
    }


def _pcie_rate(h: Any, seconds: float) -> dict[str, Any]:
    """nvmlDeviceGetPcieThroughput (a 20 ms window, unit in question) sampled over
    `seconds`, against the cumulative byte counters NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES
    over the same time."""
    ids = [(pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0), (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0)]
    before = _fields(h, ids)
    started = time.monotonic()
    samples: dict[str, list[tuple[float, int]]] = {"tx": [], "rx": []}
    while time.monotonic() - started < seconds and len(samples["rx"]) < 2000:
        for direction, which in (
            ("tx", pynvml.NVML_PCIE_UTIL_TX_BYTES),
            ("rx", pynvml.NVML_PCIE_UTIL_RX_BYTES),
        ):
            with contextlib.suppress(pynvml.NVMLError):
                reading = pynvml.nvmlDeviceGetPcieThroughput(h, which)
                samples[direction].append((time.monotonic(), reading))
        time.sleep(0.005)
    after = _fields(h, ids)
    ended = time.monotonic()
    elapsed = ended - started
    result: dict[str, Any] = {"seconds": elapsed, "counters_before": before}
    result["counters_after"] = after
    for position, direction in enumerate(("tx", "rx")):
        values = samples[direction]
        a, b = before[position], after[position]
        counter_rate = None
        if a.get("value") is not None and b.get("value") is not None:
            span = (b["timestamp_us"] - a["timestamp_us"]) / 1e6 or elapsed
            counter_rate = (b["value"] - a["value"]) / span if span > 0 else None
        result[direction] = {
            "throughput_samples": len(values),
            "throughput_mean": _time_weighted(values, ended),
            "counter_bytes_per_second": counter_rate,
        }
    return result


def _time_weighted(samples: list[tuple[float, int]], ended: float) -> float | None:
    """The mean of readings taken at uneven times, each holding until the next: a rate
    that changes within the window (a phase of the load) is weighed by how long it held,
    as the byte counter weighs it."""
    if not samples:
        return None
    total = span = 0.0
    for (at, reading), (until, _) in zip(samples, [*samples[1:], (ended, 0)], strict=True):
        total += reading * (until - at)
        span += until - at
    return total / span if span > 0 else float(samples[-1][1])


def gpm(h: Any, interval: float) -> dict[str, Any]:
    """Every GPM metric of interest from two samples `interval` apart (percent ones must
    lie in 0..100)."""
    support = try_call(pynvml.nvmlGpmQueryDeviceSupport, h)
    if "error" in support or not support["value"].get("isSupportedDevice"):
        return {"supported": False, "query": support}
    samples = []
    try:
        samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
        pynvml.nvmlGpmSampleGet(h, samples[0])
        time.sleep(interval)
        pynvml.nvmlGpmSampleGet(h, samples[1])
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = samples[0], samples[1]
        for slot, metric_id in enumerate(GPM_METRICS.values()):
            request.metrics[slot].metricId = metric_id
        pynvml.nvmlGpmMetricsGet(request)
    except pynvml.NVMLError as err:
        return {"supported": True, "error": type(err).__name__}
    finally:
        for sample in samples:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlGpmSampleFree(sample)
    metrics: dict[str, dict[str, Any]] = {}
    values: dict[str, float] = {}
    for slot, name in enumerate(GPM_METRICS):
        m = request.metrics[slot]
        ok = int(m.nvmlReturn) == pynvml.NVML_SUCCESS
        metrics[name] = {"value": float(m.value) if ok else None, "return": int(m.nvmlReturn)}
        if ok:
            values[name] = float(m.value)
    in_range = all(0.0 <= values[name] <= 100.0 for name in PERCENT_METRICS if name in values)
    return {"supported": True, "interval_s": interval, "metrics": metrics, "in_range": in_range}


# --- bench -------------------------------------------------------------------------------
