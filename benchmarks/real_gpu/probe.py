"""The NVML side of the check: run where NVML is, the real one or the simulated one.

    python -m benchmarks.real_gpu.probe record --out DIR --phase idle|load [...]
    python -m benchmarks.real_gpu.probe bench --out DIR [--seconds S]
    python -m benchmarks.real_gpu.probe events --out DIR

It never installs the simulator: on a GPU node it reads the driver, and the check runs it
under `nvwatch simulate exec` to prove the same code without one. Every loop is bounded
by a count and a deadline; every file goes under --out.

record: two agent polls (NvmlSource, as `serve` builds it) with every NVML call on a tape
(tape.py), the exposition of the second poll, `nvidia-smi --query-gpu` right after it
where nvidia-smi exists, the cost of further polls (wall and CPU per poll, wall per NVML
function), and direct readings the assumptions need (memory v1/v2, PCIe rate against the
cumulative PCIe byte counters, NVLink fields and counters, violation times, GPM).
bench: benchmarks/real_nvml.py (batched against per-field and per-call reads).
events: the XID event set (created, waited on with a timeout: wall against CPU), the
agent's XID listener idle, GPM from two samples, MIG mode (read only).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from benchmarks.real_gpu.tape import Recorder, record_calls, tape_document, write_tape

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


def _write(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")


def _try(fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
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


def _handles() -> list[Any]:
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- record ------------------------------------------------------------------------------


def record(
    out: Path, phase: str, settle: float, timing_polls: int, window: float, smi: bool = True
) -> None:
    from nvwatch.agent.exposition.render import prepare
    from nvwatch.agent.exposition.text import render_text
    from nvwatch.agent.sources.nvml.source import NvmlSource

    recorder = Recorder()
    with record_calls(recorder):
        # the agent's NVML source as `serve` builds it, without the kernel log (the check
        # reads /dev/kmsg itself) and without a sysfs root (NVML's word alone)
        source = NvmlSource(nvlink_detail="link")
        try:
            recorder.mode, recorder.phase = "record", "poll1"
            started = time.time()
            source.collect()
            time.sleep(settle)
            recorder.phase = "poll2"
            sample = source.collect()
            recorder.mode = "off"
            exposition = render_text([prepare("nvml", sample)]).decode()
            csv = _nvidia_smi_query(out / f"nvidia-smi-{phase}.csv") if smi else None
            timing = _time_polls(source, recorder, timing_polls, prepare, render_text)
        finally:
            source.close()
    write_tape(
        out / f"tape-{phase}.json.gz",
        tape_document(recorder, phase=phase, settle=settle, started=started),
    )
    (out / f"exposition-{phase}.prom").write_text(exposition)
    _write(out / f"timing-{phase}.json", timing)
    pynvml.nvmlInit()
    try:
        readings = _readings(window)
    finally:
        pynvml.nvmlShutdown()
    readings["nvidia_smi_csv"] = csv
    _write(out / f"readings-{phase}.json", readings)


def _nvidia_smi_query(path: Path) -> str | None:
    """nvidia-smi's value of every field the agent pairs with one, right after the poll."""
    from nvwatch.agent.nvsmi_compare import nvidia_smi_command

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(
            nvidia_smi_command(), capture_output=True, text=True, timeout=30, check=False
        )
    except subprocess.TimeoutExpired:
        return None
    path.write_text(done.stdout + (f"# stderr: {done.stderr}" if done.returncode else ""))
    return path.name if done.returncode == 0 else None


