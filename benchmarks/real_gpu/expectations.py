"""What the agent must export for the NVML answers on a tape: written from NVML's
documented units and the metric catalogue's names, not from the agent's code.

`expected(calls)` turns each recorded answer into the series it must produce: the value
converted to base units (mW -> W, mJ -> J, MHz -> Hz, KiB -> bytes, ns -> s, percent ->
ratio), or absent where NVML answered NotSupported (absent, never 0). Later answers of
the same reading override earlier ones, so the expectation is the poll's last reading,
whichever of the field batch and the per-call function the agent used.
`judge(expectations, exposition)` compares them with an exposition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pynvml
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.real_gpu.tape import Call, decoded, field_entries, handle_of

SUCCESS = pynvml.NVML_SUCCESS
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
KIB = 1024
# nvmlDeviceGetNvLinkVersion -> nominal rate per link per direction (NVLink1 20 GB/s,
# NVLink2-4 25 GB/s), the agent's stand-in when the speed field is missing
# (agent/sources/nvml/nvlink.py)
NVLINK_VERSION_BYTES_PER_SECOND = {1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 25e9, 6: 25e9, 7: 50e9}

_THRESHOLDS = {
    pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "shutdown",
    pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "slowdown",
    pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: "memory_max",
    pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: "gpu_max",
}
_CLOCKS = {
    pynvml.NVML_CLOCK_GRAPHICS: "graphics",
    pynvml.NVML_CLOCK_SM: "sm",
    pynvml.NVML_CLOCK_MEM: "memory",
}
_POLICIES = {0: "power", 1: "thermal", 2: "sync_boost", 3: "board_limit"}
_POLICIES |= {4: "low_utilization", 5: "reliability"}
_REASONS = (
    ("idle", 0x1),
    ("applications_clocks", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake", 0x80),
    ("display_clocks", 0x100),
)
_NVLINK_ERRORS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data", 4: "ecc"}
_LANE_PREFIX = {
    "REPLAY_ERROR_COUNT": "replay",
    "RECOVERY_ERROR_COUNT": "recovery",
    "CRC_FLIT_ERROR_COUNT": "crc_flit",
    "CRC_DATA_ERROR_COUNT": "crc_data",
    "ECC_DATA_ERROR_COUNT": "ecc",
}
_GPM = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: "nvwatch_gpu_sm_active_ratio",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "nvwatch_gpu_sm_occupancy_ratio",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "nvwatch_gpu_tensor_active_ratio",
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "nvwatch_gpu_dram_active_ratio",
}


@dataclass(frozen=True)
class Expectation:
    gpu: int
    metric: str
    labels: tuple[tuple[str, str], ...]
    value: float | None  # None: must be absent
    source: str  # the NVML answer it comes from, for the failure message

    @property
    def key(self) -> tuple[int, str, tuple[tuple[str, str], ...]]:
        return (self.gpu, self.metric, self.labels)


@dataclass(frozen=True)
class Verdict:
    expectation: Expectation
    exported: float | None
    ok: bool

    def line(self) -> str:
        e = self.expectation
        labels = ",".join(f'{k}="{v}"' for k, v in (("gpu", str(e.gpu)), *e.labels))
        want = "absent" if e.value is None else f"{e.value:g}"
        got = "absent" if self.exported is None else f"{self.exported:g}"
        return f"{e.metric}{{{labels}}}: expected {want} from {e.source}, exported {got}"


# --- field ids -------------------------------------------------------------------------


def _field_table() -> dict[int, tuple[str, dict[str, str], float]]:
    """field id -> (metric, labels, scale) for the GPU-wide fields; NVLink ones aside."""
    h = pynvml
    table: dict[int, tuple[str, dict[str, str], float]] = {
        h.NVML_FI_DEV_MEMORY_TEMP: ("nvwatch_gpu_temperature_celsius", {"sensor": "memory"}, 1),
        h.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: ("nvwatch_gpu_energy_joules_total", {}, 1e-3),
        h.NVML_FI_DEV_POWER_CURRENT_LIMIT: ("nvwatch_gpu_power_limit_watts", {}, 1e-3),
        h.NVML_FI_DEV_PCIE_REPLAY_COUNTER: ("nvwatch_gpu_pcie_replays_total", {}, 1),
        h.NVML_FI_DEV_RETIRED_SBE: ("nvwatch_gpu_retired_pages", {"cause": "sbe"}, 1),
        h.NVML_FI_DEV_RETIRED_DBE: ("nvwatch_gpu_retired_pages", {"cause": "dbe"}, 1),
        h.NVML_FI_DEV_RETIRED_PENDING: ("nvwatch_gpu_retired_pages_pending", {}, 1),
    }
    ecc = "nvwatch_gpu_ecc_errors_total"
    table[h.NVML_FI_DEV_ECC_SBE_VOL_TOTAL] = (ecc, {"scope": "volatile", "type": "corrected"}, 1)
    table[h.NVML_FI_DEV_ECC_DBE_VOL_TOTAL] = (ecc, {"scope": "volatile", "type": "uncorrected"}, 1)
    table[h.NVML_FI_DEV_ECC_SBE_AGG_TOTAL] = (ecc, {"scope": "aggregate", "type": "corrected"}, 1)
    table[h.NVML_FI_DEV_ECC_DBE_AGG_TOTAL] = (
        ecc,
        {"scope": "aggregate", "type": "uncorrected"},
        1,
    )
    rows = "nvwatch_gpu_remapped_rows"
    table[h.NVML_FI_DEV_REMAPPED_COR] = (rows, {"kind": "correctable"}, 1)
    table[h.NVML_FI_DEV_REMAPPED_UNC] = (rows, {"kind": "uncorrectable"}, 1)
    table[h.NVML_FI_DEV_REMAPPED_PENDING] = (rows, {"kind": "pending"}, 1)
    table[h.NVML_FI_DEV_REMAPPED_FAILURE] = (rows, {"kind": "failure"}, 1)
    for policy, reason in _POLICIES.items():
        table[h.NVML_FI_DEV_PERF_POLICY_POWER + policy] = (
            "nvwatch_gpu_throttle_seconds_total",
            {"reason": reason},
            1e-9,
        )
    return table


def _lane_fields() -> dict[int, tuple[int, str]]:
    """NVML_FI_DEV_NVLINK_<counter>_L<n> -> (link n, error type)."""
    found = {}
    for name in dir(pynvml):
        for prefix, kind in _LANE_PREFIX.items():
            head = f"NVML_FI_DEV_NVLINK_{prefix}_L"
            if name.startswith(head) and name[len(head) :].isdigit():
                found[int(getattr(pynvml, name))] = (int(name[len(head) :]), kind)
    return found


FIELDS = _field_table()
LANE_FIELDS = _lane_fields()
_FLAGS = frozenset(
    {
        pynvml.NVML_FI_DEV_RETIRED_PENDING,
        pynvml.NVML_FI_DEV_REMAPPED_PENDING,
        pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
    }
)
_SCOPED_ERRORS = {
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: "replay",
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: "recovery",
}
_VALUE_MEMBERS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}
_NO_VALUE = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)


def entry_value(entry: Any) -> float | None:
    """A field entry's number; None when it failed or holds NVML's "no value"."""
    if int(entry.nvmlReturn) != SUCCESS:
        return None
    member = _VALUE_MEMBERS.get(int(entry.valueType))
    if member is None:
        return None
    value = getattr(entry.value, member)
    if isinstance(value, int) and value in _NO_VALUE:
        return None
    return float(value)


# --- the calls -------------------------------------------------------------------------


def device_indices(calls: Iterable[Call]) -> dict[int, int]:
    """Handle address -> GPU index, from the tape's nvmlDeviceGetHandleByIndex calls."""
    found = {}
    for call in calls:
        if call["fn"].startswith("nvmlDeviceGetHandleByIndex") and call["ret"] == SUCCESS:
            index = next(d["v"] for d in call["args"] if "v" in d)
            out = next(d for d in call["args"] if "out" in d)
            found[handle_of(out)] = int(index)
    return found


