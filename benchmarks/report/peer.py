"""nvitop-exporter side by side: process CPU per exported sample at a 1 s interval, and its
target (nvwatch's, like for like, at most nvitop-exporter's)."""

from __future__ import annotations

from benchmarks.peer_cost import PEER, REQUIREMENT, ExporterCost
from benchmarks.report.model import TARGET_PROFILE, Results, Verdict

PEER_TARGET_INTERVAL_S = 1.0


def _per_sample(cost: ExporterCost) -> str:
    return (
        f"{cost.us_per_s_per_sample:.1f} µs/s per sample ({cost.cpu_ms_per_s:.1f} ms/s, "
        f"{cost.samples:,} samples)"
    )


def peer_verdicts(results: Results) -> list[Verdict]:
    peer = results.peer
    if peer is None:
        return []
    target = (
        f"nvwatch process CPU per exported sample at {PEER_TARGET_INTERVAL_S:g} s <= "
        f"{PEER}'s (simulated {TARGET_PROFILE})"
    )
    if peer.peer is None or not peer.nvwatch:
        why = peer.unavailable or "nvwatch was not measured"
        return [Verdict(target, f"not measured: {why}", False)]
    like, *others = peer.nvwatch
    figure = f"{like.name}: {_per_sample(like)} vs {peer.peer.name}: {_per_sample(peer.peer)}"
    figure += "".join(f"; {o.name}: {o.us_per_s_per_sample:.1f} µs/s per sample" for o in others)
    on_target = (peer.profile, peer.interval) == (TARGET_PROFILE, PEER_TARGET_INTERVAL_S)
    return [
        Verdict(
            target,
            figure,
            on_target and like.us_per_s_per_sample <= peer.peer.us_per_s_per_sample,
        )
    ]


def peer_section(results: Results) -> str:
    peer = results.peer
    if peer is None:
        return ""
    lines = [
        f"## Side by side: {PEER}",
        "",
        f"{PEER} (a pynvml-based exporter, built on nvitop) runs unchanged under "
        f"`nvwatch simulate exec --profile {peer.profile}`, which answers its pynvml with "
        f"the simulated NVML in its own process; nvwatch runs as `nvwatch serve --simulate "
        f"{peer.profile}`. So both pay for the simulator. One at a time, each polls at "
        f"{peer.interval:g} s and is scraped once a second with gzip accepted, as "
        "Prometheus would, while the CPU time (user + system) of its process tree is "
        "measured after a warm-up. *samples* are the non-comment lines of its last "
        "scrape. The two export different series (nvitop-exporter, for one, NVLink "
        "throughput per link, per-process and host metrics), so the cost is also given "
        "per sample.",
        "",
    ]
    if peer.peer is None:
        lines += [f"**{PEER} was not measured**: {peer.unavailable}", ""]
    lines += [
        "| exporter | CPU per second | samples | CPU per second per sample | over |",
        "|---|---|---|---|---|",
    ]
    for cost in [c for c in (peer.peer, *peer.nvwatch) if c is not None]:
        lines.append(
            f"| {cost.name} | {cost.cpu_ms_per_s:.1f} ms | {cost.samples:,} | "
            f"**{cost.us_per_s_per_sample:.1f} µs** | {cost.seconds:.0f} s, "
            f"{cost.scrapes} scrapes |"
        )
    lines.append("")
    return "\n".join(lines)


def peer_miss(results: Results, missed: dict[str, Verdict]) -> str | None:
    """The misses-section line: why the peer was not measured, or the two figures."""
    peer = results.peer
    row = next((v for t, v in missed.items() if t.startswith("nvwatch process CPU per")), None)
    if peer is None or row is None:
        return None
    if peer.peer is None:
        return (
            f"- **{PEER}**: {row.figure}. Install it (`pip install '{REQUIREMENT}'`) "
            "or let the run reach PyPI, and run again."
        )
    return (
        f"- **{PEER}**: {row.figure}. See the side-by-side table: nvwatch's cost per "
        "sample is its whole poll (the Poll cycle CPU table) spread over its samples."
    )
