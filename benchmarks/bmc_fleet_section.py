"""The BMC fleet benchmark's section of docs/performance.md, written from one run."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.bmc_fleet import FleetCost, ModeCost

BEGIN, END = "<!-- bmc-fleet:begin -->", "<!-- bmc-fleet:end -->"

_MODE_TEXT = {
    "spread": "each target at its own offset in the interval, as Prometheus spreads a job's "
    "targets",
    "burst": "every target at the interval's start",
}


def fleet_section(cost: FleetCost, command: str) -> str:
    s, p = cost.settings, cost.probing
    modes = "; ".join(f"**{m.mode}**: {_MODE_TEXT.get(m.mode, m.mode)}" for m in p.modes)
    how = (
        f"`{command}`, {cost.date}, on {cost.machine} with {cost.cores} cores and "
        f"{cost.memory_gib:.0f} GiB, a machine shared with other work (load average "
        f"{cost.load} at the start). {_bmcs(cost)} One agent, `nvwatch serve --sources host "
        f"--bmc-config FILE` (python-ipmi {cost.python_ipmi}, {cost.workers} read workers, "
        f"module timeout {s.module_timeout_s:g} s, probe cache {s.cache_s:g} s), probes them "
        "over IPMI 2.0 as a management host would."
    )
    rounds = (
        f"Each BMC is probed once first, not counted: its SDR is walked ({p.warmup_ok} of "
        f"{cost.started} read, the slowest in {p.warmup_wall_ms_max:.0f} ms, "
        f"{p.warmup_cpu_s:.2f} s of the agent's CPU in all). Then every BMC is probed once per "
        f"{s.interval_s:g} s interval at `/probe`, {_intervals(s.rounds)} per mode: {modes}; "
        f"at most {s.concurrency} connections at once. Late: no answer "
        f"within Prometheus's {s.scrape_timeout_s:g} s scrape timeout; failed: an answer "
        "without `nvwatch_bmc_up 1`. The agent's CPU is its process's user and system time "
        "over each whole interval (median of the intervals; the kernel counts it in 10 ms "
        f"ticks). Without probes the agent uses {_pct(p.idle_core_share)} of a core; a "
        "probe's CPU is an interval's less that, per probe, and the last column is the idle "
        f"share plus the probe CPU of {_reference(cost)} every 30 s."
    )
    rows = "\n".join(_row(mode, cost) for mode in p.modes)
    return "\n".join(
        [
            BEGIN,
            "## A management host probing BMCs",
            "",
            _wrap(how),
            "",
            _wrap(rounds),
            "",
            "| mode | probes (ok / late / failed) | probe wall p50 / p99 / max "
            "| agent CPU per interval | CPU per probe | agent RSS | one core at 124 BMCs / 30 s |",
            "|---|---|---|---|---|---|---|",
            rows,
            "",
            _wrap(_after(cost)),
            END,
            "",
        ]
    )


def _intervals(count: int) -> str:
    return "one interval" if count == 1 else f"{count} intervals"


def _wrap(paragraph: str) -> str:
    return textwrap.fill(paragraph, width=88, break_long_words=False, break_on_hyphens=False)


def _bmcs(cost: FleetCost) -> str:
    dcmi = "with DCMI power from the tests' plug-in" if cost.dcmi else "without DCMI power"
    each = cost.bmcs_rss_mib / max(cost.started, 1)
    text = (
        f"{cost.started} of {cost.settings.bmcs} real BMCs started (OpenIPMI `ipmi_sim` on "
        f"loopback, each the tests' BMC of {cost.sensors} sensors, {dcmi}), "
        f"{cost.settings.start_parallel} "
        f"at a time, in {cost.start_s:.1f} s; together {cost.bmcs_rss_mib:.0f} MiB RSS "
        f"({each:.1f} MiB each)."
    )
    if cost.start_failures:
        text += f" Those that did not start: {'; '.join(cost.start_failures)}."
    return text


def _reference(cost: FleetCost) -> str:
    return "124 BMCs" if cost.reference_label == "measured" else "124 BMCs, scaled linearly,"


def _row(mode: ModeCost, cost: FleetCost) -> str:
    label = cost.reference_label
    share = f"**{_pct(mode.core_share)}** (worst interval {_pct(mode.core_share_max)}; {label})"
    return (
        f"| {mode.mode} | {mode.probes} ({mode.ok} / {mode.late} / {mode.failed}) "
        f"| {mode.wall_ms_p50:.1f} / {mode.wall_ms_p99:.1f} / {mode.wall_ms_max:.1f} ms "
        f"| {mode.agent_cpu_s:.2f} s (max {mode.agent_cpu_s_max:.2f} s) "
        f"| {mode.cpu_ms_per_probe:.1f} ms "
        f"| {mode.agent_rss_mib:.1f} MiB | {share} |"
    )


def _after(cost: FleetCost) -> str:
    p = cost.probing
    text = (
        f"The agent's RSS was {p.agent_rss_warm_mib:.1f} MiB after the warm-up and peaked at "
        f"{p.agent_rss_peak_mib:.1f} MiB. An interval's last answer came "
        + ", ".join(f"{m.last_answer_s:.1f} s ({m.mode})" for m in p.modes)
        + " after its start at most. The BMCs themselves, on the same cores, used "
        + ", ".join(f"{m.bmcs_cpu_s:.2f} s ({m.mode})" for m in p.modes)
        + " of CPU per interval together."
    )
    reasons = sorted({r for m in p.modes for r in m.reasons})
    if reasons:
        text += f" Late or failed probes said: {'; '.join(reasons)}."
    if cost.reference_label != "measured":
        text += (
            f" The last column is **extrapolated**: this run had {cost.started} BMCs every "
            f"{cost.settings.interval_s:g} s, and the probes' CPU is scaled linearly to 124 "
            "BMCs every 30 s."
        )
    return text


def _pct(share: float) -> str:
    return f"{share * 100:.1f} %"
