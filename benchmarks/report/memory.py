"""The resident-memory section: RSS over many polls, and whether it stayed flat."""

from __future__ import annotations

from benchmarks.report.model import MB, Results
from benchmarks.rss import FLAT_TOLERANCE_MIB, MIB, RssResult


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
    ]
    return "\n".join(lines)


def _caveats(rss: RssResult) -> list[str]:
    out: list[str] = []
    # growth inside the tolerance but past half of it is too close to call from one run
    if rss.flat and rss.second_half_growth_mib > FLAT_TOLERANCE_MIB / 2:
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
