"""Sections on serving /metrics: wrk latency, and node_exporter's collector side by side."""

from __future__ import annotations

from benchmarks.report.model import TARGET_PROFILE, Results, find_run, ms
from benchmarks.scrape import Comparison, SideBySide
from benchmarks.wrk import WrkResult

# mismatches listed one by one up to this many; a broken mapping would list thousands
_MISMATCHES_SHOWN = 50


def _overflows(run: WrkResult) -> str:
    return "-" if run.listen_overflows is None else f"{run.listen_overflows:,}"


def _wrk_rows(runs: list[WrkResult], label: str) -> list[str]:
    return [
        f"| {label} | {r.connections} | {'gzip' if r.gzip else 'plain'} | "
        f"{r.requests_per_second:,.0f} | {ms(r.p50_seconds)} | {ms(r.p99_seconds)} | "
        f"{_overflows(r)} | {r.errors or '-'} |"
        for r in runs
    ]


def scrape_section(results: Results) -> str:
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
        "",
    ]
    return "\n".join(lines)


def side_by_side_section(results: Results) -> str:
    sbs = results.side_by_side
    if sbs is None:
        return ""
    nv, ne = sbs.nvwatch, sbs.node_exporter
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
        "node_exporter |",
        "|---|---|---|---|",
        *_side_by_side_rows(sbs),
        "",
        *_comparison_lines(sbs.comparison),
        "",
    ]
    return "\n".join(lines)


def _side_by_side_rows(sbs: SideBySide) -> list[str]:
    rows: list[str] = []
    for run in sbs.nvwatch.runs:
        ref = find_run(sbs.node_exporter.runs, run.connections, False)
        if ref is None:
            continue
        rows.append(
            f"| {run.connections} | {ms(run.p50_seconds)} / {ms(run.p99_seconds)} | "
            f"{ms(ref.p50_seconds)} / {ms(ref.p99_seconds)} | "
            f"{run.p99_seconds / ref.p99_seconds:.2f} |"
        )
    return rows


def _comparison_lines(cmp: Comparison) -> list[str]:
    lines = [
        f"**Values**: {cmp.compared} overlapping samples compared (bytes, packets, "
        "transmit wait, port and physical state, rate, the 12 error counters, and "
        f"`_info` labels), **{len(cmp.mismatches)} mismatches**.",
    ]
    lines += [f"- MISMATCH {mismatch}" for mismatch in cmp.mismatches[:_MISMATCHES_SHOWN]]
    if len(cmp.mismatches) > _MISMATCHES_SHOWN:
        lines.append(f"- ... and {len(cmp.mismatches) - _MISMATCHES_SHOWN} more")
    if cmp.node_exporter_only:
        lines.append(
            "node_exporter only (nvwatch does not export them): "
            + ", ".join(f"`{n}`" for n in cmp.node_exporter_only)
            + "."
        )
    return lines
