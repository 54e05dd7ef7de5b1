"""Each engine's turn of the 1,000-node run, on the history's block and the replaying
targets that benchmarks.thousand.run prepared: Prometheus reading the block where it was
written, VictoriaMetrics fed it by vmctl behind two vmagent shards and vmalert. Each
turn times the rule groups at its start and settled, stands in the rules' series over
the history, times every dashboard panel over 1 h and 24 h and the report, and returns
its figures.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import stop
from benchmarks.scale import measure as m
from benchmarks.scale.stack import Stack
from benchmarks.thousand import measure as t
from benchmarks.thousand import recorded as r
from benchmarks.thousand import rule_timing as rt
from benchmarks.thousand.federation import measure_federation
from benchmarks.thousand.replay import bmc_targets
from nvwatch.alerts import build as alerts_build
from nvwatch.sim.bulk.write import CLUSTER
from tests.e2e.loopback import Endpoint, wait_for
from tests.e2e.service_commands import (
    BmcProbe,
    prometheus_argv,
    prometheus_config,
    victoria_metrics_argv,
    vmagent_argv,
    vmagent_scrape_config,
    vmalert_argv,
    write_yaml,
)

RANGES_S = (3600, 86400)
RULE_INTERVAL_S = int(r.MINUTE_S)  # the mixin's evaluation interval, which the engines run at
RETENTION = "--storage.tsdb.retention.time=90d"  # as deploy/scale's VictoriaMetrics
VMAGENT_SHARDS = 2  # deploy/scale's vmagent@.service: -promscrape.cluster.membersCount


@dataclass(frozen=True)
class Targets:
    """The replaying targets: the directory of their file_sd groups (write_targets) and
    the BMCs' probe at the replaying server."""

    directory: Path
    bmcs: BmcProbe
    # write_gap for this fleet: what the targets answered from the history's end on
    gap: Callable[[float, Path], int]


def measure_prometheus(stack: Stack, data: Path, targets: Targets, rule_dir: Path,
                       scrape_s: int, rule_readings: int, history_start: float,
                       hours: float, before_s: float) -> dict[str, Any]:  # fmt: skip
    """Prometheus' turn; `before_s`: how far before the history the report rules' series
    stand in for the month's report (month_before), 0 for none."""
    endpoint = Endpoint.free()
    rule_files = [rule_dir / alerts_build.PROMETHEUS_RECORDING,
                  rule_dir / alerts_build.PROMETHEUS_ALERTS]  # fmt: skip
    config = prometheus_config(
        rule_files=rule_files,
        targets=targets.directory, scrape_interval=f"{scrape_s}s", scrape_timeout="20s",
        evaluation_interval=f"{RULE_INTERVAL_S}s", bmcs=targets.bmcs,
    )  # fmt: skip
    path = write_yaml(stack.workdir / "prometheus.yml", config)
    url = endpoint.url
    began, started_at = time.perf_counter(), time.time()
    # the month of report rules' series before the history is kept (15 days by default)
    argv = prometheus_argv("prometheus", path, data, endpoint, [RETENTION])
    stack.spawn("prometheus", argv, f"{url}/-/ready")
    ready_s = time.perf_counter() - began
    groups = rt.rule_groups(rule_files)
    iterations = "prometheus_rule_group_iterations_total"

    def last_durations() -> dict[str, float]:
        return m.rule_group_seconds(m.scrape_metrics(url))

    readings = rt.rule_readings(url, iterations, last_durations, groups, rule_readings)
    # the rules' series over the history, before the live minutes' first evaluation
    recorded = r.recorded_history(url, data, history_start, started_at,
                                  rt.recorded_intervals(rule_files),
                                  before_s=before_s)  # fmt: skip
    panels = t.time_panels(url, CLUSTER, scrape_s, RANGES_S)
    report = t.report_growth(stack, url, CLUSTER, hours, "report-prometheus",
                             month=bool(before_s))  # fmt: skip
    # the groups' cost with Prometheus scraping and evaluating alone; before the global
    # server, which federates from it every minute
    cores = stack.sampler.cores_used()
    settled = rt.settled_readings(url, iterations, last_durations, groups, rule_readings)
    cores_during_rules = cores()
    costs = t.rule_costs(rt.with_slower(settled, readings), groups)
    federation = measure_federation(stack, endpoint, rule_dir)
    metrics = m.scrape_metrics(url)
    figures = {
        "ready_seconds": ready_s,
        "recorded_history": recorded,
        "report": report,
        "federation": federation,
        "head_series": m.one(metrics, "prometheus_tsdb_head_series"),
        "rules": t.as_dicts(costs),
        "rules_read": rt.SETTLED,
        "cores_during_rules": cores_during_rules,
        "panels": t.as_dicts(panels),
        "peak_rss_mb": stack.sampler.peaks.get("prometheus", 0.0),
    }
    stop(stack.processes.pop("prometheus"))
    return figures


