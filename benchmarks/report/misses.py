"""The closing section: for each missed target, what the run shows about why, and a fix."""

from __future__ import annotations

from benchmarks.poll_cost import PollCost
from benchmarks.report.cost import simulator_share
from benchmarks.report.hot_path import hot_path_miss
from benchmarks.report.model import (
    TARGET_PROFILE,
    Results,
    Verdict,
    ms,
    pct,
    target_cost,
    target_series,
)
from benchmarks.report.nvml_calls import nvml_calls_miss
from benchmarks.report.peer import peer_miss
from benchmarks.report.verdicts import verdicts

_RENDER_FIX = (
    "The exposition already renders from cached series prefixes "
    "(agent/exposition/text.py) and formats only values; see the top functions (table "
    "above) for what is left. On the source side, the simulator's share is not agent "
    "cost, and pynvml's struct access is the next item."
)

# agent/server/ already has TCP_NODELAY, one buffered write and a real listen backlog,
# so what is left to explain is the GIL
_LATENCY_CAUSE = (
    ". The server already writes headers and body in one buffered write with "
    "TCP_NODELAY and listens with a backlog far above socketserver's default of 5 "
    "(the listen-overflow column shows whether any connection "
    "met a full queue). What remains is the GIL: the poll (see Poll cycle CPU), the "
    "render and, here, the simulator run in the same process as the handler threads, "
    "so a scrape that arrives during a poll waits for it, and at 64 connections 64 "
    "handler threads take turns on one interpreter while node_exporter's Go server "
    "runs them on every core. A cheaper render (above) shortens the poll's hold on "
    "the GIL; serving /metrics from a process or C-level server that only copies the "
    "cached bytes would take the handlers off the GIL entirely."
)

_RSS_CAUSE = (
    ". See the RSS table: if the loop was cut short by its time cap, run the "
    "full count; a climb that continues across the later checkpoints is a leak to "
    "chase with tracemalloc snapshots diffed between checkpoints."
)

_SERIES_FIX = (
    " The saturation flags already have a series only while a counter is pinned and "
    "the mlx5 hw_counters outside the loss/congestion set are opt-in; the family "
    "table shows which families are left to weigh."
)


def misses_section(results: Results) -> str:
    missed = {v.target: v for v in verdicts(results) if not v.passed}
    lines = ["## Misses: why, and what would fix them", ""]
    if not missed:
        lines += ["Every target was met in this run.", ""]
        return "\n".join(lines)
    explained = [
        _poll_miss(results, missed),
        hot_path_miss(results, missed),
        _latency_miss(missed),
        _rss_miss(missed),
        _series_miss(results, missed),
        nvml_calls_miss(missed),
        peer_miss(results, missed),
    ]
    lines += [line for line in explained if line is not None]
    lines.append("")
    return "\n".join(lines)


def _figures(missed: dict[str, Verdict], targets: list[str]) -> str:
    return "; ".join(f"{t}: {missed[t].figure}" for t in targets)


def _poll_miss(results: Results, missed: dict[str, Verdict]) -> str | None:
    cost = target_cost(results)
    if cost is None or not any(t.startswith(f"{TARGET_PROFILE} simulated poll") for t in missed):
        return None
    parts = [
        f"- **Poll CPU** ({ms(cost.total.median)} median for {TARGET_PROFILE}):",
        *_poll_breakdown(results, cost),
        _RENDER_FIX,
    ]
    return " ".join(parts)


def _poll_breakdown(results: Results, cost: PollCost) -> list[str]:
    """Where the missed poll's time went, stage by stage, from figures this run measured."""
    build = cost.stages.get("build_exposition")
    nvml = cost.stages.get("collect nvml")
    prep = cost.stages.get("prepare nvml")
    split = results.render_split
    parts: list[str] = []
    if build is not None:
        parts.append(
            f"`build_exposition` is {ms(build.median)} ({pct(build.median / cost.total.median)})"
        )
        if split is not None:
            text = split.renderer or split.generate_latest
            parts.append(
                f"of which the text is {ms(text.median)} for {split.samples:,} samples "
                f"and gzip {ms(split.gzip.median)};"
            )
    if nvml is not None and results.nvml_split is not None:
        sim = simulator_share(results.nvml_split)
        parts.append(
            f"the NVML collect is {ms(nvml.median)}, about {pct(sim)} of it the simulator;"
        )
    if prep is not None:
        parts.append(f"rendering the NVML sample into families is {ms(prep.median)}.")
    if split is not None and split.renderer is not None:
        parts.append(
            f"prometheus_client's `generate_latest` would take "
            f"{ms(split.generate_latest.median)} for the same bytes."
        )
    return parts


def _latency_miss(missed: dict[str, Verdict]) -> str | None:
    targets = [t for t in missed if t.startswith("/metrics")]
    if not targets:
        return None
    return "- **Scrape latency**: " + _figures(missed, targets) + _LATENCY_CAUSE


def _rss_miss(missed: dict[str, Verdict]) -> str | None:
    targets = [t for t in missed if t.startswith("RSS")]
    if not targets:
        return None
    return "- **Memory**: " + _figures(missed, targets) + _RSS_CAUSE


def _series_miss(results: Results, missed: dict[str, Verdict]) -> str | None:
    # the series-count rows (not "samples to series", a CPU target)
    targets = [t for t in missed if t.startswith(f"{TARGET_PROFILE} series")]
    if not targets:
        return None
    detail = target_series(results)
    extra = ""
    if detail is not None:
        ib = detail.by_source_gpu.get("infiniband", 0)
        top = list(detail.families_gpu.items())[:4]
        extra = (
            f" With `--nvlink-detail=gpu` the node has {detail.gpu_detail:,} series, "
            f"{ib:,} of them InfiniBand; the largest families are "
            + ", ".join(f"`{name}` ({n:,})" for name, n in top)
            + "."
        )
    return "- **Series**: " + _figures(missed, targets) + "." + extra + _SERIES_FIX