def _time_polls(
    source: Any, recorder: Recorder, polls: int, prepare: Any, render_text: Any
) -> dict[str, Any]:
    """Wall and CPU of further whole polls (collect + render), and each NVML function's
    wall time per call over them."""
    recorder.timings.clear()
    recorder.mode = "time"
    walls: list[float] = []
    cpus: list[float] = []
    deadline = time.monotonic() + max(2.0, polls * 0.5)
    try:
        for _ in range(polls):
            if time.monotonic() > deadline:
                break
            wall, cpu = time.perf_counter(), time.thread_time()
            render_text([prepare("nvml", source.collect())])
            cpus.append(time.thread_time() - cpu)
            walls.append(time.perf_counter() - wall)
            time.sleep(0.01)
    finally:
        recorder.mode = "off"
    per_call = {
        name: {
            "calls_per_poll": len(values) / max(1, len(walls)),
            "median_us": _median(values),
            "max_us": max(values),
            "total_us_per_poll": sum(values) / max(1, len(walls)),
        }
        for name, values in sorted(recorder.timings.items())
    }
    nvml_per_poll = sum(v["total_us_per_poll"] for v in per_call.values())
    return {
        "polls": len(walls),
        "poll_wall_s": {"median": _median(walls), "max": max(walls, default=0.0)},
        "poll_cpu_s": {"median": _median(cpus), "max": max(cpus, default=0.0)},
        "nvml_us_per_poll": nvml_per_poll,
        "nvml_calls_per_poll": sum(v["calls_per_poll"] for v in per_call.values()),
        "per_function": per_call,
    }


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def _readings(window: float) -> dict[str, Any]:
    """What the assumptions of docs/hardware-notes.md need, read directly from NVML."""
    handles = _handles()
    gpus = []
    for index, h in enumerate(handles):
        gpu: dict[str, Any] = {
            "index": index,
            "name": _try(pynvml.nvmlDeviceGetName, h),
            "memory_v1": _try(pynvml.nvmlDeviceGetMemoryInfo, h),
            "memory_v2": _try(pynvml.nvmlDeviceGetMemoryInfo, h, pynvml.nvmlMemory_v2),
            "power_usage_mw": _try(pynvml.nvmlDeviceGetPowerUsage, h),
            "power_default_limit_mw": _try(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, h),
            "power_enforced_limit_mw": _try(pynvml.nvmlDeviceGetEnforcedPowerLimit, h),
            "power_constraints_mw": _try(pynvml.nvmlDeviceGetPowerManagementLimitConstraints, h),
            "thresholds": {
                name: _try(pynvml.nvmlDeviceGetTemperatureThreshold, h, which)
                for name, which in (
                    ("shutdown", pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
                    ("slowdown", pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                    ("memory_max", pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX),
                    ("gpu_max", pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
                )
            },
            "max_clocks_mhz": {
                name: _try(pynvml.nvmlDeviceGetMaxClockInfo, h, clock)
                for name, clock in (
                    ("graphics", pynvml.NVML_CLOCK_GRAPHICS),
                    ("sm", pynvml.NVML_CLOCK_SM),
                    ("memory", pynvml.NVML_CLOCK_MEM),
                )
            },
            "clocks_mhz": {
                "sm": _try(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
                "memory": _try(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM),
            },
            "pcie_max": {
                "generation": _try(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "width": _try(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
            },
            "retired_pages_sbe": _try(
                pynvml.nvmlDeviceGetRetiredPages,
                h,
                pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            ),
            "remapped_rows": _try(pynvml.nvmlDeviceGetRemappedRows, h),
            "violation": {
                str(policy): _try(pynvml.nvmlDeviceGetViolationStatus, h, policy)
                for policy in range(6)
            },
            "nvlink": _nvlink(h),
            # the first GPU only: the loaded one, and a second of wall time per GPU
            "energy": _energy(h, min(1.0, window)) if index == 0 else None,
        }
        gpus.append(gpu)
    first = handles[0] if handles else None
    return {
        "driver_version": _try(pynvml.nvmlSystemGetDriverVersion),
        "nvml_version": _try(pynvml.nvmlSystemGetNVMLVersion),
        "cuda_driver_version": _try(pynvml.nvmlSystemGetCudaDriverVersion),
        "gpus": gpus,
        "pcie_rate": _pcie_rate(first, window) if first is not None else None,
        "gpm": _gpm(first, 0.5) if first is not None else None,
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
        state = _try(pynvml.nvmlDeviceGetNvLinkState, h, link)
        if "error" in state and link > 0:
            break
        entry: dict[str, Any] = {
            "link": link,
            "state": state,
            "version": _try(pynvml.nvmlDeviceGetNvLinkVersion, h, link),
            "errors_by_call": {
                str(counter): _try(pynvml.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
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


def _gpm(h: Any, interval: float) -> dict[str, Any]:
    """Every GPM metric of interest from two samples `interval` apart (percent ones must
    lie in 0..100)."""
    support = _try(pynvml.nvmlGpmQueryDeviceSupport, h)
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


def bench(out: Path, seconds: float) -> None:
    from benchmarks.real_nvml import measure_real_nvml

    result = measure_real_nvml(polls=200, time_limit=seconds)
    _write(out / "bench-nvml.json", dataclasses.asdict(result))


# --- events ------------------------------------------------------------------------------


def events(out: Path, wait_ms: int) -> None:
    pynvml.nvmlInit()
    try:
        handles = _handles()
        result: dict[str, Any] = {"xid": _xid(handles, wait_ms)}
        result["gpm"] = [_gpm(h, 0.2) for h in handles[:2]]
        result["mig"] = [
            {
                "mode": _try(pynvml.nvmlDeviceGetMigMode, h),
                "max_devices": _try(pynvml.nvmlDeviceGetMaxMigDeviceCount, h),
            }
            for h in handles
        ]
    finally:
        pynvml.nvmlShutdown()
    result["listener"] = _listener_idle(2.0)
    _write(out / "events.json", result)


def _xid(handles: list[Any], wait_ms: int) -> dict[str, Any]:
    """Create the XID event set, register every GPU, wait twice with a timeout: a wait
    that sleeps in the driver costs almost no CPU over its wall time."""
    try:
        event_set = pynvml.nvmlEventSetCreate()
    except pynvml.NVMLError as err:
        return {"created": False, "error": type(err).__name__}
    registered = {}
    waits = []
    try:
        for index, h in enumerate(handles):
            registered[index] = _try(
                pynvml.nvmlDeviceRegisterEvents, h, pynvml.nvmlEventTypeXidCriticalError, event_set
            )
        for _ in range(2):
            wall, cpu = time.perf_counter(), time.thread_time()
            outcome = "event"
            data: dict[str, Any] = {}
            try:
                event = pynvml.nvmlEventSetWait_v2(event_set, wait_ms)
                data = {"type": int(event.eventType), "xid": int(event.eventData)}
            except pynvml.NVMLError as err:
                outcome = type(err).__name__.removeprefix("NVMLError_")
            waits.append(
                {
                    "outcome": outcome,
                    "wall_s": time.perf_counter() - wall,
                    "cpu_s": time.thread_time() - cpu,
                    **data,
                }
            )
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlEventSetFree(event_set)
    return {"created": True, "wait_ms": wait_ms, "registered": registered, "waits": waits}


def _listener_idle(seconds: float) -> dict[str, Any]:
    """The agent's XID listener thread running idle: process CPU over `seconds`."""
    from nvwatch.agent.sources.nvml.source import NvmlSource

    source = NvmlSource(nvlink_detail="gpu")
    try:
        source.collect()
        cpu, wall = _cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        used, elapsed = _cpu_seconds() - cpu, time.monotonic() - wall
    finally:
        source.close()
    return {"seconds": elapsed, "cpu_s": used, "cpu_per_s": used / elapsed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="probe", description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--phase", required=True)
    rec.add_argument("--settle", type=float, default=1.0)
    rec.add_argument("--timing-polls", type=int, default=20)
    rec.add_argument("--window", type=float, default=2.0)
    rec.add_argument("--no-nvidia-smi", action="store_true", help="simulated: do not ask it")
    ben = sub.add_parser("bench")
    ben.add_argument("--out", type=Path, required=True)
    ben.add_argument("--seconds", type=float, default=20.0)
    ev = sub.add_parser("events")
    ev.add_argument("--out", type=Path, required=True)
    ev.add_argument("--wait-ms", type=int, default=500)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from benchmarks.real_nvml import RealNvmlUnavailable

    try:
        run(args)
    except RealNvmlUnavailable as err:
        print(f"NVML unavailable: {err}", file=sys.stderr)
        return 2
    except pynvml.NVMLError as err:
        # no driver, no GPU: one line for the check's summary, not a traceback
        print(
            f"NVML unavailable: {type(err).__name__.removeprefix('NVMLError_')}: {err}",
            file=sys.stderr,
        )
        return 2
    return 0


def run(args: argparse.Namespace) -> None:
    if args.command == "record":
        smi = not args.no_nvidia_smi
        record(args.out, args.phase, args.settle, args.timing_polls, args.window, smi)
    elif args.command == "bench":
        bench(args.out, args.seconds)
    else:
        events(args.out, args.wait_ms)


if __name__ == "__main__":
    sys.exit(main())