# the series an agent exports: a recording rule's name has a colon, and each engine
# records its own (Prometheus' blocks hold its rules' series by the time vmctl reads them)
SCRAPED_NAMES = "[^:]*"


def month_before(hours: float) -> float:
    """How far before the history the report rules' series stand in, so the month's
    report reads them over 30 days (and an hour, for the window's alignment)."""
    return max(0.0, (t.MONTH_DAYS * 24 - hours + 1) * 3600.0)


def vmctl_import(blocks: Path, vm: str, names: str = SCRAPED_NAMES) -> None:
    """The series named as the regular expression `names` from every block in the
    directory `blocks` into VictoriaMetrics at `vm`."""
    vmctl = (
        f"vmctl prometheus --prom-snapshot={shlex.quote(str(blocks))} --vm-addr={vm} -s "
        "--prom-concurrency=2 --vm-concurrency=2 --vm-disable-progress-bar "
        f"--prom-filter-label=__name__ --prom-filter-label-value={shlex.quote(names)}"
    )
    # vmctl insists on a terminal even when silent: util-linux's script gives it one
    with subprocess.Popen(["script", "-qec", vmctl, "/dev/null"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          text=True) as script:  # fmt: skip
        try:
            out, err = script.communicate(timeout=4 * 3600)
        except BaseException:
            # a time-out, or the caller stopped: script runs vmctl in a session of its
            # own (on the terminal it makes), so vmctl outlives a killed script
            _kill_with_children(script.pid)
            raise
    if script.returncode != 0:
        raise RuntimeError(f"vmctl failed: {out[-2000:]}{err[-2000:]}")


def _kill_with_children(pid: int) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        process = psutil.Process(pid)
        for child in [*process.children(recursive=True), process]:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()


def fill_gap(targets: Targets, end_s: float, vm: str, out: Path) -> dict[str, float]:
    """The replaying targets' samples from the history's end to `end_s` into
    VictoriaMetrics at `vm`. It starts scraping after Prometheus' measurement, half an
    hour after the history's end at a thousand nodes: without them its hour-long queries
    read half an hour of nothing, and rules looking back over that time (the straggler
    rules look 15 minutes back) record nothing at first."""
    began = time.perf_counter()
    samples = targets.gap(end_s, out)
    if samples:
        vmctl_import(out, vm)
    shutil.rmtree(out, ignore_errors=True)
    return {"samples": samples, "seconds": time.perf_counter() - began}


def every_target_scraped(url: str, targets: Path, timeout_s: float = 300.0) -> None:
    """Once every replaying target (agents and BMCs) has two samples in the engine: the
    history imported from blocks ends minutes before the live minutes, and rules
    evaluated before every node was scraped would record a part of the fleet
    (VictoriaMetrics answers without its last 30 s, -search.latencyOffset: a target's
    first scrape may not show yet)."""
    files = [*targets.glob("*.json"), *bmc_targets(targets).glob("*.json")]
    nodes = sum(len(json.loads(f.read_text())) for f in files)

    def scraped() -> bool:
        answer = m.query(url, "count(count_over_time(up[5m]) >= 2)")
        return bool(answer) and float(answer[0]["value"][1]) >= nodes

    wait_for(f"{url} to hold two samples of each of {nodes} targets", scraped, timeout_s)


def measure_victoria_metrics(stack: Stack, data: Path, targets: Targets, rule_dir: Path,
                             scrape_s: int, rule_readings: int, history_start: float,
                             hours: float, before_s: float) -> dict[str, Any]:  # fmt: skip
    """VictoriaMetrics' turn; `before_s` as measure_prometheus'."""
    vm_endpoint = Endpoint.free()
    vm = vm_endpoint.url
    vm_argv = victoria_metrics_argv(vm_endpoint, stack.workdir / "vm-data")
    stack.spawn("victoria-metrics", vm_argv, f"{vm}/health")
    began = time.perf_counter()
    vmctl_import(data, vm)
    import_s = time.perf_counter() - began
    scrape_path = write_yaml(stack.workdir / "vmagent.yml",
                             vmagent_scrape_config(targets.directory, f"{scrape_s}s", "20s",
                                                   targets.bmcs))  # fmt: skip
    # both shards of deploy/scale's vmagent@.service, each scraping half the targets
    live_from = time.time()
    for shard in range(VMAGENT_SHARDS):
        agent = Endpoint.free()
        argv = vmagent_argv(shard, agent, scrape_path, vm, stack.workdir / f"vmagent-{shard}")
        stack.spawn(f"vmagent-{shard}", argv, f"{agent.url}/health")
    gap = fill_gap(targets, live_from, vm, stack.workdir / "gap")
    every_target_scraped(vm, targets.directory)
    alert = Endpoint.free()
    rule_files = [rule_dir / alerts_build.PROMETHEUS_RECORDING,
                  rule_dir / alerts_build.VMALERT_ALERTS]  # fmt: skip
    # alerts go to a closed loopback port: what fires is not measured here. vmalert
    # evaluates at its time truncated to the group's interval: a report group's first
    # evaluation then reads up to five minutes before vmalert started, before the live
    # minutes that VictoriaMetrics, fed its history by vmctl an hour late, began just
    # now, and records a part of the fleet (or none), which the stand-in would hold
    # over the month; unaligned, it reads the live minutes. The cost is the same.
    unaligned = {"datasource.queryTimeAlignment": "false"}
    vmalert = vmalert_argv(alert, rule_files, vm, "http://127.0.0.1:9", unaligned)
    rules_from = time.time()
    stack.spawn("vmalert", vmalert, f"{alert.url}/health")
    groups = rt.rule_groups(rule_files)
    iterations = "vmalert_iteration_duration_seconds_count"
    readings = rt.rule_readings(
        alert.url, iterations,
        lambda: m.vmalert_group_seconds(m.scrape_metrics(alert.url)), groups, rule_readings,
    )  # fmt: skip
    # vmalert's rules read another rule's series an evaluation after it was recorded:
    # the straggler rules' last series come minutes after the first evaluation
    chains = rt.chain_depths(rule_files)
    chained_s = rt.chained_through(alert.url, iterations, chains, RULE_INTERVAL_S)
    standing_in = stack.workdir / "recorded-vm"
    standing_in.mkdir()
    recorded = r.recorded_history(vm, standing_in, history_start, rules_from,
                                  rt.recorded_intervals(rule_files),
                                  lambda blocks: vmctl_import(blocks, vm, ".*"),
                                  before_s=before_s,
                                  written=lambda: m.vmalert_written_series(
                                      m.scrape_metrics(alert.url)))  # fmt: skip
    panels = t.time_panels(vm, CLUSTER, scrape_s, RANGES_S)
    report = t.report_growth(stack, vm, CLUSTER, hours, "report-victoria-metrics",
                             month=bool(before_s))  # fmt: skip
    # vmalert's means are over its life: read from where the settled evaluations begin
    window_start: list[m.Metrics] = []
    storage_before = m.scrape_metrics(vm)
    cores = stack.sampler.cores_used()
    settled = rt.settled_readings(
        alert.url, iterations,
        lambda: m.vmalert_group_seconds(m.scrape_metrics(alert.url), since=window_start[0]),
        groups, rule_readings,
        settle=lambda: window_start.append(m.scrape_metrics(alert.url)),
    )  # fmt: skip
    cores_during_rules = cores()
    merges = m.merging(m.scrape_metrics(vm), since=storage_before)
    costs = t.rule_costs(rt.with_slower(settled, readings), groups)
    return {
        "import_seconds": import_s,
        "merges_during_rules": merges,
        "live_from": live_from,
        "gap": gap,
        "chains": chains,
        "chained_seconds": chained_s,
        "recorded_history": recorded,
        "report": report,
        "data_bytes": m.du_bytes(stack.workdir / "vm-data"),
        "rules": t.as_dicts(costs),
        "rules_read": rt.SETTLED,
        "cores_during_rules": cores_during_rules,
        "panels": t.as_dicts(panels),
        "peak_rss_mb": stack.sampler.peaks.get("victoria-metrics", 0.0),
    }
