"""What `nvwatch report` costs over a month of the seed's 124-node cluster.

    python -m benchmarks.capacity_report [--nodes 124] [--days 30] [--step 15m]
                                         [--out docs/report-cost.md]
    python -m benchmarks.capacity_report --tsdb DIR/tsdb   # reuse history_cost.py --keep DIR

Generates the history with `nvwatch simulate history`'s code (nvwatch.sim.history.history),
backfills it with promtool into a fresh TSDB, starts Prometheus on it on 127.0.0.1, then
times the report itself (queries, analysis, plots, files) end to end. Target: under 2
minutes. Generation and backfill are set-up, timed but not judged.

Besides wall time it records the CPU seconds of the report process and of Prometheus
during the report: on a shared machine wall time follows the neighbours' load, CPU time
much less, and their sum over the cores is what the report needs of an idle machine.
A function, not a timed test: the suite never fails on speed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import history_cost
from benchmarks.common import cpu_model, tool_version
from nvwatch.common.durations import parse_duration
from nvwatch.common.http_connection import Connection
from nvwatch.mixin.config import MixinConfig
from nvwatch.report.build import ReportOptions, run_report
from nvwatch.sim.ports import free_port

TARGET_SECONDS = 120.0
HOST = "127.0.0.1"
EXAMPLE_CONFIG = Path(__file__).resolve().parent.parent / "deploy" / "mixin.example.yaml"


@dataclasses.dataclass(frozen=True)
class ReportCost:
    nodes: int | None  # None: a reused TSDB of unknown size
    days: float
    generate_seconds: float | None
    backfill_seconds: float | None
    report_seconds: float
    report_cpu_seconds: float
    prometheus_cpu_seconds: float
    files: int
    # set-up figures of an end-to-end run (history_cost.run's), None for a reused TSDB
    setup: dict[str, float] | None = None
    step_seconds: float = 900.0

    @property
    def passes(self) -> bool:
        return self.report_seconds < TARGET_SECONDS

    @property
    def idle_machine_seconds(self) -> float:
        """Wall time on an otherwise idle machine of this many cores, at best: the CPU
        work spread over the cores, but never less than the report's own (mostly one
        thread: parsing and drawing)."""
        cores = os.cpu_count() or 1
        total = self.report_cpu_seconds + self.prometheus_cpu_seconds
        return max(self.report_cpu_seconds, total / cores)

    def summary(self) -> str:
        verdict = "pass" if self.passes else "MISS"
        fleet = f"{self.nodes} nodes" if self.nodes else "a reused TSDB"
        setup = (
            f"; set-up: history {self.generate_seconds:.0f} s, "
            f"backfill {self.backfill_seconds:.0f} s"
            if self.generate_seconds is not None and self.backfill_seconds is not None
            else ""
        )
        return (
            f"nvwatch report over {self.days:g} days of {fleet}: {self.report_seconds:.1f} s "
            f"wall (target < {TARGET_SECONDS:.0f} s: {verdict}); CPU: report "
            f"{self.report_cpu_seconds:.1f} s, Prometheus {self.prometheus_cpu_seconds:.1f} s "
            f"(idle {os.cpu_count()}-core machine: about {self.idle_machine_seconds:.0f} s); "
            f"{self.files} files{setup}"
        )


def measure_report_cost(
    nodes: int = 124, days: float = 30.0, step: float = 900.0, workdir: Path | None = None
) -> ReportCost:
    """Generate, backfill and report: the whole benchmark. The history is generated and
    backfilled a few nodes at a time (benchmarks/history_cost.py): a month of 124 nodes
    as one file would be tens of gigabytes on disk."""
    with contextlib.ExitStack() as stack:
        work = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory("nvwatch-report")))
        work.mkdir(parents=True, exist_ok=True)
        figures = history_cost.run(nodes, days, step, work)
        cost = measure_report_on(work / "tsdb", figures["end_unix"], days, step, work)
        return dataclasses.replace(
            cost,
            nodes=nodes,
            generate_seconds=figures["generate_wall_s"],
            backfill_seconds=figures["backfill_wall_s"],
            setup=figures,
            step_seconds=step,
        )


def measure_report_on(tsdb: Path, end: float, days: float, step: float, work: Path) -> ReportCost:
    """Time the report alone against a Prometheus started on an existing backfill."""
    with _prometheus(tsdb, work, step) as (url, server):
        options = ReportOptions(
            connection=Connection(url),
            range_text=f"{int(days)}d",
            end_text=str(int(end)),
            step_text=None,
            cluster=None,
            config=MixinConfig.from_yaml(EXAMPLE_CONFIG),
            out=work / "report",
        )
        server_cpu = _cpu(server)
        own_cpu = time.process_time()
        started = time.monotonic()
        written = run_report(options, progress=None)
        reported = time.monotonic() - started
        own_cpu = time.process_time() - own_cpu
        server_cpu = _cpu(server) - server_cpu
    return ReportCost(
        None, days, None, None, reported, own_cpu, server_cpu, len(written), step_seconds=step
    )


def render_markdown(cost: ReportCost, command: str) -> str:
    """docs/report-cost.md: the run's figures, each as measured."""
    verdict = "PASS" if cost.passes else "**MISS**"
    fleet = f"{cost.nodes} simulated nodes" if cost.nodes else "a reused backfill"
    rows = [
        ("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        ("machine", f"{cpu_model()}, {os.cpu_count()} cores"),
        ("Prometheus", tool_version(["prometheus", "--version"])),
        ("command", f"`{command}`"),
        ("history", f"{cost.days:g} days of {fleet}, one sample per {cost.step_seconds:g} s"),
    ]
    if cost.setup is not None:
        setup = cost.setup
        rows += [
            ("samples backfilled", f"{setup['samples']:,.0f}"),
            ("generate (set-up)", f"{setup['generate_wall_s']:.0f} s wall, "
             f"{setup['generate_cpu_s']:.0f} s CPU"),
            ("backfill with promtool (set-up)", f"{setup['backfill_wall_s']:.0f} s wall, "
             f"{setup['backfill_cpu_s']:.0f} s CPU"),
        ]  # fmt: skip
    rows += [
        ("report, wall", f"**{cost.report_seconds:.1f} s** (target < {TARGET_SECONDS:.0f} s: "
         f"{verdict})"),
        ("report process CPU", f"{cost.report_cpu_seconds:.1f} s"),
        ("Prometheus CPU during the report", f"{cost.prometheus_cpu_seconds:.1f} s"),
        ("files written", f"{cost.files}"),
        ("load average at the end (1, 5, 15 min)",
         ", ".join(f"{x:.2f}" for x in os.getloadavg())
         + " (other work on the machine slows the wall times, less the CPU times)"),
    ]  # fmt: skip
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    return f"""# What `nvwatch report` costs

Written by `benchmarks/capacity_report.py`; every figure below comes from the run
described here. Re-run it to refresh this file; do not edit numbers by hand.

The benchmark generates the history with `nvwatch simulate history`'s code, backfills
it into a fresh TSDB with `promtool tsdb create-blocks-from openmetrics` a few nodes at
a time, starts Prometheus on it on 127.0.0.1 and times `nvwatch report` end to end:
every range query, the analysis, the plots and the files. Generation and backfill are
set-up, timed but not judged.

| | |
|---|---|
{table}
"""


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


@contextlib.contextmanager
def _prometheus(tsdb: Path, work: Path, step: float) -> Iterator[tuple[str, psutil.Process]]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed")
    work.mkdir(parents=True, exist_ok=True)
    config = work / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\n")
    port = free_port(HOST)
    with (work / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tsdb}",
                "--storage.tsdb.retention.time=100y",
                f"--query.lookback-delta={int(step + 60)}s",
                f"--web.listen-address={HOST}:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 300
        while not _ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"prometheus did not start; see {work / 'prometheus.log'}")
            time.sleep(0.5)
        yield url, psutil.Process(process.pid)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=124)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--step", default="15m", help="the history's scrape interval")
    parser.add_argument("--tsdb", type=Path, help="reuse this backfilled TSDB (needs --end)")
    parser.add_argument(
        "--end",
        type=float,
        help=f"unix time the reused history ends (default: the {history_cost.END_FILE} file "
        "benchmarks/history_cost.py --keep wrote beside the TSDB)",
    )
    parser.add_argument("--out", type=Path, help="also write the figures as markdown here")
    args = parser.parse_args()
    step = parse_duration(args.step, "--step")
    if args.tsdb is not None:
        end_file = args.tsdb.parent / history_cost.END_FILE
        if args.end is None and end_file.exists():
            args.end = float(end_file.read_text())
        if args.end is None:
            parser.error(f"--tsdb needs --end (no {end_file})")
        with tempfile.TemporaryDirectory("nvwatch-report") as work:
            cost = measure_report_on(args.tsdb, args.end, args.days, step, Path(work))
    else:
        cost = measure_report_cost(args.nodes, args.days, step)
    print(cost.summary())
    if args.out is not None:
        command = shlex.join(["python", "-m", "benchmarks.capacity_report", *sys.argv[1:]])
        args.out.write_text(render_markdown(cost, command), encoding="utf-8")
    sys.exit(0 if cost.passes else 1)


if __name__ == "__main__":
    main()
