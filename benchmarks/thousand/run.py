"""A thousand nodes for a day, measured: the bulk history written into a Prometheus
block, then each engine in turn (Prometheus, then VictoriaMetrics fed the same block by
vmctl) scraping the live minutes from replaying targets and evaluating the mixin's
rules, with every dashboard panel timed over 1 h and 24 h.

`python -m benchmarks.thousand.run --nodes 1000 --hours 24` writes the figures as JSON
(`--json`) and its section of docs/scale.md (`--out`); `--nodes 50 --hours 1` is the
small version tests/benchmarks runs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import resource
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
from benchmarks.thousand.replay import (
    ReplayProcess,
    bmc_targets,
    replay_node,
    write_gap,
    write_targets,
)
from benchmarks.thousand.section import this_machine, write_section
from nvwatch.alerts import build as alerts_build
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.bulk.write import (
    CLUSTER,
    BulkPlan,
    BulkResult,
    node_specs,
    write_bulk_history,
)
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
TRIAL_NODES = 3  # one of each profile of the mix
# a larger index sorts and writes a little slower per series; a history that ends early
# leaves a gap before the live minutes, one that ends late is waited for
WRITING_MARGIN = 1.0
RULE_READINGS = 4  # each group's evaluation time read after four evaluations, at start and settled
RULE_INTERVAL_S = int(r.MINUTE_S)  # the mixin's evaluation interval, which the engines run at
RETENTION = "--storage.tsdb.retention.time=90d"  # as deploy/scale's VictoriaMetrics
VMAGENT_SHARDS = 2  # deploy/scale's vmagent@.service: -promscrape.cluster.membersCount


@dataclass
class Figures:
    nodes: int
    hours: float
    scrape_s: int
    nvlink_detail: str
    report_interval: str = MixinConfig.report_interval  # the report rules' interval
    date: str = field(default_factory=lambda: datetime.date.today().isoformat())
    generation: dict[str, Any] = field(default_factory=dict)
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=this_machine)


def generate(plan: BulkPlan, data: Path) -> tuple[BulkResult, dict[str, Any]]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    began = time.perf_counter()

    def progress(done: int, total: int) -> None:
        if done % 100 == 0 or done == total:
            print(f"thousand: {done}/{total} nodes, {time.perf_counter() - began:.0f} s",
                  flush=True)  # fmt: skip

    result = write_bulk_history(plan, data, progress)
    after = resource.getrusage(resource.RUSAGE_SELF)
    block_bytes = m.du_bytes(result.block)
    return result, {
        "seconds": result.seconds,
        "cpu_seconds": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "peak_rss_mb": after.ru_maxrss / 1024,
        "series": result.series,
        "samples": result.samples,
        "block_bytes": block_bytes,
        "profiles": result.profiles,
        "jobs": result.jobs,
        "bmc_series": sum(int(result.templates[s.profile].bmc.sum()) for s in node_specs(plan)),
    }


@dataclass(frozen=True)
class Targets:
    """The replaying targets: the directory of their file_sd groups (write_targets) and
    the BMCs' probe at the replaying server."""

    directory: Path
    bmcs: BmcProbe
    # write_gap for this fleet: what the targets answered from the history's end on
    gap: Callable[[float, Path], int]


def start_replay(plan: BulkPlan, result: BulkResult, work: Path) -> tuple[ReplayProcess, Targets]:
    templates = result.templates
    since = plan.last_sample_s
    specs = node_specs(plan)
    nodes, bmcs = {}, {}
    for s in specs:
        template, tail = templates[s.profile], result.tails[s.name]
        running = result.running[s.name]
        nodes[s.name], bmcs[s.bmc] = replay_node(template, s, tail, plan.step_s, since, running)
    server = ReplayProcess(nodes, bmcs)
    directory = work / "targets"
    write_targets(server.address, specs, directory)
    probe = BmcProbe(bmc_targets(directory), server.address)
    return server, Targets(directory, probe, functools.partial(write_gap, plan, result))


def rules(work: Path, report_interval: str) -> Path:
    directory = work / "rules"
    alerts_build.write(directory, MixinConfig(report_interval=report_interval))
    return directory