def _scalar(call: Call, position: int = -1) -> float | None:
    """The `position`-th out-parameter (the last by default) as a number."""
    outs = [d for d in call["args"] if "out" in d]
    if not outs:
        return None
    value = decoded(outs[position])
    if value is None:
        return None
    number = getattr(value, "value", value)
    if isinstance(number, int) and number in _NO_VALUE:
        return None
    return float(number) if isinstance(number, int | float) else None


def _inputs(call: Call) -> list[Any]:
    return [d["v"] for d in call["args"] if "v" in d]


class _Collector:
    def __init__(self) -> None:
        self.items: dict[tuple[int, str, tuple[tuple[str, str], ...]], Expectation] = {}

    def add(
        self,
        gpu: int,
        metric: str,
        labels: Mapping[str, str],
        value: float | None,
        source: str,
    ) -> None:
        e = Expectation(gpu, metric, tuple(sorted(labels.items())), value, source)
        self.items[e.key] = e


def expected(calls: list[Call], nvlink_detail: str = "link") -> list[Expectation]:
    """The series `calls` (one agent's polls, in order) must produce; see the docstring."""
    gpus = device_indices(calls)
    out = _Collector()
    supported_reasons: dict[int, int] = {}
    for call in calls:
        handle = next((d["p"] for d in call["args"] if "p" in d), None)
        gpu = gpus.get(handle) if handle is not None else None
        if gpu is None:
            continue
        ok = call["ret"] == SUCCESS
        gone = call["ret"] == NOT_SUPPORTED
        if not ok and not gone:
            continue  # another error: the agent skips the value this poll; nothing to say
        _one(out, gpu, call, ok, supported_reasons, nvlink_detail)
    return list(out.items.values())


