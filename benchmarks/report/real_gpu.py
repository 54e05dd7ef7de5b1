"""The real-GPU section: NVML timings on a real driver, or how to take them."""

from __future__ import annotations

from benchmarks.real_nvml import RealNvmlResult, Timing
from benchmarks.report.model import Results, ms

_NOT_MEASURED = [
    "**Not measured: no NVIDIA GPU or driver was available to this run** (no",
    "H100/H200 in this environment). Every NVML figure above is the simulator's.",
    "",
    "On a node with the driver, run `python benchmarks/run.py --real-nvml --out",
    "docs/performance.md`. It times `NvmlSource.collect()` on the real library and",
    "reads the same NVLink values of every GPU three ways: one batched",
    "`nvmlDeviceGetFieldValues` per GPU (what the source does), the same call with",
    "one value at a time (isolates what batching saves), and the per-link functions",
    "(`nvmlDeviceGetNvLinkState`, `nvmlDeviceGetNvLinkErrorCounter`). Without a",
    "driver it stops with one line and exit code 2.",
    "",
]


def _timing_row(name: str, timing: Timing) -> str:
    return (
        f"| {name} | {ms(timing.median_wall)} | {ms(timing.p99_wall)} | "
        f"{ms(timing.median_cpu)} | {timing.count} |"
    )


def real_nvml_section(results: Results) -> str:
    real = results.real_nvml
    body = _NOT_MEASURED if real is None else _measured(real)
    return "\n".join(["## Real GPUs", "", *body])


def _measured(real: RealNvmlResult) -> list[str]:
    return [
        f"Driver {real.driver_version}; GPUs: {', '.join(sorted(set(real.gpus)))} "
        f"x{len(real.gpus)}; active NVLinks per GPU: {real.links_per_gpu}.",
        "",
        "| read, all GPUs | median wall | p99 wall | median CPU | runs |",
        "|---|---|---|---|---|",
        _timing_row("`NvmlSource.collect()`", real.source_poll),
        _timing_row(
            f"batched field values ({real.values_per_gpu} values, 1 call per GPU)", real.batched
        ),
        _timing_row(
            f"one field value per call ({real.values_per_gpu} calls per GPU)", real.per_field
        ),
        _timing_row(
            f"per-link functions ({real.per_call_calls_per_gpu} calls per GPU)", real.per_call
        ),
        "",
    ]
