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
from pathlib import Path
from typing import Any

import pynvml

from benchmarks.real_gpu.readings import gpm, nvml_handles, read_all, try_call
from benchmarks.real_gpu.tape import Recorder, record_calls, tape_document, write_tape


def _write(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")


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
        readings = read_all(window)
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


def bench(out: Path, seconds: float) -> None:
    from benchmarks.real_nvml import measure_real_nvml

    result = measure_real_nvml(polls=200, time_limit=seconds)
    _write(out / "bench-nvml.json", dataclasses.asdict(result))


# --- events ------------------------------------------------------------------------------


def events(out: Path, wait_ms: int) -> None:
    pynvml.nvmlInit()
    try:
        handles = nvml_handles()
        result: dict[str, Any] = {"xid": _xid(handles, wait_ms)}
        result["gpm"] = [gpm(h, 0.2) for h in handles[:2]]
        result["mig"] = [
            {
                "mode": try_call(pynvml.nvmlDeviceGetMigMode, h),
                "max_devices": try_call(pynvml.nvmlDeviceGetMaxMigDeviceCount, h),
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
            registered[index] = try_call(
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
