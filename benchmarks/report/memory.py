"""The resident-memory section: RSS over many polls, and whether it stayed flat."""

from __future__ import annotations

from benchmarks.report.model import MB, Results
from benchmarks.rss import (
    FLAT_TOLERANCE_MIB,
    GROW_KIB,
    GROW_RATIO,
    MIB,
    SECOND_HALF_SHARE,
    SIMULATOR_PREFIX,
    RssResult,
    SiteGrowth,
    TraceResult,
)


def rss_section(results: Results) -> str:
    rss = results.rss
    if rss is None:
        return ""
    points = ", ".join(f"{n:,}: {m * MIB / MB:.1f}" for n, m in rss.checkpoints)
    trend = "flat" if rss.flat else "GROWING"
    lines = [
        "## Resident memory",
        "",
        f"A separate process (`python -m benchmarks.rss`) runs the agent (all sources) on a "
        f"simulated {rss.profile} node in a tight loop, no sleeps: simulated time advances "
        "5 s per poll, the fabric files are rewritten every 10 polls. The RSS includes the "
        "simulator's own state (which a real node does not carry).",
        "",
        f"| after warm-up | after {rss.polls:,} polls | growth since warm-up | growth over "
        "the second half | peak | time | trend |",
        "|---|---|---|---|---|---|---|",
        f"| {rss.warm_mib * MIB / MB:.1f} MB | {rss.final_mib * MIB / MB:.1f} MB | "
        f"{rss.growth_mib * MIB / MB:+.2f} MB | {rss.second_half_growth_mib * MIB / MB:+.2f} "
        f"MB | {rss.peak_mib * MIB / MB:.1f} MB | {rss.seconds:.0f} s | {trend} (second "
        f"half within {FLAT_TOLERANCE_MIB:g} MiB) |",
        "",
        f"RSS (MB) by polls done: {points}.",
        *_caveats(rss),
        "",
        *(_trace_lines(rss.trace) if rss.trace is not None else []),
    ]
    return "\n".join(lines)


def _trace_lines(trace: TraceResult) -> list[str]:
    """The tracemalloc comparison: the verdict, then the largest site changes."""
    verdict = (
        "**no site growing**"
        if trace.flat
        else "**GROWING**: " + ", ".join(f"`{s.site}`" for s in trace.agent_growing)
    )
    lines = [
        f"### Allocation sites, poll {trace.first_poll:,} vs poll {trace.last_poll:,}",
        "",
        "A second process runs the same loop under tracemalloc and compares what each "
        f"allocation site (file:line) holds live at poll {trace.first_poll:,} and at poll "
        f"{trace.last_poll:,}. Growing: more than {GROW_KIB:g} KiB more and more than "
        f"{GROW_RATIO:.0%} more than at the first snapshot (a leak of one small object per "
        "poll passes both many times over), and at least "
        f"{SECOND_HALF_SHARE:.0%} of that growth after a middle snapshot (a steady leak "
        "puts about half there, a one-time step such as a hash table doubling none). "
        "Sites under "
        f"`{SIMULATOR_PREFIX}` are the simulator's and are listed, not judged.",
        "",
        f"Verdict, agent and libraries: {verdict}. Traced memory "
        f"{trace.first_kib:,.0f} KiB -> {trace.last_kib:,.0f} KiB ({trace.seconds:.0f} s).",
        "",
        f"| site | poll {trace.first_poll:,} | middle | poll {trace.last_poll:,} | change "
        "| objects | growing |",
        "|---|---|---|---|---|---|---|",
        *(_site_row(site) for site in _shown(trace)),
    ]
    if trace.simulator_growing:
        lines += ["", _simulator_note(trace)]
    if trace.last_poll < trace.target_polls:
        lines += [
            "",
            f"The time cap stopped the traced loop at {trace.last_poll:,} of "
            f"{trace.target_polls:,} polls (tracing slows every allocation); "
            "`--rss-seconds` longer runs the whole count.",
        ]
    return [*lines, ""]


def _shown(trace: TraceResult) -> list[SiteGrowth]:
    # the largest changes, and every growing site even when it is not among them
    shown = list(trace.top)
    shown += [site for site in trace.growing if site not in shown]
    return shown


def _kib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} KiB"


def _site_row(site: SiteGrowth) -> str:
    growing = (
        "yes (simulator)" if site.growing and site.simulator else "yes" if site.growing else "no"
    )
    return (
        f"| `{site.site}` | {site.first_kib:,.1f} KiB | {_kib(site.mid_kib)} | "
        f"{site.last_kib:,.1f} KiB | "
        f"{site.diff_kib:+,.1f} KiB | {site.count_diff:+,} | {growing} |"
    )


def _simulator_note(trace: TraceResult) -> str:
    grown = sum(site.diff_kib for site in trace.simulator_growing)
    sites = ", ".join(f"`{site.site}`" for site in trace.simulator_growing)
    return (
        f"The simulator's growing sites ({sites}) grew {grown:,.0f} KiB in all: the "
        "simulated node's own state (e.g. sim/gpu/model.py's lru_cache of workload "
        "means, bounded at 4,096 entries, fills over the first few thousand polls); a real "
        "node has no simulator in the agent's process."
    )


def _caveats(rss: RssResult) -> list[str]:
    out: list[str] = []
    # growth inside the tolerance but past half of it is too close to call from one run
    if rss.flat and rss.second_half_growth_mib > FLAT_TOLERANCE_MIB / 2 and rss.trace:
        # the traced run below is the finer test: say which way it went
        settled = "finds no site growing" if rss.trace.flat else "finds sites growing"
        out.append(
            f"The second half grew {rss.second_half_growth_mib * MIB / MB:.2f} MB, more "
            "than half the tolerance: RSS alone cannot tell allocator arenas settling in "
            f"steps from a slow leak; the allocation-site comparison below {settled}."
        )
    elif rss.flat and rss.second_half_growth_mib > FLAT_TOLERANCE_MIB / 2:
        out.append(
            f"**Borderline**: the second half grew "
            f"{rss.second_half_growth_mib * MIB / MB:.2f} MB, more than half the tolerance. "
            "Growth that comes in steps and then holds is typical of allocator arenas, "
            "but a slow leak of a few hundred bytes per poll would look the same over this "
            "many polls: run longer (`--rss-polls 50000 --rss-seconds 3600`) or diff "
            "tracemalloc snapshots between checkpoints before calling it flat."
        )
    if rss.polls < rss.target_polls:
        out.append(
            f"The time cap stopped the loop at {rss.polls:,} of {rss.target_polls:,} "
            "polls; `--rss-polls 10000 --rss-seconds 1200` runs the whole count."
        )
    return out