def measure_prometheus(stack: Stack, data: Path, targets: Targets, rule_dir: Path,
                       scrape_s: int, rule_readings: int, history_start: float,
                       hours: float) -> dict[str, Any]:  # fmt: skip
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
                                  before_s=month_before(hours))  # fmt: skip
    panels = t.time_panels(url, CLUSTER, scrape_s, RANGES_S)
    report = t.report_growth(stack, url, CLUSTER, hours, "report-prometheus",
                             month=bool(month_before(hours)))  # fmt: skip
    # the groups' cost with Prometheus scraping and evaluating alone; before the global
    # server, which federates from it every minute
    settled = rt.settled_readings(url, iterations, last_durations, groups, rule_readings)
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
                             hours: float) -> dict[str, Any]:  # fmt: skip
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
                                  before_s=month_before(hours),
                                  written=lambda: m.vmalert_written_series(
                                      m.scrape_metrics(alert.url)))  # fmt: skip
    panels = t.time_panels(vm, CLUSTER, scrape_s, RANGES_S)
    report = t.report_growth(stack, vm, CLUSTER, hours, "report-victoria-metrics",
                             month=bool(month_before(hours)))  # fmt: skip
    # vmalert's means are over its life: read from where the settled evaluations begin
    window_start: list[m.Metrics] = []
    settled = rt.settled_readings(
        alert.url, iterations,
        lambda: m.vmalert_group_seconds(m.scrape_metrics(alert.url), since=window_start[0]),
        groups, rule_readings,
        settle=lambda: window_start.append(m.scrape_metrics(alert.url)),
    )  # fmt: skip
    costs = t.rule_costs(rt.with_slower(settled, readings), groups)
    return {
        "import_seconds": import_s,
        "live_from": live_from,
        "gap": gap,
        "chains": chains,
        "chained_seconds": chained_s,
        "recorded_history": recorded,
        "report": report,
        "data_bytes": m.du_bytes(stack.workdir / "vm-data"),
        "rules": t.as_dicts(costs),
        "rules_read": rt.SETTLED,
        "panels": t.as_dicts(panels),
        "peak_rss_mb": stack.sampler.peaks.get("victoria-metrics", 0.0),
    }


def writing_seconds(nodes: int, hours: float, scrape_s: int, nvlink_detail: str,
                    work: Path) -> float:  # fmt: skip
    """How long writing the history will take, from a trial of one node per profile
    (its whole writing, chunks and index, less rendering the profiles, which happens
    once): the history then ends about when the replaying targets take over, with
    neither a gap before them nor minutes of it still to come (Prometheus refuses a
    scraped sample older than its newest block's end)."""
    trial = BulkPlan(TRIAL_NODES, time.time(), hours, scrape_s, nvlink_detail)
    written = write_bulk_history(trial, work / "trial")
    shutil.rmtree(work / "trial")
    per_node = max(0.0, written.seconds - written.render_seconds) / TRIAL_NODES
    return written.render_seconds + per_node * nodes * WRITING_MARGIN


