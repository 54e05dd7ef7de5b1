"""The NVML-calls section: library calls per GPU per poll, and its target (half of
before) judged per profile."""

from __future__ import annotations

from benchmarks.report.model import Results, Verdict


def nvml_calls_verdicts(results: Results) -> list[Verdict]:
    return [
        Verdict(
            f"{calls.profile} NVML calls per GPU per poll <= half of {calls.before:g}",
            f"{calls.per_gpu_per_poll:.1f}",
            calls.per_gpu_per_poll <= calls.before / 2,
        )
        for calls in results.nvml_calls
        if calls.before is not None
    ]


def nvml_calls_section(results: Results) -> str:
    if not results.nvml_calls:
        return ""
    lines = [
        "## NVML calls per GPU per poll",
        "",
        "Library calls the simulated libnvidia-ml answered per GPU per poll, in the steady",
        "state (after the first poll, which discovers NVLink links and reads the static",
        "values: limits, thresholds, maxima, re-read every 10 min). On a real node each is",
        "an ioctl into the driver. *before* is the figure before the field batch took every",
        "GPU-level value with a field id; *batches* is nvmlDeviceGetFieldValues per GPU.",
        "",
        "| profile | GPUs | calls per GPU per poll | before | batches |",
        "|---|---|---|---|---|",
    ]
    for calls in results.nvml_calls:
        before = f"{calls.before:g}" if calls.before is not None else "-"
        lines.append(
            f"| {calls.profile} | {calls.gpus} | **{calls.per_gpu_per_poll:.1f}** | "
            f"{before} | {calls.batches_per_gpu_per_poll:g} |"
        )
    lines.append("")
    return "\n".join(lines)
