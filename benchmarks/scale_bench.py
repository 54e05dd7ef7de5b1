"""The seed's 124-node DGX-1 cluster under one Prometheus and under the sharded
VictoriaMetrics path, measured: what nvwatch costs the monitoring stack.

    python benchmarks/scale_bench.py [--minutes 10] [--nodes 124] [--no-vm]
                                     [--out docs/scale.md] [--json FILE]

Runs `nvwatch simulate fleet` (dgx1-v100, 15 s polls) with fault scenarios on known
nodes, labels its targets with `nvwatch inventory` (racks = fat-tree leaves), scrapes
it every 15 s with a real Prometheus running the mixin's rules and, side by side, with
deploy/scale's two vmagent shards into VictoriaMetrics with vmalert. After --minutes it
records series, samples/s, CPU and RSS of every process, each rule group's evaluation
time, every dashboard panel's query time over 1 h and 24 h, bytes per sample on disk,
and which alerts fired against the placed scenarios; docs/scale.md is written from
those figures (benchmarks/scale/report.py does the arithmetic to bigger fleets).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import statistics
import sys
import time
import urllib.request
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from benchmarks.cardinality import BEGIN as CARDINALITY_BEGIN
from benchmarks.cardinality import END as CARDINALITY_END
from benchmarks.common import (
    REPO_ROOT,
    cpu_model,
    scratch_dir,
    section_of,
    tool_version,
    with_section,
)
from benchmarks.scale import measure as m
from benchmarks.scale.report import PanelTime, Results, from_json, render
from benchmarks.scale.stack import CLUSTER, Placed, Stack, node_name, sync_jobs
from benchmarks.thousand.section import BEGIN as THOUSAND_BEGIN
from benchmarks.thousand.section import END as THOUSAND_END
from nvwatch.alerts import build as alerts_build
from nvwatch.alerts.recording_straggler import straggler_groups
from nvwatch.common.durations import parse_duration
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.series_budget import measure as measure_budget

PROFILE = "dgx1-v100"
SCRAPE_S = 15
PLACED = (
    Placed(5, "thermal-runaway", "2", "NvwatchGpuThermalSlowdown"),
    Placed(17, "nvlink-degraded", "3", "NvwatchNvlinkDown"),
    Placed(42, "ecc-dbe", "4", "NvwatchGpuEccUncorrectable"),
    Placed(77, "ib-link-flap", "mlx5_2", "NvwatchIbLinkDowned"),
    Placed(99, "gpu-lost", "5", "NvwatchGpuDown"),
    Placed(120, "ib-degraded", "mlx5_3", "NvwatchIbPortRateDegraded"),
)
# Nodes per synchronous job: the fleet is filled with 8-node data-parallel jobs (64
# GPUs of a DGX-1 fleet), so the straggler rules compare every GPU the fleet has.
NODES_PER_JOB = 8
# The straggler rules compare a job's ranks only once it has run this long (15 min by
# default): shortened so that they compare for the whole measuring time. The offset it
# sets costs the same at any length, so the rules' cost is the shipped one.
STRAGGLER_WARMUP = "1m"
RANGES_S = (3600, 86400)
# A placed fault's time to develop before its alert's condition holds, plus a few rule
# evaluations and scrapes: added to the longest `for:` of the placed alerts. A dgx1-v100's
# thermal runaway holds slowdown from ~3.75 min after onset (stepped as the fleet steps
# it), so its `for: 10m` alert fires ~15-16 min in: 5 minutes of lead missed it.
FAULT_LEAD_S = 480.0
_FLEET_STATS = re.compile(r"fleet: \d+ nodes, CPU (?P<cpu>[\d.]+)% of one core")


def fired(url: str, minutes: float) -> set[tuple[str, str]]:
    """(alertname, instance) of every nvwatch alert that was firing at some point."""
    # whole seconds: PromQL durations take no fractions ("10.5m" is refused)
    window = f"{max(1, round(minutes * 60))}s"
    expr = f'max_over_time(ALERTS{{alertstate="firing", alertname=~"Nvwatch.*"}}[{window}])'
    return {(r["metric"]["alertname"], r["metric"].get("instance", "")) for r in m.query(url, expr)}


def panel_times(url: str, cfg: MixinConfig) -> list[PanelTime]:
    out = []
    for query in m.panel_queries(cfg):
        seconds = tuple(m.time_query(url, query, CLUSTER, r, SCRAPE_S) for r in RANGES_S)
        out.append(PanelTime(query.dashboard, query.title, query.expr, seconds))
    return out


def overview_rules(cfg: MixinConfig) -> list[str]:
    """The recording rules the cluster overview reads."""
    from nvwatch.alerts.promql import metric_names
    from nvwatch.alerts.recording import recorded_names

    names: set[str] = set()
    for query in m.panel_queries(cfg):
        if query.dashboard == "nvwatch-cluster-overview.json":
            names |= metric_names(query.expr) & recorded_names(cfg)
    return sorted(names)


def alert_deadline_s(rules_file: Path, placed: list[Placed]) -> float:
    """Seconds after the fleet's start by which every placed alert can have fired: the
    longest `for:` among them (read from the generated rules) plus FAULT_LEAD_S."""
    wanted = {p.alert for p in placed}
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    holds = [
        parse_duration(rule["for"], "for")
        for group in groups
        for rule in group["rules"]
        if rule.get("alert") in wanted and "for" in rule
    ]
    return max(holds, default=0.0) + FAULT_LEAD_S


def wait_for_alerts(
    urls: list[str], expected: set[tuple[str, str]], began: float, deadline_s: float
) -> float:
    """Poll until every expected alert has fired on every engine, or the deadline (from
    `began`) passes; the minutes since `began` at the end, the window fired() reads."""
    while True:
        elapsed = time.monotonic() - began
        if elapsed >= deadline_s or all(expected <= fired(u, elapsed / 60) for u in urls):
            return (time.monotonic() - began) / 60
        time.sleep(SCRAPE_S)


def rule_savings(url: str, cfg: MixinConfig) -> dict[str, tuple[float, float]]:
    """Per overview rule: 24 h range query time of the rule, and of its raw equivalent."""
    out = {}
    for record in overview_rules(cfg):
        rule = m.time_range_query(url, f'{record}{{cluster="{CLUSTER}"}}', 86400, SCRAPE_S)
        raw = m.time_range_query(url, m.raw_equivalent(cfg, record), 86400, SCRAPE_S)
        out[record] = (rule, raw)
    return out


def straggler_series(url: str, cfg: MixinConfig) -> int:
    """Series the job-straggler recording rules write, every one of their records."""
    records = [r.record for g in straggler_groups(cfg) for r in g.rules]
    return len(m.query(url, f'{{__name__=~"{"|".join(records)}"}}'))


def fleet_cpu(log: Path) -> float:
    shares = [float(x["cpu"]) for x in map(_FLEET_STATS.search, log.read_text().splitlines()) if x]
    return statistics.median(shares[1:] or shares) if shares else float("nan")


def run(minutes: float, nodes: int, with_vm: bool) -> Results:
    cfg = MixinConfig(straggler_warmup=STRAGGLER_WARMUP)
    work = scratch_dir("nvwatch-scale-")
    stack = Stack(work)
    try:
        placed = [p for p in PLACED if p.node < nodes]
        jobs = sync_jobs(nodes, NODES_PER_JOB)
        fleet_sd = stack.start_fleet(nodes, PROFILE, f"{SCRAPE_S}s", placed, jobs)
        targets = stack.label_targets(nodes, PROFILE, fleet_sd)
        rules = work / "rules"
        alerts_build.write(rules, cfg)
        recording = rules / alerts_build.PROMETHEUS_RECORDING
        stack.start_prometheus(
            targets, [recording, rules / alerts_build.PROMETHEUS_ALERTS], f"{SCRAPE_S}s"
        )
        if with_vm:
            stack.start_vm_path(
                targets, [recording, rules / alerts_build.VMALERT_ALERTS], f"{SCRAPE_S}s"
            )
        stack.sampler.start()
        prom, vm = stack.urls["prometheus"], stack.urls.get("victoria-metrics", "")
        began, cpu0 = time.monotonic(), stack.sampler.cpu_seconds()
        print(f"scale: {nodes} nodes up, measuring for {minutes:g} min ({work})", flush=True)
        time.sleep(minutes * 30)
        half = (time.monotonic(), m.scrape_metrics(prom), m.scrape_metrics(vm) if vm else {})
        time.sleep(minutes * 30)
        wall = time.monotonic() - began
        cpu1 = stack.sampler.cpu_seconds()
        end = (time.monotonic(), m.scrape_metrics(prom), m.scrape_metrics(vm) if vm else {})
        expected = {(p.alert, node_name(p.node)) for p in placed}
        deadline = alert_deadline_s(rules / alerts_build.PROMETHEUS_ALERTS, placed)
        print(f"scale: waiting up to {deadline / 60:g} min from the start for the alerts")
        alert_minutes = wait_for_alerts([u for u in (prom, vm) if u], expected, began, deadline)
        appended = "prometheus_tsdb_head_samples_appended_total"
        inserted = "vm_rows_inserted_total"
        span = end[0] - half[0]
        results = Results(
            date=datetime.date.today().isoformat(),
            machine=cpu_model(),
            prometheus_version=tool_version(["prometheus", "--version"]),
            vm_version="VictoriaMetrics "
            + tool_version(["dpkg-query", "-W", "-f=${Version}", "victoria-metrics"])
            if with_vm
            else "",
            nodes=nodes,
            profile=PROFILE,
            minutes=minutes,
            scrape_s=SCRAPE_S,
            cpu_share={k: (cpu1[k] - cpu0[k]) / wall for k in cpu1},
            rss_mb=dict(stack.sampler.peaks),
            fleet_cpu_pct=fleet_cpu(work / "fleet.log"),
            prom_series=m.one(end[1], "prometheus_tsdb_head_series"),
            prom_samples_per_s=(m.one(end[1], appended) - m.one(half[1], appended)) / span,
            prom_rule_groups=m.rule_group_seconds(end[1]),
            vm_samples_per_s=(m.one(end[2], inserted) - m.one(half[2], inserted)) / span
            if vm
            else 0.0,
            vm_rule_groups=m.vmalert_group_seconds(m.scrape_metrics(stack.urls["vmalert"]))
            if vm
            else {},
            expected=expected,
            fired_prometheus=fired(prom, alert_minutes),
            fired_vm=fired(vm, alert_minutes) if vm else set(),
            panels_prometheus=panel_times(prom, cfg),
            panels_vm=panel_times(vm, cfg) if vm else [],
            rule_savings=rule_savings(prom, cfg),
            instance_rule_series=len(m.query(prom, '{__name__=~"instance:.*"}')),
            sync_jobs=len(jobs),
            nodes_per_job=NODES_PER_JOB,
            straggler_rule_series=straggler_series(prom, cfg),
            gpus=len(m.query(prom, "nvwatch_gpu_info")),
            prom_samples_total=m.one(end[1], appended),
            prom_block_bytes=m.prometheus_snapshot_bytes(prom, work / "prometheus-data"),
            vm_series=_vm_series(vm) if vm else 0.0,
            vm_rows=_vm_flushed_rows(vm) if vm else 0.0,
            vm_bytes=m.du_bytes(stack.vm_data) if vm else 0,
            budget_h100=measure_budget("dgx-h100", work / "budget-h100").ceiling,
            budget_v100=measure_budget(PROFILE, work / "budget-v100").ceiling,
            load_average=list(os.getloadavg()),
            alert_minutes=alert_minutes,
        )
    finally:
        stack.close()
    return results


def _vm_series(url: str) -> float:
    data = m.api(url, "/api/v1/status/tsdb", {})
    return float(
        data.get("totalSeries") or sum(x["value"] for x in data["seriesCountByMetricName"])
    )


def _vm_flushed_rows(url: str) -> float:
    """Rows on disk after VictoriaMetrics flushed what it buffers in memory."""
    urllib.request.urlopen(f"{url}/internal/force_flush", timeout=120).read()
    time.sleep(5)
    metrics = m.scrape_metrics(url)
    return sum(
        v
        for labels, v in metrics.get("vm_rows", [])
        if labels.get("type", "").startswith("storage/")
    )


def with_cardinality(out: Path, text: str) -> str:
    """`text` with `out`'s sections that other benchmarks write (benchmarks/cardinality.py,
    benchmarks/thousand), carried over as they are."""
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    for begin, end in ((CARDINALITY_BEGIN, CARDINALITY_END), (THOUSAND_BEGIN, THOUSAND_END)):
        kept = section_of(old, begin, end)
        if kept is not None:
            text = with_section(text, kept, begin, end)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="measuring time (default 10)")
    parser.add_argument("--nodes", type=int, default=124)
    parser.add_argument("--no-vm", action="store_true", help="Prometheus only")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "scale.md")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument(
        "--render", type=Path, metavar="JSON", help="only write --out from a run's --json"
    )
    args = parser.parse_args(argv)
    if args.render:
        text = render(from_json(json.loads(args.render.read_text())))
        args.out.write_text(with_cardinality(args.out, text), encoding="utf-8")
        return 0
    if args.minutes <= 0 or args.nodes < 1:
        parser.error("--minutes and --nodes must be positive")
    results = run(args.minutes, args.nodes, not args.no_vm)
    if args.json:
        args.json.write_text(json.dumps(dataclasses.asdict(results), indent=1, default=sorted))
    args.out.write_text(with_cardinality(args.out, render(results)), encoding="utf-8")
    print(f"scale: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