def _one(
    out: _Collector,
    gpu: int,
    call: Call,
    ok: bool,
    supported: dict[int, int],
    nvlink_detail: str,
) -> None:
    fn: str = call["fn"]
    args = _inputs(call)
    source = f"{fn}{tuple(args) if args else ''}"

    def put(metric: str, labels: Mapping[str, str], value: float | None, unit: str = "") -> None:
        shown = f"{source} = {'NotSupported' if value is None and not ok else value}{unit}"
        out.add(gpu, metric, labels, value, shown)

    def scaled(scale: float, position: int = -1) -> float | None:
        raw = _scalar(call, position) if ok else None
        return raw * scale if raw is not None else None

    if fn == "nvmlDeviceGetUtilizationRates":
        util = _struct(call) if ok else None
        put("nvwatch_gpu_utilization_ratio", {}, util.gpu / 100 if util else None)
        put("nvwatch_gpu_memory_utilization_ratio", {}, util.memory / 100 if util else None)
    elif fn in ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"):
        memory = _struct(call) if ok else None
        if memory is None and fn.endswith("_v2"):
            return  # the agent falls back to version 1: that call says
        for part in ("total", "used", "free"):
            value = float(getattr(memory, part)) if memory is not None else None
            put(f"nvwatch_gpu_memory_{part}_bytes", {}, value)
    elif fn == "nvmlDeviceGetPowerUsage":
        put("nvwatch_gpu_power_watts", {}, scaled(1e-3), " W")
    elif fn == "nvmlDeviceGetEnforcedPowerLimit":
        put("nvwatch_gpu_power_limit_watts", {}, scaled(1e-3))
    elif fn == "nvmlDeviceGetPowerManagementDefaultLimit":
        put("nvwatch_gpu_power_tdp_watts", {}, scaled(1e-3))
    elif fn == "nvmlDeviceGetTotalEnergyConsumption":
        put("nvwatch_gpu_energy_joules_total", {}, scaled(1e-3))
    elif fn == "nvmlDeviceGetTemperatureV":
        reading = _struct(call) if ok else None
        put("nvwatch_gpu_temperature_celsius", {"sensor": "gpu"}, _temperature(reading))
    elif fn == "nvmlDeviceGetTemperature" and args and args[0] == pynvml.NVML_TEMPERATURE_GPU:
        put("nvwatch_gpu_temperature_celsius", {"sensor": "gpu"}, scaled(1))
    elif fn == "nvmlDeviceGetTemperatureThreshold" and args and args[0] in _THRESHOLDS:
        label = {"threshold": _THRESHOLDS[args[0]]}
        put("nvwatch_gpu_temperature_threshold_celsius", label, scaled(1))
    elif fn == "nvmlDeviceGetFanSpeed":
        put("nvwatch_gpu_fan_speed_ratio", {}, scaled(0.01))
    elif fn in ("nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo") and args:
        metric = "nvwatch_gpu_clock_hertz" if "Max" not in fn else "nvwatch_gpu_clock_max_hertz"
        if args[0] in _CLOCKS:
            put(metric, {"clock": _CLOCKS[args[0]]}, scaled(1e6))
    elif fn in ("nvmlDeviceGetSupportedClocksEventReasons", "nvmlDeviceGetSupportedClocksThrottleReasons"):  # fmt: skip  # noqa: E501
        value = _scalar(call) if ok else None
        if value is not None:
            supported[gpu] = int(value)
    elif fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):  # fmt: skip  # noqa: E501
        value = _scalar(call) if ok else None
        mask = supported.get(gpu)
        for reason, bit in _REASONS:
            if value is None or mask is None or not mask & bit:
                continue  # without both masks the agent may leave a reason out
            put("nvwatch_gpu_clock_event_active", {"reason": reason}, float(bool(int(value) & bit)))
    elif fn == "nvmlDeviceGetViolationStatus" and args and args[0] in _POLICIES:
        status = _struct(call) if ok else None
        value = float(status.violationTime) * 1e-9 if status is not None else None
        put("nvwatch_gpu_throttle_seconds_total", {"reason": _POLICIES[args[0]]}, value)
    elif fn == "nvmlDeviceGetPcieThroughput" and args:
        direction = {pynvml.NVML_PCIE_UTIL_TX_BYTES: "tx", pynvml.NVML_PCIE_UTIL_RX_BYTES: "rx"}
        if args[0] in direction:
            label = {"direction": direction[args[0]]}
            put("nvwatch_gpu_pcie_throughput_bytes_per_second", label, scaled(KIB), " KiB/s")
    elif fn == "nvmlDeviceGetPcieReplayCounter":
        put("nvwatch_gpu_pcie_replays_total", {}, scaled(1))
    elif fn.startswith(("nvmlDeviceGetCurrPcieLink", "nvmlDeviceGetMaxPcieLink")):
        kind = "current" if "Curr" in fn else "max"
        metric = "generation" if fn.endswith("Generation") else "width"
        put(f"nvwatch_gpu_pcie_link_{metric}", {"kind": kind}, scaled(1))
    elif fn == "nvmlDeviceGetTotalEccErrors" and len(args) >= 2:
        labels = {
            "type": "corrected" if args[0] == 0 else "uncorrected",
            "scope": "volatile" if args[1] == 0 else "aggregate",
        }
        put("nvwatch_gpu_ecc_errors_total", labels, scaled(1))
    elif fn == "nvmlDeviceGetRemappedRows":
        for position, kind in enumerate(("correctable", "uncorrectable", "pending", "failure")):
            value = _scalar(call, position) if ok else None
            if kind in ("pending", "failure") and value is not None:
                value = float(bool(value))
            put("nvwatch_gpu_remapped_rows", {"kind": kind}, value)
    elif fn == "nvmlDeviceGetRetiredPagesPendingStatus":
        value = _scalar(call) if ok else None
        put("nvwatch_gpu_retired_pages_pending", {}, None if value is None else float(bool(value)))
    elif fn == "nvmlDeviceGetRetiredPages" and args:
        cause = {0: "sbe", 1: "dbe"}.get(args[0])
        if cause is not None and not ok:
            put("nvwatch_gpu_retired_pages", {"cause": cause}, None)
    elif fn == "nvmlDeviceGetMigMode":
        for position, kind in enumerate(("current", "pending")):
            put("nvwatch_gpu_mig_mode", {"kind": kind}, scaled(1, position))
    elif fn == "nvmlGpmMetricsGet":
        _gpm(out, gpu, call, ok)
    elif nvlink_detail == "link":
        _nvlink(put, fn, args, call, ok, scaled)
    if fn == "nvmlDeviceGetFieldValues" and ok:
        _fields(out, gpu, call, nvlink_detail)


