"""Turn one run's measurements into the markdown of docs/performance.md.

Every number printed here is read from `Results`; the prose around them only explains.
Targets are judged here, and a miss is printed as MISS beside its figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import SERVER_BACKLOG
from benchmarks.poll_cost import PollCost, ProfileSplit, Quantiles, RenderSplit, SeriesCount
from benchmarks.real_nvml import RealNvmlResult, Timing
from benchmarks.rss import FLAT_TOLERANCE_MIB, MIB, RssResult
from benchmarks.scrape import ScrapeResult, SideBySide
from benchmarks.wrk import WrkResult

# The targets from the issue; each figure is judged against one of these.
POLL_CPU_TARGET_S = 0.005
P99_ONE_CONNECTION_TARGET_S = 0.002
RSS_TARGET_MB = 60.0
SERIES_LINK_TARGET = 2500
SERIES_GPU_TARGET = 800
TARGET_PROFILE = "dgx-h100"
MB = 1_000_000
EXPERIMENT = "server fixes (experiment)"


@dataclass(frozen=True)
class Machine:
    date: str
    cpu: str
    cores: int
    kernel: str
    python: str
    packages: dict[str, str]
    tools: dict[str, str]
    command: str


@dataclass
class Results:
    settings: dict[str, Any]
    poll_costs: list[PollCost] = field(default_factory=list)
    nvml_split: ProfileSplit | None = None
    poll_split: ProfileSplit | None = None
    render_split: RenderSplit | None = None
    series: list[SeriesCount] = field(default_factory=list)
    rss: RssResult | None = None
    scrape: ScrapeResult | None = None
    scrape_nodelay: ScrapeResult | None = None
    side_by_side: SideBySide | None = None
    real_nvml: RealNvmlResult | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Verdict:
    target: str
    figure: str
    passed: bool

    @property
    def mark(self) -> str:
        return "PASS" if self.passed else "**MISS**"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 10 else f"{seconds:.1f} s"


def q(quantiles: Quantiles) -> str:
    return f"{quantiles.median * 1e3:.2f} / {quantiles.p99 * 1e3:.2f}"


def pct(share: float) -> str:
    return f"{share * 100:.0f} %"


# --- verdicts ----------------------------------------------------------------------------


def _target_cost(results: Results) -> PollCost | None:
    return next((c for c in results.poll_costs if c.profile == TARGET_PROFILE), None)


def verdicts(results: Results) -> list[Verdict]:
    out: list[Verdict] = []
    cost = _target_cost(results)
    if cost is not None:
        out.append(
            Verdict(
                f"{TARGET_PROFILE} simulated poll CPU (median) <= {ms(POLL_CPU_TARGET_S)}",
                f"{ms(cost.total.median)} (p99 {ms(cost.total.p99)})",
                cost.total.median <= POLL_CPU_TARGET_S,
            )
        )
    if results.scrape is not None:
        for run in results.scrape.runs:
            if run.connections == 1:
                kind = "gzip" if run.gzip else "plain"
                out.append(
                    Verdict(
                        f"/metrics p99 at 1 connection ({kind}) <= "
                        f"{ms(P99_ONE_CONNECTION_TARGET_S)}",
                        ms(run.p99_seconds),
                        run.p99_seconds <= P99_ONE_CONNECTION_TARGET_S,
                    )
                )
    if results.scrape is not None and results.side_by_side is not None:
        ne = results.side_by_side.node_exporter
        for run in results.scrape.runs:
            if run.connections == 1 or run.gzip:
                continue
            reference = _find(ne.runs, run.connections, False)
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
    if results.rss is not None:
        rss = results.rss
        final_mb = rss.final_mib * MIB / MB
        out.append(
            Verdict(
                f"RSS <= {RSS_TARGET_MB:g} MB",
                f"{final_mb:.1f} MB after {rss.polls:,} polls",
                final_mb <= RSS_TARGET_MB,
            )
        )
        complete = rss.polls >= rss.target_polls
        note = "" if complete else f" (only {rss.polls:,} of {rss.target_polls:,} polls)"
        out.append(
            Verdict(
                f"RSS flat over {rss.target_polls:,} polls (second half grows <= "
                f"{FLAT_TOLERANCE_MIB:g} MiB)",
                f"{rss.second_half_growth_mib * MIB / MB:+.2f} MB over the second half, "
                f"{rss.growth_mib * MIB / MB:+.2f} MB since warm-up{note}",
                rss.flat and complete,
            )
        )
    for count in results.series:
        if count.profile == TARGET_PROFILE:
            out.append(
                Verdict(
                    f"{TARGET_PROFILE} series, full NVLink detail <= {SERIES_LINK_TARGET:,}",
                    f"{count.link_detail:,}",
                    count.link_detail <= SERIES_LINK_TARGET,
                )
            )
            out.append(
                Verdict(
                    f"{TARGET_PROFILE} series, --nvlink-detail=gpu <= {SERIES_GPU_TARGET:,}",
                    f"{count.gpu_detail:,}",
                    count.gpu_detail <= SERIES_GPU_TARGET,
                )
            )
    return out


def _find(runs: list[WrkResult], connections: int, gzip: bool) -> WrkResult | None:
    return next((r for r in runs if r.connections == connections and r.gzip == gzip), None)


# --- sections ----------------------------------------------------------------------------


def render_markdown(results: Results, machine: Machine) -> str:
    parts = [
        _header(results, machine),
        _targets(results),
        _poll_section(results),
        _profile_section(results),
        _series_section(results),
        _scrape_section(results),
        _side_by_side_section(results),
        _rss_section(results),
        _real_nvml_section(results),
        _misses_section(results),
    ]
    return "\n".join(p for p in parts if p).rstrip() + "\n"


def _header(results: Results, machine: Machine) -> str:
    packages = ", ".join(f"{k} {v}" for k, v in machine.packages.items())
    tools = "; ".join(f"{k}: {v}" for k, v in machine.tools.items())
    return f"""# nvwatch performance

