"""Each assumption of docs/hardware-notes.md, settled (or not) from one check's raw files.

A finding has the measured value, a verdict and the raw file that shows it. Verdicts:
"confirmed", "wrong", "not testable on one GPU" (it needs a peer GPU or NVLink traffic),
"inconclusive" (the run measured, but the numbers cannot decide) and "not measured" (a
step did not run; the reason says which). On a simulated run the verdicts are the
simulator's answers: they prove the check, not the hardware.
"""

from __future__ import annotations

from typing import Any

import pynvml

from benchmarks.real_gpu import smi
from benchmarks.real_gpu.evidence import Evidence, error, value
from benchmarks.real_gpu.finding import (
    CONFIRMED,
    INCONCLUSIVE,
    MIB,
    NOT_MEASURED,
    ONE_GPU,
    WRONG,
    Finding,
    Judge,
    ratio_of,
)
from benchmarks.real_gpu.nvlink_assumptions import (
    link_count,
    nvlink_errors_high_links,
    nvlink_speed,
    nvlink_throughput,
)

# --- PCIe ------------------------------------------------------------------------------


def pcie_unit(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-load.json", "load.json"]
    readings = ev.readings("load")
    if readings is None:
        f.measured = "no loaded recording"
        return
    rate = (readings.get("pcie_rate") or {}).get("rx") or {}
    mean = rate.get("throughput_mean")
    if mean is None:
        f.measured = "nvmlDeviceGetPcieThroughput(RX) gave no sample"
        return
    reference = rate.get("counter_bytes_per_second")
    source = "NVML_FI_DEV_PCIE_COUNT_RX_BYTES over the same window"
    load = ev.json("load.json") or {}
    if reference is None and load.get("h2d_bytes_per_second"):
        reference = float(load["h2d_bytes_per_second"])
        source = "the load's own host-to-device copy rate"
    f.measured = f"RX throughput mean {mean:,.0f} (NVML units)"
    if reference is None:
        f.verdict = INCONCLUSIVE
        f.note = "no byte counter and no copy rate to compare with"
        return
    ratio = ratio_of(reference, mean * 1000)
    f.measured += f"; {source}: {reference:,.0f} B/s; bytes per NVML unit / 1000 = {ratio:.4f}"
    if mean * 1000 < 1e9:
        f.verdict = INCONCLUSIVE
        f.note = "PCIe moved less than 1 GB/s: too little to tell 1000 from 1024"
        return
    precise = source.startswith("NVML_FI")
    tolerance = 0.008 if precise else 0.1
    if abs(ratio - 1.024) <= tolerance and abs(ratio - 1.0) > tolerance * 1.5:
        f.verdict = CONFIRMED
    elif abs(ratio - 1.0) <= tolerance and abs(ratio - 1.024) > tolerance * 1.5:
        f.verdict = WRONG
        f.note = "KB = 1000 bytes: the agent's x1024 overstates PCIe throughput by 2.4%"
    else:
        f.verdict = INCONCLUSIVE
        f.note = "the ratio is near neither 1.024 (KiB) nor 1.000 (KB) within the noise"


# --- memory, thresholds, clocks, limits -------------------------------------------------


def memory_v2(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json", "nvidia-smi-query-extra.csv"]
    gpu = ev.gpu("idle")
    if gpu is None:
        return
    v1, v2 = value(gpu.get("memory_v1")), value(gpu.get("memory_v2"))
    if not isinstance(v2, dict):
        f.verdict = WRONG
        f.measured = f"nvmlDeviceGetMemoryInfo_v2: {error(gpu.get('memory_v2'))}"
        f.note = "the agent falls back to version 1, whose used includes reserved memory"
        return
    if not isinstance(v1, dict):
        f.verdict = INCONCLUSIVE
        f.measured = f"version 1: {error(gpu.get('memory_v1'))}"
        return
    used1, used2, reserved = (int(v1["used"]), int(v2["used"]), int(v2.get("reserved") or 0))
    f.measured = (
        f"v1 used {used1 / MIB:,.0f} MiB; v2 used {used2 / MIB:,.0f} MiB + reserved "
        f"{reserved / MIB:,.0f} MiB"
    )
    if reserved == 0:
        f.verdict = INCONCLUSIVE
        f.note = "no reserved memory: the two versions cannot differ"
    elif abs(used1 - (used2 + reserved)) <= 64 * MIB and used2 < used1:
        f.verdict = CONFIRMED
    else:
        f.verdict = WRONG


def memory_total(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json", "nvidia-smi-query-extra.csv"]
    gpu, profile = ev.gpu("idle"), ev.profile()
    v2 = value(gpu.get("memory_v2")) if gpu else None
    if not isinstance(v2, dict):
        return
    total = int(v2["total"]) / MIB
    f.measured = f"{total:,.0f} MiB"
    if profile is None:
        f.verdict = INCONCLUSIVE
        f.note = "no simulated profile of this board to compare with"
        return
    want = profile.gpus[0].memory_bytes / MIB
    f.measured += f" (profile {profile.name}: {want:,.0f} MiB)"
    f.verdict = CONFIRMED if total == want else WRONG


def thresholds(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json", "nvidia-smi-q.txt"]
    gpu, profile = ev.gpu("idle"), ev.profile()
    if gpu is None:
        return
    read = {name: value(r) for name, r in (gpu.get("thresholds") or {}).items()}
    order = ("slowdown", "shutdown", "gpu_max", "memory_max")
    f.measured = "/".join(str(read.get(name, "-")) for name in order) + " C"
    if profile is None:
        f.verdict = INCONCLUSIVE
        return
    model = profile.gpus[0]
    want = {
        "slowdown": model.temp_slowdown_c,
        "shutdown": model.temp_shutdown_c,
        "gpu_max": model.temp_gpu_max_c,
        "memory_max": model.temp_memory_max_c,
    }
    f.measured += f" (profile: {'/'.join(str(want[n]) for n in order)} C)"
    wrong = [name for name in order if read.get(name) != want[name]]
    f.verdict = WRONG if wrong else CONFIRMED
    if wrong:
        f.note = "differs: " + ", ".join(wrong)


def max_clocks(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json"]
    gpu, profile = ev.gpu("idle"), ev.profile()
    if gpu is None:
        return
    clocks = {name: value(r) for name, r in (gpu.get("max_clocks_mhz") or {}).items()}
    f.measured = f"SM {clocks.get('sm')} MHz, memory {clocks.get('memory')} MHz"
    if profile is None:
        f.verdict = INCONCLUSIVE
        return
    model = profile.gpus[0]
    f.measured += f" (profile: {model.max_sm_clock_mhz} / {model.max_memory_clock_mhz})"
    same = clocks.get("sm") == model.max_sm_clock_mhz
    same = same and clocks.get("memory") == model.max_memory_clock_mhz
    f.verdict = CONFIRMED if same else WRONG


def power_limits(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json"]
    gpu, profile = ev.gpu("idle"), ev.profile()
    if gpu is None:
        return
    default = value(gpu.get("power_default_limit_mw"))
    limits = value(gpu.get("power_constraints_mw"))
    low, high = limits if isinstance(limits, list) and len(limits) == 2 else (None, None)
    f.measured = f"default {_watts(default)}, range {_watts(low)} .. {_watts(high)}"
    if profile is None or default is None:
        f.verdict = INCONCLUSIVE
        return
    model = profile.gpus[0]
    f.measured += (
        f" (profile: {model.tdp_watts:g} W, {model.min_power_limit_watts:g} .. "
        f"{model.max_power_limit_watts:g} W)"
    )
    same = default == model.tdp_watts * 1000
    if low is not None and high is not None:
        same = same and low == model.min_power_limit_watts * 1000
        same = same and high == model.max_power_limit_watts * 1000
    f.verdict = CONFIRMED if same else WRONG


def _watts(milliwatts: Any) -> str:
    return f"{milliwatts / 1000:g} W" if isinstance(milliwatts, int | float) else "?"


# --- GPM, retirement, violation, NotSupported ------------------------------------------


def gpm_percent(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-load.json", "events.json"]
    readings = ev.readings("load")
    gpm = (readings or {}).get("gpm")
    if not gpm:
        f.measured = "no loaded recording"
        return
    if not gpm.get("supported") or "metrics" not in gpm:
        f.measured = f"GPM not available: {gpm.get('error') or gpm.get('query')}"
        return
    metrics = {k: v.get("value") for k, v in gpm["metrics"].items()}
    busy = [float(v) for k in ("sm_util", "any_tensor_util") if (v := metrics.get(k)) is not None]
    f.measured = ", ".join(
        f"{k} {v:.2f}" for k, v in metrics.items() if v is not None and k.endswith("util")
    )
    f.measured += f"; all percent metrics within 0..100: {gpm.get('in_range')}"
    if not gpm.get("in_range"):
        f.verdict = WRONG
    elif busy and max(busy) > 1.5:
        f.verdict = CONFIRMED
    elif busy and max(busy) <= 1.0:
        f.verdict = WRONG
        f.note = "under load the values stay within 0..1: a ratio, not percent"
    else:
        f.verdict = INCONCLUSIVE
        f.note = "too little activity under load to tell percent from ratio"


def retired_pages(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json", "nvidia-smi-q.txt"]
    gpu = ev.gpu("idle")
    if gpu is None:
        return
    answer = gpu.get("retired_pages_sbe")
    if error(answer) == "NotSupported":
        f.verdict, f.measured = CONFIRMED, "nvmlDeviceGetRetiredPages: NotSupported"
    elif error(answer):
        f.verdict, f.measured = INCONCLUSIVE, f"nvmlDeviceGetRetiredPages: {error(answer)}"
    else:
        f.verdict = WRONG
        f.measured = f"nvmlDeviceGetRetiredPages answers: {value(answer)}"


def violation_ns(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json", "readings-load.json", "nvidia-smi-q.txt"]
    gpu = ev.gpu("load") or ev.gpu("idle")
    if gpu is None:
        return
    power = value((gpu.get("violation") or {}).get(str(pynvml.NVML_PERF_POLICY_POWER)))
    if not isinstance(power, dict):
        f.measured = "nvmlDeviceGetViolationStatus(POWER) answered nothing"
        return
    ns = float(power["violationTime"])
    f.measured = f"violationTime(POWER) {ns:,.0f}"
    sections = ev.query_sections()
    shown = None
    if sections:
        shown = smi.number(smi.find(sections[0], "Counters/SW Power Capping", "SW Power Capping"))
    if shown is None:
        f.verdict = INCONCLUSIVE
        f.note = "no nvidia-smi -q power-capping counter (in us) to compare with"
        return
    f.measured += f"; nvidia-smi -q SW Power Capping {shown:,.0f} us"
    if ns == 0 and shown == 0:
        f.verdict = INCONCLUSIVE
        f.note = "the board never capped power: both are 0"
    elif abs(ratio_of(ns / 1000, shown) - 1) <= 0.1 or abs(ns / 1000 - shown) < 1000:
        f.verdict = CONFIRMED
    else:
        f.verdict = WRONG
        f.note = f"violationTime / nvidia-smi us = {ratio_of(ns, shown):.3g}"


def not_supported_set(ev: Evidence, f: Finding) -> None:
    f.raw = ["device-queries.jsonl", "device-queries-simulated.jsonl"]
    real = _unsupported(ev.device_queries())
    if not real and not ev.device_queries():
        f.measured = "no device queries ran"
        return
    simulated_name = "device-queries.jsonl" if ev.simulated else "device-queries-simulated.jsonl"
    simulated = _unsupported(ev.device_queries(simulated_name))
    f.measured = f"{len(real)} queries NotSupported on GPU 0"
    if not ev.device_queries(simulated_name):
        f.verdict = INCONCLUSIVE
        f.note = "no simulated profile of this board to compare with"
        return
    only_real, only_sim = sorted(real - simulated), sorted(simulated - real)
    f.verdict = CONFIRMED if not only_real and not only_sim else WRONG
    if only_real or only_sim:
        f.note = (
            f"NotSupported on the board only: {', '.join(only_real) or 'none'}; "
            f"in the simulator only: {', '.join(only_sim) or 'none'}"
        )


def _unsupported(rows: list[dict[str, Any]]) -> set[str]:
    return {
        str(row["fn"])
        for row in rows
        if row.get("gpu") == 0 and row.get("outcome") == "NVMLError_NotSupported"
    }


# --- the table -------------------------------------------------------------------------

TABLE: tuple[tuple[str, str, str, str, Judge], ...] = (
    (
        "pcie-throughput-unit",
        "nvmlDeviceGetPcieThroughput",
        "KiB/s (x 1024), as nvitop reads it; the simulator answers in the same unit",
        "agent/sources/nvml/units.py, reads.py",
        pcie_unit,
    ),
    (
        "nvlink-speed-unit",
        "NVLink speed field (NVML_FI_DEV_NVLINK_GET_SPEED)",
        "MB/s per direction (x 10^6)",
        "agent/sources/nvml/units.py, nvlink.py",
        nvlink_speed,
    ),
    (
        "nvlink-throughput-unit",
        "NVLink throughput fields 138/139",
        "cumulative KiB, per link as scopeId",
        "agent/sources/nvml/fields.py, nvlink.py",
        nvlink_throughput,
    ),
    (
        "memory-v2-used",
        "nvmlDeviceGetMemoryInfo_v2",
        "used excludes reserved memory (v1 includes it)",
        "agent/sources/nvml/reads.py",
        memory_v2,
    ),
    (
        "nvlink-errors-above-11",
        "NVLink error counters per link",
        "field ids exist for links 0-11 only; links 12-17 read by per-call "
        "nvmlDeviceGetNvLinkErrorCounter",
        "agent/sources/nvml/nvlink.py",
        nvlink_errors_high_links,
    ),
    (
        "memory-total",
        "memory total",
        "the profile's memory_bytes, as nvidia-smi shows it",
        "the simulator's profiles.py",
        memory_total,
    ),
    (
        "thresholds",
        "temperature thresholds (slowdown/shutdown/gpu_max/mem_max)",
        "the profile's values (H100/H200 ~ 89/92/87/95 C)",
        "the simulator's profiles.py",
        thresholds,
    ),
    (
        "max-clocks",
        "maximum SM and memory clocks",
        "the profile's values",
        "the simulator's profiles.py",
        max_clocks,
    ),
    (
        "power-limits",
        "default power limit and its range",
        "the profile's values",
        "the simulator's profiles.py",
        power_limits,
    ),
    (
        "link-count",
        "NVLink links per GPU",
        "the profile's link count",
        "the simulator's profiles.py",
        link_count,
    ),
    (
        "gpm-percent",
        "GPM metrics",
        "percent (0-100) from nvmlGpmMetricsGet",
        "agent/sources/nvml/gpm.py",
        gpm_percent,
    ),
    (
        "retired-pages-ampere",
        "Retired pages on Ampere+",
        "NotSupported (row remapping replaces them)",
        "simulator and source",
        retired_pages,
    ),
    (
        "violation-time-unit",
        "nvmlDeviceGetViolationStatus violationTime",
        "nanoseconds (exported as seconds / 1e9)",
        "agent/sources/nvml/reads.py",
        violation_ns,
    ),
    (
        "not-supported-set",
        "the NotSupported set of the board",
        "what the simulator's profile answers NotSupported",
        "the simulator's nvml/unsupported.py",
        not_supported_set,
    ),
)


def settle(ev: Evidence) -> list[Finding]:
    findings = []
    for ident, what, assumption, where, judge in TABLE:
        finding = Finding(ident, what, assumption, where)
        try:
            judge(ev, finding)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            finding.verdict = INCONCLUSIVE
            finding.note = f"could not read the raw files: {type(exc).__name__}: {exc}"
        if finding.verdict == NOT_MEASURED and not finding.measured:
            finding.measured = "nothing: the step that reads it did not run (see Steps)"
        findings.append(finding)
    return findings


VERDICTS = (CONFIRMED, WRONG, ONE_GPU, INCONCLUSIVE, NOT_MEASURED)
