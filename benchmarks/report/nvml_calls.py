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
    new = max(calls.new_per_gpu_per_poll for calls in results.nvml_calls)
    lines += [
        "",
        "Per-process utilization (nvmlDeviceGetProcessUtilization), read after *before* was",
        f"measured, is counted apart: at most {new:g} call per GPU per poll (GPUs with processes).",
        "",
    ]
    return "\n".join(lines)


# Why a profile can miss: boards without ECC, page retirement, row remapping or
# violation counters (GeForce) never made those calls (NotSupported is remembered,
# agent/sources/nvml/device.py), so the batch has little to take over from them.
_MISS_CAUSE = (
    ". Boards without ECC, page retirement, row remapping or violation counters "
    "(GeForce) never made those calls (NotSupported is remembered), so the batch has "
    "little to take over. What they still call has no field id that gives the same "
    "value: utilization, memory, current clocks, GPU temperature, fan, power draw "
    "(NVML_FI_DEV_POWER_INSTANT is not the averaged nvmlDeviceGetPowerUsage on every "
    "board), the enforced limit (it moves with power capping, so it is not static), "
    "PCIe throughput (the fields count bytes, the call gives a KiB/s rate), current "
    "PCIe link, clock-event reasons and the process list (two calls: pynvml asks for "
    "the count first)."
)


def nvml_calls_miss(missed: dict[str, Verdict]) -> str | None:
    targets = [t for t in missed if "NVML calls per GPU per poll" in t]
    if not targets:
        return None
    figures = "; ".join(f"{t}: {missed[t].figure}" for t in targets)
    return "- **NVML calls**: " + figures + _MISS_CAUSE