def _struct(call: Call) -> Any | None:
    outs = [d for d in call["args"] if "out" in d]
    return decoded(outs[-1]) if outs else None


def _temperature(reading: Any | None) -> float | None:
    if reading is None:
        return None
    value = getattr(reading, "temperature", None)
    return float(value) if isinstance(value, int | float) else None


def _gpm(out: _Collector, gpu: int, call: Call, ok: bool) -> None:
    request = _struct(call) if ok else None
    if request is None:
        return
    for slot in range(int(request.numMetrics)):
        metric = request.metrics[slot]
        name = _GPM.get(int(metric.metricId))
        if name is None:
            continue
        good = int(metric.nvmlReturn) == SUCCESS and math.isfinite(metric.value)
        value = min(float(metric.value) / 100, 1.0) if good else None
        source = f"nvmlGpmMetricsGet metric {int(metric.metricId)} = {metric.value} %"
        out.add(gpu, name, {}, value, source)


def _nvlink(put: Any, fn: str, args: list[Any], call: Call, ok: bool, scaled: Any) -> None:
    if not args:
        return
    link = {"link": str(args[0])}
    if fn == "nvmlDeviceGetNvLinkState":
        put("nvwatch_nvlink_up", link, scaled(1))
    elif fn == "nvmlDeviceGetNvLinkErrorCounter" and len(args) >= 2 and args[1] in _NVLINK_ERRORS:
        put("nvwatch_nvlink_errors_total", {**link, "type": _NVLINK_ERRORS[args[1]]}, scaled(1))
    elif fn == "nvmlDeviceGetNvLinkVersion" and ok:
        version = _scalar(call)
        speed = NVLINK_VERSION_BYTES_PER_SECOND.get(int(version)) if version is not None else None
        put("nvwatch_nvlink_speed_bytes_per_second", link, speed)