Written by `benchmarks/run.py`; every figure below comes from the run described here.
Re-run it to refresh this file; do not edit numbers by hand.

| | |
|---|---|
| date | {machine.date} |
| machine | {machine.cpu}, {machine.cores} cores, {machine.kernel} |
| Python | {machine.python} |
| packages | {packages} |
| tools | {tools} |
| command | `{machine.command}` |
| run time | {results.seconds:.0f} s |

All GPUs here are **simulated** (`agent/sim`, the simulated libnvidia-ml under the real
pynvml bindings, and a simulated sysfs tree on tmpfs). No H100/H200 or any NVIDIA GPU
was available to this run, so there are no real-GPU figures in this file; see
"Real GPUs" at the end for how to take them.
"""


def _targets(results: Results) -> str:
    rows = [f"| {v.target} | {v.figure} | {v.mark} |" for v in verdicts(results)]
    return "\n".join(
        ["## Targets", "", "| target | measured | result |", "|---|---|---|", *rows, ""]
    )


def _poll_section(results: Results) -> str:
    if not results.poll_costs:
        return ""
    stages = [
        "collect nvml",
        "collect infiniband",
        "collect host",
        "prepare nvml",
        "prepare infiniband",
        "prepare host",
        "build_exposition",
    ]
    head = "| profile | polls | poll CPU | " + " | ".join(stages) + " | poll wall (median) |"
    lines = [
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
        head,
        "|" + "---|" * (len(stages) + 4),
    ]
    for cost in results.poll_costs:
        cells = [q(cost.stages[s]) if s in cost.stages else "-" for s in stages]
        lines.append(
            f"| {cost.profile} | {cost.polls} | **{q(cost.total)}** | "
            + " | ".join(cells)
            + f" | {ms(cost.wall_median)} |"
        )
    lines.append("")
    return "\n".join(lines)


def _profile_section(results: Results) -> str:
    lines: list[str] = []
    nvml, poll = results.nvml_split, results.poll_split
    cost = _target_cost(results)
    if nvml is not None:
        sim = nvml.shares.get("simulator (agent/sim)", 0.0)
        lines += [
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
        if cost is not None and "collect nvml" in cost.stages:
            collect = cost.stages["collect nvml"].median
            lines += [
                f"So of the {ms(collect)} median NVML collect, about {ms(collect * sim)} is "
                f"the simulator answering calls and about {ms(collect * (1 - sim))} is the "
                "agent and pynvml. **Real-GPU NVML cost differs**: the real library's "
                "calls are ioctls into the driver (microseconds to milliseconds each, "
                "depending on the call and the GPU's state), which this run cannot measure.",
                "",
            ]
    if poll is not None:
        lines += [
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
    split = results.render_split
    if split is not None:
        per_sample = split.generate_latest.median / max(1, split.samples)
        lines += [
            "### build_exposition, split",
            "",
            f"{split.samples:,} samples, {split.text_bytes:,} bytes of text, "
            f"{split.gzip_bytes:,} bytes gzipped (level 6).",
            "",
            "| step | median / p99 (ms) |",
            "|---|---|",
            f"| prometheus_client `generate_latest` | {q(split.generate_latest)} "
            f"({per_sample * 1e6:.1f} µs per sample) |",
            f"| `gzip.compress(level=6)` | {q(split.gzip)} |",
        ]
        if split.prototype is not None:
            lines.append(
                f"| prototype: cached series prefixes (`benchmarks/render_prototype.py`), "
                f"bytes identical to `generate_latest` | {q(split.prototype)} |"
            )
        else:
            lines.append(
                "| prototype renderer | not timed: its bytes differed from generate_latest |"
            )
        lines.append("")
    return "\n".join(lines)


def _series_section(results: Results) -> str:
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
    target = next((c for c in results.series if c.profile == TARGET_PROFILE), None)
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


def _overflows(run: WrkResult) -> str:
    return "-" if run.listen_overflows is None else f"{run.listen_overflows:,}"


def _wrk_rows(runs: list[WrkResult], label: str) -> list[str]:
    return [
        f"| {label} | {r.connections} | {'gzip' if r.gzip else 'plain'} | "
        f"{r.requests_per_second:,.0f} | {ms(r.p50_seconds)} | {ms(r.p99_seconds)} | "
        f"{_overflows(r)} | {r.errors or '-'} |"
        for r in runs
    ]


def _scrape_section(results: Results) -> str:
    scrape = results.scrape
    if scrape is None:
        return ""
    seconds = results.settings.get("wrk_seconds")
    lines = [
        "## /metrics latency (wrk)",
        "",
        f"`nvwatch serve --simulate {TARGET_PROFILE}` in its own process on 127.0.0.1, "
        f"`wrk --latency -d{seconds:g}s` (threads = min(connections, 2)) from another; "
        f"body {scrape.body_bytes:,} bytes plain, {scrape.gzip_bytes:,} gzipped, "
        f"{scrape.samples:,} samples. The agent keeps polling (every 5 s) and the "
        "simulated node keeps ticking in the same process during the runs, as in use.",
        "",
        "| server | connections | encoding | req/s | p50 | p99 | listen overflows | errors |",
        "|---|---|---|---|---|---|---|---|",
        *_wrk_rows(scrape.runs, "nvwatch"),
    ]
    if results.scrape_nodelay is None:
        lines.append("")
        return "\n".join(lines)
    lines += _wrk_rows(results.scrape_nodelay.runs, f"nvwatch + {EXPERIMENT}")
    lines += [
        "",
        f"*{EXPERIMENT}* is the same agent started with two changes made only in the",
        "benchmark's process: `agent.server._Handler.disable_nagle_algorithm = True`",
        f"(TCP_NODELAY) and `agent.server._Server.request_queue_size = {SERVER_BACKLOG}` "
        "(socketserver's default listen backlog is 5). *listen overflows* is the kernel's",
        "TcpExt ListenOverflows counter over the run: connections that found the accept",
        "queue full and had to retransmit.",
        "",
    ]
    return "\n".join(lines)


def _side_by_side_section(results: Results) -> str:
    sbs = results.side_by_side
    if sbs is None:
        return ""
    nv, ne, fast = sbs.nvwatch, sbs.node_exporter, sbs.nvwatch_nodelay
    lines = [
        "## Side by side: node_exporter's infiniband collector",
        "",
        f"One simulated {TARGET_PROFILE} sysfs tree ({sbs.ports} ports), advanced one "
        "simulated hour and then frozen. `prometheus-node-exporter "
        "--collector.disable-defaults --collector.infiniband --path.sysfs=TREE` and "
        "`nvwatch serve --sources infiniband --sysfs-root TREE`, both on 127.0.0.1, "
        "scraped in turn by wrk at each connection count (plain text). node_exporter "
        "reads sysfs on every scrape; nvwatch serves bytes cached at its last poll.",
        "",
        f"Bodies: nvwatch {nv.body_bytes:,} bytes / {nv.samples:,} samples, node_exporter "
        f"{ne.body_bytes:,} bytes / {ne.samples:,} samples (node_exporter's own "
        "go_/process_/promhttp_ series included).",
        "",
        "| connections | nvwatch p50 / p99 | node_exporter p50 / p99 | p99 ratio nvwatch / "
        f"node_exporter | nvwatch + {EXPERIMENT} p50 / p99 | ratio with the fixes |",
        "|---|---|---|---|---|---|",
    ]
    for run in nv.runs:
        ref = _find(ne.runs, run.connections, False)
        if ref is None:
            continue
        fast_run = _find(fast.runs, run.connections, False) if fast is not None else None
        fast_cells = (
            f"{ms(fast_run.p50_seconds)} / {ms(fast_run.p99_seconds)} | "
            f"{fast_run.p99_seconds / ref.p99_seconds:.2f}"
            if fast_run is not None
            else "- | -"
        )
        lines.append(
            f"| {run.connections} | {ms(run.p50_seconds)} / {ms(run.p99_seconds)} | "
            f"{ms(ref.p50_seconds)} / {ms(ref.p99_seconds)} | "
            f"{run.p99_seconds / ref.p99_seconds:.2f} | {fast_cells} |"
        )
    cmp = sbs.comparison
    lines += [
        "",
        f"**Values**: {cmp.compared} overlapping samples compared (bytes, packets, "
        "transmit wait, port and physical state, rate, the 12 error counters, and "
        f"`_info` labels), **{len(cmp.mismatches)} mismatches**.",
    ]
    for mismatch in cmp.mismatches[:50]:
        lines.append(f"- MISMATCH {mismatch}")
    if len(cmp.mismatches) > 50:
        lines.append(f"- ... and {len(cmp.mismatches) - 50} more")
    if cmp.node_exporter_only:
        lines.append(
            "node_exporter only (nvwatch does not export them): "
            + ", ".join(f"`{n}`" for n in cmp.node_exporter_only)
            + "."
        )
    lines.append("")
    return "\n".join(lines)


def _rss_section(results: Results) -> str:
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
    ]
    if rss.flat and rss.second_half_growth_mib > FLAT_TOLERANCE_MIB / 2:
        lines.append(
            f"**Borderline**: the second half grew "
            f"{rss.second_half_growth_mib * MIB / MB:.2f} MB, more than half the tolerance. "
            "Growth that comes in steps and then holds is typical of allocator arenas, "
            "but a slow leak of a few hundred bytes per poll would look the same over this "
            "many polls: run longer (`--rss-polls 50000 --rss-seconds 3600`) or diff "
            "tracemalloc snapshots between checkpoints before calling it flat."
        )
    if rss.polls < rss.target_polls:
        lines.append(
            f"The time cap stopped the loop at {rss.polls:,} of {rss.target_polls:,} "
            "polls; `--rss-polls 10000 --rss-seconds 1200` runs the whole count."
        )
    lines.append("")
    return "\n".join(lines)


def _timing_row(name: str, timing: Timing) -> str:
    return (
        f"| {name} | {ms(timing.median_wall)} | {ms(timing.p99_wall)} | "
        f"{ms(timing.median_cpu)} | {timing.count} |"
    )


def _real_nvml_section(results: Results) -> str:
    lines = ["## Real GPUs", ""]
    real = results.real_nvml
    if real is None:
        lines += [
            "**Not measured: no NVIDIA GPU or driver was available to this run** (no",
            "H100/H200 in this environment). Every NVML figure above is the simulator's.",
            "",
            "On a node with the driver, run `python benchmarks/run.py --real-nvml --out",
            "docs/performance.md`. It times `NvmlSource.collect()` on the real library and",
            "reads the same NVLink values of every GPU three ways: one batched",
            "`nvmlDeviceGetFieldValues` per GPU (what the source does), the same call with",
            "one value at a time (isolates what batching saves), and the per-link functions",
            "(`nvmlDeviceGetNvLinkState`, `nvmlDeviceGetNvLinkErrorCounter`). Without a",
            "driver it stops with one line and exit code 2.",
            "",
        ]
        return "\n".join(lines)
    lines += [
        f"Driver {real.driver_version}; GPUs: {', '.join(sorted(set(real.gpus)))} "
        f"x{len(real.gpus)}; active NVLinks per GPU: {real.links_per_gpu}.",
        "",
        "| read, all GPUs | median wall | p99 wall | median CPU | runs |",
        "|---|---|---|---|---|",
        _timing_row("`NvmlSource.collect()`", real.source_poll),
        _timing_row(
            f"batched field values ({real.values_per_gpu} values, 1 call per GPU)", real.batched
        ),
        _timing_row(
            f"one field value per call ({real.values_per_gpu} calls per GPU)", real.per_field
        ),
        _timing_row(
            f"per-link functions ({real.per_call_calls_per_gpu} calls per GPU)", real.per_call
        ),
        "",
    ]
    return "\n".join(lines)


def _misses_section(results: Results) -> str:
    missed = [v for v in verdicts(results) if not v.passed]
    lines = ["## Misses: why, and what would fix them", ""]
    if not missed:
        lines += ["Every target was met in this run.", ""]
        return "\n".join(lines)
    text = {v.target: v for v in missed}
    cost = _target_cost(results)
    if cost is not None and any(t.startswith(f"{TARGET_PROFILE} simulated poll") for t in text):
        build = cost.stages.get("build_exposition")
        nvml = cost.stages.get("collect nvml")
        prep = cost.stages.get("prepare nvml")
        split = results.render_split
        parts = [f"- **Poll CPU** ({ms(cost.total.median)} median for {TARGET_PROFILE}):"]
        if build is not None:
            parts.append(
                f"`build_exposition` is {ms(build.median)} "
                f"({pct(build.median / cost.total.median)})"
            )
            if split is not None:
                parts.append(
                    f"of which prometheus_client's `generate_latest` is "
                    f"{ms(split.generate_latest.median)} for {split.samples:,} samples "
                    f"and gzip {ms(split.gzip.median)};"
                )
        if nvml is not None and results.nvml_split is not None:
            sim = results.nvml_split.shares.get("simulator (agent/sim)", 0.0)
            parts.append(
                f"the NVML collect is {ms(nvml.median)}, about {pct(sim)} of it the simulator;"
            )
        if prep is not None:
            parts.append(f"rendering the NVML sample into families is {ms(prep.median)}.")
        if split is not None and split.prototype is not None:
            parts.append(
                f"A prototype that keeps each series' prefix between polls renders the "
                f"same bytes in {ms(split.prototype.median)} instead of "
                f"{ms(split.generate_latest.median)}."
            )
        parts.append(
            "The top functions (table above) are prometheus_client's per-sample "
            "formatting and label-name validation/escaping, re-done for every sample on "
            "every poll though the label sets never change between polls. Fix: render the "
            "text format in `agent/exposition` directly, caching each series' "
            "`name{labels} ` prefix across polls (label sets are stable) so a poll only "
            "formats values; keep prometheus_client for OpenMetrics. On the source side, "
            "the simulator's share is not agent cost, and pynvml's struct access is the "
            "next item."
        )
        lines.append(" ".join(parts))
    latency_missed = [t for t in text if t.startswith("/metrics")]
    if latency_missed:
        lines.append(
            "- **Scrape latency**: "
            + "; ".join(f"{t}: {text[t].figure}" for t in latency_missed)
            + (_latency_cause_fixed() if server_fixed() else _latency_cause_defaults())
        )
    rss_missed = [t for t in text if t.startswith("RSS")]
    if rss_missed:
        lines.append(
            "- **Memory**: "
            + "; ".join(f"{t}: {text[t].figure}" for t in rss_missed)
            + ". See the RSS table: if the loop was cut short by its time cap, run the "
            "full count; a climb that continues across the later checkpoints is a leak to "
            "chase with tracemalloc snapshots diffed between checkpoints."
        )
    series_missed = [t for t in text if "series" in t]
    if series_missed:
        detail = next((c for c in results.series if c.profile == TARGET_PROFILE), None)
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
        lines.append(
            "- **Series**: "
            + "; ".join(f"{t}: {text[t].figure}" for t in series_missed)
            + "."
            + extra
            + " Fix: the per-port families that are mostly zeros (mlx5 hw_counters, the "
            "`counter_saturated` flags) could be opt-in, or a saturation flag emitted "
            "only for counters at their maximum; see the family table for what each "
            "change would remove."
        )
    lines.append("")
    return "\n".join(lines)


def _latency_cause_fixed() -> str:
    return (
        ". The server already writes headers and body in one buffered write with "
        "TCP_NODELAY and listens with a backlog of at least "
        f"{SERVER_BACKLOG} (the listen-overflow column shows whether any connection "
        "met a full queue). What remains is the GIL: the poll (see Poll cycle CPU), the "
        "render and, here, the simulator run in the same process as the handler threads, "
        "so a scrape that arrives during a poll waits for it, and at 64 connections 64 "
        "handler threads take turns on one interpreter while node_exporter's Go server "
        "runs them on every core. A cheaper render (above) shortens the poll's hold on "
        "the GIL; serving /metrics from a process or C-level server that only copies the "
        "cached bytes would take the handlers off the GIL entirely."
    )


def _latency_cause_defaults() -> str:
    return (
        ". Two server defaults show in the tables above. A p50 of ~40 ms on a small "
        "body is TCP's Nagle algorithm meeting the client's delayed ACK: the server "
        "writes the headers, then the body (`end_headers()` flushes, then "
        "`wfile.write(body)`), and the small second write waits for the first one's "
        "ACK; fix: `disable_nagle_algorithm = True` on `agent.server._Handler` (or one "
        "write for headers and body). Tails of seconds at 64 connections, with listen "
        "overflows counted, are socketserver's listen backlog of 5: connections beyond "
        "it retransmit after 1 s, 2 s, ...; fix: `request_queue_size = "
        f"{SERVER_BACKLOG}` on `agent.server._Server`. The *{EXPERIMENT}* rows measure "
        "both. What remains is the GIL: the poll (see Poll cycle CPU), the render and, "
        "here, the simulator run in the same process as the handler threads, so a "
        "scrape that arrives during a poll waits for it; a cheaper render (above) "
        "shortens that, and so would a separate process or a C-level server for "
        "/metrics if the tails still matter."
    )


def server_fixed() -> bool:
    """Whether agent.server already has TCP_NODELAY and a real listen backlog."""
    from agent import server

    return bool(getattr(server._Handler, "disable_nagle_algorithm", False)) and (
        server._Server.request_queue_size >= SERVER_BACKLOG
    )
