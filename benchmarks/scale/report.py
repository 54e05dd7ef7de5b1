"""docs/scale.md from one run of benchmarks/scale_bench.py: the measured figures, and
the arithmetic from them to 1,000 and 10,000 DGX H100 nodes, every figure marked
*measured* (this run) or *derived* (from measured figures, with the formula shown)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# Prometheus' own series per target (up, scrape_duration_seconds, scrape_samples_scraped,
# scrape_samples_post_metric_relabeling, scrape_series_added)
SCRAPE_SERIES = 5
FLEETS = (1_000, 10_000)
RETENTION_DAYS = 90  # deploy/scale's -retentionPeriod: a quarter of capacity reviews
SHARD_CPU_BUDGET = 0.5  # of one core per vmagent shard, leaving room for bursts
PROMETHEUS_RSS_BUDGET_GIB = 64.0  # assumption: the largest Prometheus one would run


@dataclass(frozen=True)
class PanelTime:
    dashboard: str
    title: str
    expr: str
    seconds: tuple[float, ...]  # 1 h, 24 h


@dataclass
class Results:
    date: str
    machine: str
    prometheus_version: str
    vm_version: str
    nodes: int
    profile: str
    minutes: float
    scrape_s: int
    cpu_share: dict[str, float]
    rss_mb: dict[str, float]
    fleet_cpu_pct: float
    prom_series: float
    prom_samples_per_s: float
    prom_rule_groups: dict[str, float]
    vm_samples_per_s: float
    vm_rule_groups: dict[str, float]
    expected: set[tuple[str, str]]
    fired_prometheus: set[tuple[str, str]]
    fired_vm: set[tuple[str, str]]
    panels_prometheus: list[PanelTime]
    panels_vm: list[PanelTime]
    rule_savings: dict[str, tuple[float, float]]
    instance_rule_series: int
    prom_samples_total: float
    prom_block_bytes: int
    vm_series: float
    vm_rows: float
    vm_bytes: int
    budget_h100: int
    budget_v100: int
    notes: list[str] = field(default_factory=list)
    load_average: list[float] = field(default_factory=list)  # 1, 5, 15 min, at the end
    # minutes from the fleet's start to the alert check (the measuring time, or longer
    # when a placed alert's `for:` needs it); 0: the same as `minutes` (older runs)
    alert_minutes: float = 0.0
    # the fleet filled with synchronous jobs of this many nodes (0: older runs, none)
    sync_jobs: int = 0
    nodes_per_job: int = 0
    straggler_rule_series: int = 0
    gpus: int = 0  # GPUs the fleet exported (nvwatch_gpu_info series)
    evaluation_interval_s: int = 60  # the mixin's and deploy/prometheus' interval


def _n(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def _bytes(x: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= size:
            return f"{x / size:,.1f} {unit}"
    return f"{x:,.0f} B"


def _alerts(r: Results, fired: set[tuple[str, str]], engine: str) -> list[str]:
    missing = sorted(r.expected - fired)
    placed_nodes = {i for _, i in r.expected}
    healthy = sorted(f for f in fired if f[1] not in placed_nodes)
    also = sorted(f for f in fired if f[1] in placed_nodes and f not in r.expected)
    rows = [
        f"| {a} | {i} | {'fired' if (a, i) in fired else '**not fired**'} |"
        for a, i in sorted(r.expected)
    ]
    rows.append("")
    others = ", ".join(f"{a} on {i}" for a, i in healthy) or "none"
    side = ", ".join(f"{a} on {i}" for a, i in also) or "none"
    rows.append(
        f"{engine}: {len(r.expected) - len(missing)} of {len(r.expected)} placed alerts fired "
        f"(measured). Alerts on healthy nodes: **{others}**. Other alerts the faults "
        f"raised on their own nodes: {side}."
    )
    return rows


STRAGGLER_GROUP_PREFIX = "nvwatch-straggler-"
RULE_SHARE_BUDGET = 0.10  # of its interval: a group that needs more starts to lag


def _stragglers(r: Results) -> list[str]:
    """The job-straggler rules' cost: their series and each group's evaluation time."""
    if not r.sync_jobs:
        return []
    groups = sorted(g for g in r.prom_rule_groups if g.startswith(STRAGGLER_GROUP_PREFIX))
    gpus = max(r.gpus, 1)
    lines = [
        "",
        "## The job-straggler rules (measured)",
        "",
        f"The fleet ran {r.sync_jobs} job(s) of up to {r.nodes_per_job} nodes holding "
        "every GPU, so the straggler rules compared every GPU with its job's others "
        "(their warm-up shortened to a minute so that they compared for the whole run; "
        "the offset costs the same at any length). The jobs are allocated but not "
        "synchronised: simulating every rank's steps took this machine's two cores at "
        "124 nodes, and a rule's cost is the series it joins, not their values. "
        f"They wrote {_n(r.straggler_rule_series)} series "
        f"({r.straggler_rule_series / gpus:.1f} per GPU, measured, counted in the series "
        "per node above). Each group against its evaluation interval "
        f"({r.evaluation_interval_s} s), budget {RULE_SHARE_BUDGET:.0%}:",
        "",
        "| group | Prometheus (s) | share of interval | vmalert (s) | share of interval |",
        "|---|---|---|---|---|",
    ]
    for group in groups:
        prom, vm = r.prom_rule_groups.get(group), r.vm_rule_groups.get(group)
        cells = [
            cell
            for x in (prom, vm)
            for cell in (("", "") if x is None else (f"{x:.4f}", _share(x, r)))
        ]
        lines.append(f"| {group} | {' | '.join(cells)} |")
    return lines


def _share(seconds: float, r: Results) -> str:
    share = seconds / r.evaluation_interval_s
    return f"{share:.2%} ({'within' if share <= RULE_SHARE_BUDGET else '**over**'} budget)"


def from_json(data: dict[str, Any]) -> Results:
    """Results from the --json file of a run (sets and tuples come back as lists)."""
    pairs = ("expected", "fired_prometheus", "fired_vm")
    for key in pairs:
        data[key] = {tuple(x) for x in data[key]}
    for key in ("panels_prometheus", "panels_vm"):
        data[key] = [PanelTime(**{**p, "seconds": tuple(p["seconds"])}) for p in data[key]]
    data["rule_savings"] = {k: tuple(v) for k, v in data["rule_savings"].items()}
    return Results(**data)


def render(r: Results) -> str:
    per_node = r.prom_series / r.nodes
    rule_per_node = r.instance_rule_series / r.nodes
    rss_per_100k = r.rss_mb.get("prometheus", 0.0) / (r.prom_series / 1e5)
    prom_bps = r.prom_block_bytes / max(r.prom_samples_total, 1.0)
    vm_bps = r.vm_bytes / r.vm_rows if r.vm_rows else float("nan")
    lines = [
        "# nvwatch at scale: the seed's 124-node cluster, measured",
        "",
        f"Generated by `python benchmarks/scale_bench.py --minutes {r.minutes:g}` on {r.date} "
        f"({r.machine}; {r.prometheus_version}; {r.vm_version or 'no VictoriaMetrics run'}). "
        "Every figure is **measured** in that run or **derived** from measured ones by "
        "the arithmetic shown. The machine is a shared 2-core box that ran other work "
        "(other test suites, other benchmarks) at the same time"
        + (
            f" (load averages {', '.join(f'{x:.0f}' for x in r.load_average)} at the end)"
            if r.load_average
            else " (load averages of 20 to 50 were seen during the run)"
        )
        + ": CPU shares and query times are upper bounds for a quiet machine, and a "
        "starved simulator delays the placed faults' alerts.",
        "",
        "## The run",
        "",
        f"{r.nodes} simulated `{r.profile}` nodes (`nvwatch simulate fleet`, one process, "
        f"{r.scrape_s} s polls), targets labelled by `nvwatch inventory` from a hand-over "
        "table whose racks are the fat-tree's leaf switches (4 DGX-1 per 36-port EDR leaf), "
        f"scraped every {r.scrape_s} s by one Prometheus running the mixin's recording and "
        "alerting rules and, side by side, by deploy/scale's two vmagent shards writing to "
        f"VictoriaMetrics with vmalert; measured for {r.minutes:g} minutes.",
        "",
        "## Cost of the fleet and of the stack (measured)",
        "",
        "| process | CPU (share of one core) | peak RSS |",
        "|---|---|---|",
    ]
    for name in sorted(r.cpu_share):
        lines.append(f"| {name} | {r.cpu_share[name]:.1%} | {_n(r.rss_mb.get(name, 0))} MB |")
    lines += [
        "",
        f"The simulated fleet's own `--stats-every` lines give a median of "
        f"{r.fleet_cpu_pct:.1f} % of one core for {r.nodes} nodes at {r.scrape_s} s "
        f"(simulator included): target ≤ 25 %, "
        f"{'PASS' if r.fleet_cpu_pct <= 25 else 'MISS on this shared machine'}.",
        "",
        "| figure | Prometheus | VictoriaMetrics path |",
        "|---|---|---|",
        f"| active series | {_n(r.prom_series)} | {_n(r.vm_series)} |",
        f"| series per node (incl. {SCRAPE_SERIES} scrape series and "
        f"{rule_per_node:.0f} per-node rule series) | {per_node:,.0f} | "
        f"{r.vm_series / r.nodes:,.0f} |",
        f"| samples/s ingested (second half of the run) | {_n(r.prom_samples_per_s)} | "
        f"{_n(r.vm_samples_per_s)} |",
        f"| bytes per sample on disk | {prom_bps:.2f} (head compacted into a block by a TSDB "
        f"snapshot: {_bytes(r.prom_block_bytes)} for {_n(r.prom_samples_total)} samples) | "
        f"{vm_bps:.2f} (data directory after a flush: {_bytes(r.vm_bytes)} for "
        f"{_n(r.vm_rows)} rows) |",
        f"| Prometheus RSS per 100k active series | {_n(rss_per_100k)} MB | |",
        "",
        "Bytes per sample come from a block of minutes, not the 2 h and larger blocks "
        "Prometheus compacts to (and VictoriaMetrics' background merges): real "
        "retention compresses better, so storage below is an upper bound.",
        "",
        "## Rule groups (measured, seconds per evaluation)",
        "",
        "| group | Prometheus (last evaluation) | vmalert (mean) |",
        "|---|---|---|",
    ]
    for group in sorted(set(r.prom_rule_groups) | set(r.vm_rule_groups)):
        prom, vm = r.prom_rule_groups.get(group), r.vm_rule_groups.get(group)
        cells = ["" if x is None else f"{x:.4f}" for x in (prom, vm)]
        lines.append(f"| {group} | {cells[0]} | {cells[1]} |")
    lines += _stragglers(r)
    lines += _panels(r)
    lines += [
        "",
        "## Alerts against the placed scenarios (measured)",
        "",
        f"Checked {r.alert_minutes or r.minutes:g} minutes after the fleet started: each "
        "placed alert's `for:` and the time its fault needs to develop, waited for "
        "after the measuring time (an alert with `for: 10m` cannot fire within 10).",
        "",
        "| alert | node | |",
        "|---|---|---|",
    ]
    lines += _alerts(r, r.fired_prometheus, "Prometheus")
    if r.vm_version:
        lines += ["", "| alert | node | through vmalert |", "|---|---|---|"]
        lines += _alerts(r, r.fired_vm, "vmalert")
    lines += _projection(r, per_node, rule_per_node, rss_per_100k, prom_bps, vm_bps)
    lines += r.notes
    return "\n".join(lines) + "\n"


def _panels(r: Results) -> list[str]:
    lines = [
        "",
        "## Dashboard queries (measured)",
        "",
        "Every panel's query as Grafana sends it (every node selected, step = range / "
        "1,000 rounded to the scrape interval), median of 3, on Prometheus. The run holds "
        f"{r.minutes:g} minutes of data, so a 24 h query reads those minutes: the 24 h "
        "figures are the cost of the query's shape, and grow with the data a full day holds.",
        "",
        "| dashboard | panel | 1 h (s) | 24 h (s) |",
        "|---|---|---|---|",
    ]
    slowest = sorted(r.panels_prometheus, key=lambda p: -p.seconds[-1])
    for p in slowest[:15]:
        lines.append(f"| {p.dashboard} | {p.title} | {p.seconds[0]:.3f} | {p.seconds[1]:.3f} |")
    candidates = ", ".join(f"{p.dashboard} / {p.title}" for p in slowest[:3])
    lines += [
        "",
        f"The slowest ({candidates}) are per-node views run here with every node "
        "selected, reading every NVLink link of the fleet at query time: they are the "
        "recording-rule candidates if operators open them fleet-wide (per-link rates "
        "recorded once per minute), and fast when a node or a few are selected as "
        "intended. No cluster- or rack-level panel is among them: those read recording "
        "rules (tests/mixin/test_promql.py holds every dashboard to that).",
    ]
    for engine, panels in (("Prometheus", r.panels_prometheus), ("VictoriaMetrics", r.panels_vm)):
        overview = [p for p in panels if p.dashboard == "nvwatch-cluster-overview.json"]
        if overview:
            total = sum(p.seconds[1] for p in overview)
            lines.append("")
            lines.append(
                f"24 h cluster-overview load on {engine}, all {len(overview)} queries one after "
                f"the other: **{total:.3f} s** (measured; target < 1 s)."
            )
    lines += [
        "",
        "## What the recording rules save (measured at 24 h)",
        "",
        "Each rule the cluster overview reads, queried over 24 h, against the same "
        "expression with the rules it reads expanded into raw series:",
        "",
        "| rule | rule (s) | raw equivalent (s) |",
        "|---|---|---|",
    ]
    for record, (rule, raw) in sorted(r.rule_savings.items()):
        lines.append(f"| `{record}` | {rule:.3f} | {raw:.3f} |")
    return lines


def _projection(
    r: Results,
    per_node: float,
    rule_per_node: float,
    rss_per_100k: float,
    prom_bps: float,
    vm_bps: float,
) -> list[str]:
    straggler_per_node = r.straggler_rule_series / r.nodes
    h100 = r.budget_h100 + SCRAPE_SERIES + rule_per_node + straggler_per_node
    shard_share = r.cpu_share.get("vmagent-0", 0.0) + r.cpu_share.get("vmagent-1", 0.0)
    cpu_per_sample = shard_share / r.vm_samples_per_s if r.vm_samples_per_s else float("nan")
    vm_share = r.cpu_share.get("victoria-metrics", 0.0)
    vm_cpu_per_sample = vm_share / r.vm_samples_per_s if r.vm_samples_per_s else float("nan")
    bps = vm_bps if not math.isnan(vm_bps) else prom_bps
    lines = [
        "",
        "## From 124 DGX-1 to 1,000 and 10,000 DGX H100 (derived)",
        "",
        f"A DGX H100 exports at most {r.budget_h100:,} series (measured by rendering the "
        f"profile, docs/metrics.md; a DGX-1 V100 {r.budget_v100:,}), plus {SCRAPE_SERIES} "
        f"scrape series, {rule_per_node:.0f} per-node recording-rule series and "
        f"{straggler_per_node:.0f} job-straggler rule series per node of a fleet full of "
        f"synchronous jobs (measured above): **{h100:,.0f} series per node** at a "
        f"{r.scrape_s} s scrape, "
        f"{h100 / r.scrape_s:,.0f} samples/s. Costs per series and per sample are the "
        "measured ones above; the shard rule keeps each vmagent under "
        f"{SHARD_CPU_BUDGET:.0%} of a core, two at least (one can fail).",
        "",
        "| | 1,000 nodes | 10,000 nodes |",
        "|---|---|---|",
    ]

    def row(label: str, fn: object) -> None:
        assert callable(fn)
        lines.append(f"| {label} | {fn(FLEETS[0])} | {fn(FLEETS[1])} |")

    def samples(n: int) -> float:
        return n * h100 / r.scrape_s

    row("active series (nodes x series per node)", lambda n: _n(n * h100))
    row("samples/s (series / scrape interval)", lambda n: _n(samples(n)))
    row(
        "vmagent shards (samples/s x measured CPU per sample/s / 0.5 core, at least 2)",
        lambda n: (
            "n/a (no VictoriaMetrics run)"
            if math.isnan(cpu_per_sample)
            else str(max(2, math.ceil(samples(n) * cpu_per_sample / SHARD_CPU_BUDGET)))
        ),
    )
    row(
        "VictoriaMetrics CPU (samples/s x measured CPU per sample/s)",
        lambda n: f"{samples(n) * vm_cpu_per_sample:,.1f} cores",
    )
    row(
        f"one Prometheus instead: RSS (series x {rss_per_100k:,.0f} MB per 100k)",
        lambda n: _bytes(n * h100 / 1e5 * rss_per_100k * 2**20),
    )
    row(
        f"Prometheus shards at ≤ {PROMETHEUS_RSS_BUDGET_GIB:g} GiB RSS each (assumption)",
        lambda n: str(math.ceil(n * h100 / 1e5 * rss_per_100k / 1024 / PROMETHEUS_RSS_BUDGET_GIB)),
    )
    row(
        f"storage per day (samples/s x 86,400 x {bps:.2f} B)",
        lambda n: _bytes(samples(n) * 86400 * bps),
    )
    row(
        f"storage at {RETENTION_DAYS} d retention",
        lambda n: _bytes(samples(n) * 86400 * bps * RETENTION_DAYS),
    )
    row("storage per year", lambda n: _bytes(samples(n) * 86400 * bps * 365))
    rules_read = sum(rule for rule, _ in r.rule_savings.values())
    raw_read = sum(raw for _, raw in r.rule_savings.values())
    lines += [
        "",
        f"What the recording rules save: the overview's rules took {rules_read:.3f} s over "
        f"24 h and their raw equivalents {raw_read:.3f} s at {r.nodes} nodes (measured). The "
        "rules' own series per cluster do not grow with the fleet, while the raw "
        "equivalents read every GPU and port of it: at 10,000 nodes the raw queries read "
        f"~{10_000 / r.nodes:,.0f}x the series (and DGX H100 has "
        f"{r.budget_h100 / r.budget_v100:.1f}x the series of a DGX-1), the rule queries the same.",
        "",
        f"Recommended retention: {RETENTION_DAYS} days of raw samples (deploy/scale's "
        "`-retentionPeriod`), enough for three monthly capacity reviews; the capacity "
        "review reads only per-node recording rules, which could be kept longer.",
    ]
    return lines