def _fields(out: _Collector, gpu: int, call: Call, nvlink_detail: str) -> None:
    h = pynvml
    for entry in field_entries(call):
        field_id, scope = int(entry.fieldId), int(entry.scopeId)
        status = int(entry.nvmlReturn)
        if status not in (SUCCESS, NOT_SUPPORTED):
            continue
        value = entry_value(entry)
        source = f"field {field_id} scope {scope} = " + (
            "NotSupported" if status else f"{value:g}" if value is not None else "no value"
        )
        if status == NOT_SUPPORTED:
            continue  # the agent asks the per-call function next; that call says
        if field_id in FIELDS:
            metric, labels, scale = FIELDS[field_id]
            converted = value * scale if value is not None else None
            if field_id in _FLAGS and value is not None:
                converted = float(bool(value))  # a yes/no reading, exported as 0 or 1
            out.add(gpu, metric, labels, converted, source)
            continue
        if nvlink_detail != "link":
            continue
        link = {"link": str(scope)}
        if field_id == h.NVML_FI_DEV_NVLINK_GET_STATE:
            out.add(gpu, "nvwatch_nvlink_up", link, value, source)
        elif field_id == h.NVML_FI_DEV_NVLINK_GET_SPEED:
            speed = value * 1e6 if value is not None else None  # MB/s
            out.add(gpu, "nvwatch_nvlink_speed_bytes_per_second", link, speed, source)
        elif field_id == h.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
            tx = value * KIB if value is not None else None
            out.add(gpu, "nvwatch_nvlink_transmit_bytes_total", link, tx, source)
        elif field_id == h.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
            rx = value * KIB if value is not None else None
            out.add(gpu, "nvwatch_nvlink_receive_bytes_total", link, rx, source)
        elif field_id in _SCOPED_ERRORS:
            labels = {"link": str(scope), "type": _SCOPED_ERRORS[field_id]}
            out.add(gpu, "nvwatch_nvlink_errors_total", labels, value, source)
        elif field_id in LANE_FIELDS:
            lane, kind = LANE_FIELDS[field_id]
            labels = {"link": str(lane), "type": kind}
            out.add(gpu, "nvwatch_nvlink_errors_total", labels, value, source)


# --- judging ---------------------------------------------------------------------------

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples_of(exposition: str) -> Samples:
    """(sample name, labels without uuid) -> value, of a Prometheus text exposition."""
    found: Samples = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels = frozenset((k, v) for k, v in sample.labels.items() if k != "uuid")
            found[(sample.name, labels)] = float(sample.value)
    return found


def judge(expectations: Iterable[Expectation], exposition: str) -> list[Verdict]:
    samples = samples_of(exposition)
    verdicts = []
    for e in expectations:
        key = (e.metric, frozenset({("gpu", str(e.gpu)), *e.labels}))
        got = samples.get(key)
        if e.value is None:
            ok = got is None
        else:
            ok = got is not None and math.isclose(got, e.value, rel_tol=1e-9, abs_tol=1e-9)
        verdicts.append(Verdict(e, got, ok))
    return verdicts


def not_supported_calls(calls: Iterable[Call]) -> list[str]:
    """Every reading NVML answered NotSupported: "fn(args)" or "field F scope S", once."""
    found: dict[str, None] = {}
    for call in calls:
        if call["fn"] == "nvmlDeviceGetFieldValues" and call["ret"] == SUCCESS:
            for entry in field_entries(call):
                if int(entry.nvmlReturn) == NOT_SUPPORTED:
                    found[f"field {int(entry.fieldId)} scope {int(entry.scopeId)}"] = None
        elif call["ret"] == NOT_SUPPORTED:
            args = _inputs(call)
            found[f"{call['fn']}{tuple(args) if args else '()'}"] = None
    return list(found)