def run(nodes: int, hours: float, scrape_s: int, engines: tuple[str, ...],
        nvlink_detail: str, rule_readings: int = RULE_READINGS,
        parent: Path | None = None,
        report_interval: str = MixinConfig.report_interval,
        keep_data: Path | None = None, keep_logs: Path | None = None,
        checkpoint: Callable[[Figures], None] | None = None) -> Figures:  # fmt: skip
    """The whole measurement in a directory of its own on disk (a day of a thousand
    nodes is gigabytes: not for a tmpfs that Prometheus' memory needs), removed after;
    `keep_data`: where Prometheus' data directory goes instead, to measure the report
    again on it (benchmarks.thousand.report_again); `keep_logs`: a directory for each
    process' log (the engines', vmalert's), to read what a run met; `checkpoint`: called
    with the figures after each engine's turn, so that a run stopped in the second
    engine's hour keeps the first's."""
    figures = Figures(nodes, hours, scrape_s, nvlink_detail, report_interval)
    work = Path(tempfile.mkdtemp(prefix="nvwatch-thousand-", dir=parent))
    stack = Stack(work)
    server = None
    try:
        # Prometheus' data directory; vmctl reads its blocks afterwards (the history's
        # block is left as written: a day-long block is past every compaction range)
        data = work / "prometheus-data"
        end = time.time() + writing_seconds(nodes, hours, scrape_s, nvlink_detail, work)
        plan = BulkPlan(nodes, end, hours, scrape_s, nvlink_detail)
        result, figures.generation = generate(plan, data)
        history_end = plan.last_sample_s
        # a history written faster than foreseen ends after now: Prometheus would refuse
        # every live sample, and the rules' outputs, older than its newest block's end
        time.sleep(max(0.0, history_end + 1.0 - time.time()))
        server, targets = start_replay(plan, result, work)
        # where the history ends and the live minutes begin: apart by a gap, if any
        figures.generation["history_end"] = history_end
        figures.generation["live_from"] = time.time()
        rule_dir = rules(work, report_interval)
        stack.sampler.start()
        for engine, measure in (("prometheus", measure_prometheus),
                                ("victoria-metrics", measure_victoria_metrics)):  # fmt: skip
            if engine not in engines:
                continue
            try:
                figures.engines[engine] = measure(
                    stack, data, targets, rule_dir, scrape_s, rule_readings,
                    plan.grid.start_ms / 1000.0, hours,
                )  # fmt: skip
            # an engine that fails leaves its error, and the other engine's hour of figures
            except Exception as exc:
                figures.engines[engine] = {"error": f"{type(exc).__name__}: {exc}"}
                # stopped, not left to weigh on the next engine's figures
                for name in [n for n in stack.processes if n.startswith(engine)]:
                    stop(stack.processes.pop(name))
            if checkpoint is not None:
                checkpoint(figures)
    finally:
        stack.close()
        if server is not None:
            server.close()
        if keep_data is not None and (work / "prometheus-data").is_dir():
            shutil.move(work / "prometheus-data", keep_data)
        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            for log in work.glob("*.log"):
                shutil.copy(log, keep_logs / log.name)
        shutil.rmtree(work, ignore_errors=True)
    return figures


def figures_json(figures: Figures) -> str:
    return json.dumps(figures.__dict__, indent=1, default=str)


def write_figures(path: Path, figures: Figures) -> None:
    path.write_text(figures_json(figures) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--scrape", type=int, default=30, help="scrape interval, seconds")
    parser.add_argument("--nvlink-detail", default="link", choices=("link", "gpu"))
    parser.add_argument("--engines", default="prometheus,victoria-metrics")
    parser.add_argument("--rule-readings", type=int, default=RULE_READINGS)
    parser.add_argument("--report-interval", default=MixinConfig.report_interval,
                        help="the report rules' interval (report_interval)")  # fmt: skip
    parser.add_argument("--workdir", type=Path, help="parent of the scratch directory")
    parser.add_argument("--keep-data", type=Path,
                        help="move Prometheus' data directory here at the end")  # fmt: skip
    parser.add_argument("--keep-logs", type=Path,
                        help="copy every process' log into this directory at the end")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--out", type=Path, help="write the section of this document")
    parser.add_argument("--render", type=Path, help="write --out from this --json's figures")
    parser.add_argument("--compared", action="store_true",
                        help="--render them as the run at the other --nvlink-detail")  # fmt: skip
    args = parser.parse_args(argv)
    # stopped (kill, a time-out), the run still stops its engines and removes its
    # gigabytes: as Ctrl-C, through run's finally; they run in sessions of their own
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.render:
        if not args.out:
            parser.error("--render needs --out")
        write_section(args.out, json.loads(args.render.read_text()), args.compared)
        return 0
    # found missing before an hour of work, not at its end
    if args.workdir and not args.workdir.is_dir():
        parser.error(f"--workdir {args.workdir}: no such directory")
    if args.json and not args.json.parent.is_dir():
        parser.error(f"--json {args.json}: no directory {args.json.parent}")
    checkpoint = functools.partial(write_figures, args.json) if args.json else None
    figures = run(args.nodes, args.hours, args.scrape, tuple(args.engines.split(",")),
                  args.nvlink_detail, args.rule_readings, args.workdir,
                  args.report_interval, args.keep_data, args.keep_logs, checkpoint)  # fmt: skip
    if args.json:
        write_figures(args.json, figures)
    failed = [f"{name}: {e['error']}" for name, e in figures.engines.items() if "error" in e]
    if failed:
        print(f"thousand: failed ({'; '.join(failed)}); the rest of the figures are in the JSON")
        return 1
    if args.out:
        write_section(args.out, figures.__dict__)
    if args.json:
        print(f"thousand: figures in {args.json}")
    else:
        print(figures_json(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
