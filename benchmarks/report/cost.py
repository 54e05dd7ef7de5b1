"""Sections on what a poll costs: CPU per stage, where the time goes, series per node."""

from __future__ import annotations

from benchmarks.poll_cost import ProfileSplit, RenderSplit
from benchmarks.report.model import (
    TARGET_PROFILE,
    Results,
    ms,
    pct,
    q,
    target_cost,
    target_series,
)
from nvwatch.agent.exposition.render import GZIP_LEVEL

STAGES = (
    "collect nvml",
    "collect infiniband",
    "collect host",
    "prepare nvml",
    "prepare infiniband",
    "prepare host",
    "build_exposition",
)

_POLL_INTRO = [
    "## Poll cycle CPU",
    "",
    "CPU seconds per poll, `median / p99` in ms. *poll CPU* is process CPU time",
    "(`time.process_time`, every thread) around `Poller.poll_once`; the stages are the",
    "CPU time (`time.thread_time`) of each step on the thread that runs it: a source's",
    "`collect()` on its worker, `prepare` (the source's sample rendered into metric",
    "families), `build_exposition` (text format + gzip, once per poll). The simulated",
    "node is advanced one 5 s interval between polls, outside every timer, so counters",
    "move. *poll wall* is the wall time of `poll_once` (sources run in parallel",
    "threads, so it includes waiting for the GIL and for file reads).",
    "",
]


def poll_section(results: Results) -> str:
    if not results.poll_costs:
        return ""
    head = "| profile | polls | poll CPU | " + " | ".join(STAGES) + " | poll wall (median) |"
    lines = [*_POLL_INTRO, head, "|" + "---|" * (len(STAGES) + 4)]
    for cost in results.poll_costs:
        cells = [q(cost.stages[s]) if s in cost.stages else "-" for s in STAGES]
        lines.append(
            f"| {cost.profile} | {cost.polls} | **{q(cost.total)}** | "
            + " | ".join(cells)
            + f" | {ms(cost.wall_median)} |"
        )
    lines.append("")
    return "\n".join(lines)


def simulator_share(split: ProfileSplit) -> float:
    """The share of NVML collect time spent in the simulator rather than agent or pynvml."""
    return split.shares.get("simulator (sim)", 0.0)


def nvml_share_section(results: Results) -> str:
    nvml = results.nvml_split
    if nvml is None:
        return ""
    lines = [
        "## How much of the NVML cost is the simulator",
        "",
        f"cProfile of `NvmlSource.collect()` on {nvml.what.split()[0]} ({nvml.polls} "
        "polls, on one thread), own time (tottime) split by where the code lives. "
        "cProfile adds a cost per call, so read these as shares, not times.",
        "",
        "| code | share of NVML collect |",
        "|---|---|",
        *[f"| {k} | {pct(v)} |" for k, v in nvml.shares.items()],
        "",
    ]
    cost = target_cost(results)
    if cost is not None and "collect nvml" in cost.stages:
        collect = cost.stages["collect nvml"].median
        sim = simulator_share(nvml)
        lines += [
            f"So of the {ms(collect)} median NVML collect, about {ms(collect * sim)} is "
            f"the simulator answering calls and about {ms(collect * (1 - sim))} is the "
            "agent and pynvml. **Real-GPU NVML cost differs**: the real library's "
            "calls are ioctls into the driver (microseconds to milliseconds each, "
            "depending on the call and the GPU's state), which this run cannot measure.",
            "",
        ]
    return "\n".join(lines)


def poll_top_section(results: Results) -> str:
    poll = results.poll_split
    if poll is None:
        return ""
    lines = [
        f"## Top costs of a whole {TARGET_PROFILE} poll",
        "",
        f"cProfile of collect + prepare + build_exposition on one thread "
        f"({poll.polls} polls); own time per poll.",
        "",
        "| code | share |",
        "|---|---|",
        *[f"| {k} | {pct(v)} |" for k, v in poll.shares.items()],
        "",
        "| function | own time per poll |",
        "|---|---|",
        *[f"| `{name}` | {ms(t)} |" for name, t in poll.top],
        "",
    ]
    return "\n".join(lines)


def render_split_section(results: Results) -> str:
    split = results.render_split
    if split is None:
        return ""
    per_sample = split.generate_latest.median / max(1, split.samples)
    lines = [
        "### build_exposition, split",
        "",
        f"{split.samples:,} samples, {split.text_bytes:,} bytes of text, "
        f"{split.gzip_bytes:,} bytes gzipped (level {GZIP_LEVEL}).",
        "",
        "| step | median / p99 (ms) |",
        "|---|---|",
        _renderer_row(split),
        f"| `gzip.compress(level={GZIP_LEVEL})` | {q(split.gzip)} |",
        f"| for reference: prometheus_client `generate_latest` over the same families "
        f"| {q(split.generate_latest)} ({per_sample * 1e6:.1f} µs per sample) |",
        "",
    ]
    return "\n".join(lines)


def _renderer_row(split: RenderSplit) -> str:
    if split.renderer is None:
        # only timed when it reproduces generate_latest byte for byte
        return "| agent text renderer | not timed: its bytes differed from generate_latest |"
    return (
        f"| agent text renderer (`agent/exposition/text.py`, cached series prefixes), "
        f"bytes identical to `generate_latest` | {q(split.renderer)} |"
    )


def series_section(results: Results) -> str:
    if not results.series:
        return ""
    lines = [
        "## Series per node",
        "",
        "Samples in one exposition (every non-comment line) after two polls, all sources;",
        "per source as `full NVLink detail / --nvlink-detail=gpu`.",
        "",
        "| profile | full NVLink detail | `--nvlink-detail=gpu` | nvml | infiniband | host |",
        "|---|---|---|---|---|---|",
    ]
    for c in results.series:
        cells = " | ".join(
            f"{c.by_source_link.get(s, 0):,} / {c.by_source_gpu.get(s, 0):,}"
            for s in ("nvml", "infiniband", "host")
        )
        lines.append(f"| {c.profile} | {c.link_detail:,} | {c.gpu_detail:,} | {cells} |")
    target = target_series(results)
    if target is not None:
        lines += [
            "",
            f"Largest families of {TARGET_PROFILE} with `--nvlink-detail=gpu`:",
            "",
            "| family | series |",
            "|---|---|",
            *[f"| `{name}` | {n:,} |" for name, n in list(target.families_gpu.items())[:12]],
        ]
    lines.append("")
    return "\n".join(lines)
