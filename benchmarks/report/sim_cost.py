"""The whole-process figures, simulator included: `serve --simulate` CPU per second, and
the simulated fleet's CPU share of one core, each judged against its target."""

from __future__ import annotations

from benchmarks.report.model import Results, Verdict

SERVE_CPU_TARGET_MS_PER_S = 60.0
FLEET_CPU_TARGET_PCT = 25.0
# the fleet the target is about: the seed's cluster
FLEET_TARGET_NODES = 124
FLEET_TARGET_PROFILE = "dgx1-v100"
FLEET_TARGET_INTERVAL_S = 15.0


def sim_cost_verdicts(results: Results) -> list[Verdict]:
    out: list[Verdict] = []
    serve = results.serve_cpu
    if serve is not None:
        out.append(
            Verdict(
                f"`serve --simulate {serve.profile} --interval {serve.interval:g}s` process "
                f"CPU <= {SERVE_CPU_TARGET_MS_PER_S:g} ms per second",
                f"{serve.cpu_ms_per_s:.1f} ms/s over {serve.seconds:.0f} s",
                serve.cpu_ms_per_s <= SERVE_CPU_TARGET_MS_PER_S,
            )
        )
    fleet = results.fleet_cpu
    if fleet is not None:
        out.append(
            Verdict(
                f"simulated fleet of {FLEET_TARGET_NODES} {FLEET_TARGET_PROFILE} at "
                f"{FLEET_TARGET_INTERVAL_S:g} s: process CPU <= {FLEET_CPU_TARGET_PCT:g} % "
                "of one core",
                f"{fleet.share_pct:.1f} % (median of {fleet.periods} periods, worst "
                f"{fleet.worst_pct:.1f} %; {fleet.nodes} {fleet.profile} at {fleet.interval:g} s)",
                fleet.share_pct <= FLEET_CPU_TARGET_PCT
                and (fleet.nodes, fleet.profile, fleet.interval)
                == (FLEET_TARGET_NODES, FLEET_TARGET_PROFILE, FLEET_TARGET_INTERVAL_S),
            )
        )
    return out


def sim_cost_section(results: Results) -> str:
    serve, fleet = results.serve_cpu, results.fleet_cpu
    if serve is None and fleet is None:
        return ""
    lines = [
        "## Whole process, simulator included",
        "",
        "Measured from outside the process (its user + system CPU time), so the simulated",
        "NVML, the simulated sysfs tree and every agent thread count. The simulator reads",
        "NVML time on a grid of one poll step and rewrites its tree once per poll interval,",
        "only for the infiniband source.",
        "",
    ]
    if serve is not None:
        lines.append(
            f"- `nvwatch serve --simulate {serve.profile} --interval {serve.interval:g}s` "
            f"(default sources): **{serve.cpu_ms_per_s:.1f} ms of CPU per second** over "
            f"{serve.seconds:.0f} s."
        )
    if fleet is not None:
        lines.append(
            f"- `nvwatch simulate fleet` of {fleet.nodes} {fleet.profile} nodes at "
            f"{fleet.interval:g} s (`--stats-every`): **{fleet.share_pct:.1f} % of one core** "
            f"(median of {fleet.periods} periods after the first, worst {fleet.worst_pct:.1f} %), "
            f"RSS {fleet.rss_mb:.0f} MB, {fleet.polls:,} polls."
        )
    lines.append("")
    return "\n".join(lines)
