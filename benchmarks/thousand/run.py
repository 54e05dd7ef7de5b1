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
import datetime
import functools
import json
import resource
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import stop
from benchmarks.scale import measure as m
from benchmarks.scale.stack import Stack
from benchmarks.thousand.engines import (
    Targets,
    measure_prometheus,
    measure_victoria_metrics,
    month_before,
)
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
    BulkPlan,
    BulkResult,
    node_specs,
    write_bulk_history,
)
from tests.e2e.service_commands import BmcProbe

TRIAL_NODES = 3  # one of each profile of the mix
# a larger index sorts and writes a little slower per series; a history that ends early
# leaves a gap before the live minutes, one that ends late is waited for
WRITING_MARGIN = 1.0
# the engines whose report is also made over 30 days. VictoriaMetrics' month would add
# 1.5 G samples of stand-in to import at 1,000 nodes (vmctl fed it those at 0.3-1 M
# samples/s on this machine), most of its turn: its month is estimated from its shorter
# reports instead, as every engine's was before Prometheus' was measured
MONTH_ENGINES = ("prometheus",)
STOPPED_EXIT = 130  # as a shell reports a run stopped by Ctrl-C
RULE_READINGS = 4  # each group's evaluation time read after four evaluations, at start and settled


@dataclass
class Figures:
    nodes: int
    hours: float
    scrape_s: int
    nvlink_detail: str
    report_interval: str = MixinConfig.report_interval  # the report rules' interval
    date: str = field(default_factory=lambda: datetime.date.today().isoformat())
    month_engines: list[str] = field(default_factory=list)  # those whose month ran
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
        checkpoint: Callable[[Figures], None] | None = None,
        month_engines: tuple[str, ...] = MONTH_ENGINES) -> Figures:  # fmt: skip
    """The whole measurement in a directory of its own on disk (a day of a thousand
    nodes is gigabytes: not for a tmpfs that Prometheus' memory needs), removed after;
    `keep_data`: where Prometheus' data directory goes instead, to measure the report
    again on it (benchmarks.thousand.report_again); `keep_logs`: a directory for each
    process' log (the engines', vmalert's), to read what a run met; `checkpoint`: called
    with the figures after each engine's turn, so that a run stopped in the second
    engine's hour keeps the first's; `month_engines`: those whose report is also made
    over 30 days."""
    figures = Figures(nodes, hours, scrape_s, nvlink_detail, report_interval)
    figures.month_engines = [e for e in engines if e in month_engines]
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
        waited_s = max(0.0, history_end + 1.0 - time.time())
        time.sleep(waited_s)
        figures.generation["waited_s"] = waited_s  # what the foresight above cost
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
                before_s = month_before(hours) if engine in month_engines else 0.0
                figures.engines[engine] = measure(
                    stack, data, targets, rule_dir, scrape_s, rule_readings,
                    plan.grid.start_ms / 1000.0, hours, before_s,
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
    parser.add_argument("--month-engines", default=",".join(MONTH_ENGINES),
                        help="engines whose report is also made over 30 days")  # fmt: skip
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
    if args.out and not args.out.is_file():
        parser.error(f"--out {args.out}: no such file (its section is replaced in it)")
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
    try:
        figures = run(args.nodes, args.hours, args.scrape, tuple(args.engines.split(",")),
                      args.nvlink_detail, args.rule_readings, args.workdir,
                      args.report_interval, args.keep_data, args.keep_logs, checkpoint,
                      tuple(args.month_engines.split(",")))  # fmt: skip
    except KeyboardInterrupt:
        kept = f"; the finished engines' figures are in {args.json}" if args.json else ""
        print(f"thousand: stopped; its processes are stopped and its scratch removed{kept}")
        return STOPPED_EXIT
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
