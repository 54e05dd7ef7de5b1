"""Each target judged against its figure from one run; a miss is printed as MISS."""

from __future__ import annotations

from benchmarks.report.attribution import attribution_verdicts
from benchmarks.report.hot_path import hot_path_verdicts
from benchmarks.report.model import (
    MB,
    P99_ONE_CONNECTION_TARGET_S,
    POLL_CPU_TARGET_S,
    RSS_TARGET_MB,
    SERIES_GPU_TARGET,
    SERIES_LINK_TARGET,
    TARGET_PROFILE,
    Results,
    Verdict,
    find_run,
    ms,
    target_cost,
    target_series,
)
from benchmarks.report.nvml_calls import nvml_calls_verdicts
from benchmarks.report.peer import peer_verdicts
from benchmarks.report.sim_cost import sim_cost_verdicts
from benchmarks.rss import FLAT_TOLERANCE_MIB, MIB, TraceResult


def verdicts(results: Results) -> list[Verdict]:
    """Every target that this run measured, in the order the Targets table lists them."""
    return [
        *_poll_verdicts(results),
        *hot_path_verdicts(results),
        *_latency_verdicts(results),
        *_node_exporter_verdicts(results),
        *_rss_verdicts(results),
        *_series_verdicts(results),
        *nvml_calls_verdicts(results),
        *sim_cost_verdicts(results),
        *peer_verdicts(results),
        *attribution_verdicts(results),
    ]


def _poll_verdicts(results: Results) -> list[Verdict]:
    cost = target_cost(results)
    if cost is None:
        return []
    return [
        Verdict(
            f"{TARGET_PROFILE} simulated poll CPU (median) <= {ms(POLL_CPU_TARGET_S)}",
            f"{ms(cost.total.median)} (p99 {ms(cost.total.p99)})",
            cost.total.median <= POLL_CPU_TARGET_S,
        )
    ]


def _latency_verdicts(results: Results) -> list[Verdict]:
    if results.scrape is None:
        return []
    return [
        Verdict(
            f"/metrics p99 at 1 connection ({'gzip' if run.gzip else 'plain'}) <= "
            f"{ms(P99_ONE_CONNECTION_TARGET_S)}",
            ms(run.p99_seconds),
            run.p99_seconds <= P99_ONE_CONNECTION_TARGET_S,
        )
        for run in results.scrape.runs
        if run.connections == 1
    ]


def _node_exporter_verdicts(results: Results) -> list[Verdict]:
    """Plain-text runs above one connection, each against node_exporter's at that count."""
    if results.scrape is None or results.side_by_side is None:
        return []
    reference_runs = results.side_by_side.node_exporter.runs
    out: list[Verdict] = []
    for run in results.scrape.runs:
        if run.connections == 1 or run.gzip:
            continue
        reference = find_run(reference_runs, run.connections, False)
        if reference is None:
            continue
        out.append(
            Verdict(
                f"/metrics p99 at {run.connections} connections <= node_exporter "
                "infiniband-only p99",
                f"{ms(run.p99_seconds)} vs {ms(reference.p99_seconds)}",
                run.p99_seconds <= reference.p99_seconds,
            )
        )
    return out


def _rss_verdicts(results: Results) -> list[Verdict]:
    rss = results.rss
    if rss is None:
        return []
    final_mb = rss.final_mib * MIB / MB
    complete = rss.polls >= rss.target_polls
    note = "" if complete else f" (only {rss.polls:,} of {rss.target_polls:,} polls)"
    return [
        Verdict(
            f"RSS <= {RSS_TARGET_MB:g} MB",
            f"{final_mb:.1f} MB after {rss.polls:,} polls",
            final_mb <= RSS_TARGET_MB,
        ),
        Verdict(
            f"RSS flat over {rss.target_polls:,} polls (second half grows <= "
            f"{FLAT_TOLERANCE_MIB:g} MiB)",
            f"{rss.second_half_growth_mib * MIB / MB:+.2f} MB over the second half, "
            f"{rss.growth_mib * MIB / MB:+.2f} MB since warm-up{note}",
            # a run cut short by its time cap has not shown flatness over the full count
            rss.flat and complete,
        ),
        *_trace_verdicts(rss.trace),
    ]


def _trace_verdicts(trace: TraceResult | None) -> list[Verdict]:
    """tracemalloc, site by site: flatness proven rather than read off an RSS curve."""
    if trace is None:
        return []
    grown = ", ".join(f"{s.site} {s.diff_kib:+.0f} KiB" for s in trace.agent_growing[:3])
    return [
        Verdict(
            f"no allocation site grows from poll {trace.first_poll:,} to {trace.last_poll:,} "
            "(tracemalloc)",
            grown or f"none of the agent's sites grew (of {trace.target_polls:,} polls)",
            trace.flat and trace.last_poll >= trace.target_polls,
        )
    ]


def _series_verdicts(results: Results) -> list[Verdict]:
    count = target_series(results)
    if count is None:
        return []
    return [
        Verdict(
            f"{TARGET_PROFILE} series, full NVLink detail <= {SERIES_LINK_TARGET:,}",
            f"{count.link_detail:,}",
            count.link_detail <= SERIES_LINK_TARGET,
        ),
        Verdict(
            f"{TARGET_PROFILE} series, --nvlink-detail=gpu <= {SERIES_GPU_TARGET:,}",
            f"{count.gpu_detail:,}",
            count.gpu_detail <= SERIES_GPU_TARGET,
        ),
    ]
