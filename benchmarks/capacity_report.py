"""What `nvwatch report` costs over a month of the seed's 124-node cluster.

    python -m benchmarks.capacity_report [--nodes 124] [--days 30] [--step 15m]

Generates the history with `nvwatch simulate history`'s code (agent.sim.history),
backfills it with promtool into a fresh TSDB, starts Prometheus on it on 127.0.0.1, then
times the report itself (queries, analysis, plots, files) end to end. Target (issue 16):
under 2 minutes. The generation and backfill are timed too, but are set-up, not the
figure judged. A function, not a timed test: the suite never fails on speed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.durations import parse_duration
from agent.report.build import ReportOptions, run_report
from agent.report.prom import Connection
from agent.sim.history import generate
from agent.sim.history_plan import plan_history
from agent.sim.ports import free_port
from mixin.config import MixinConfig

TARGET_SECONDS = 120.0
HOST = "127.0.0.1"
EXAMPLE_CONFIG = Path(__file__).resolve().parent.parent / "deploy" / "mixin.example.yaml"


@dataclasses.dataclass(frozen=True)
class ReportCost:
    nodes: int
    days: float
    generate_seconds: float
    backfill_seconds: float
    report_seconds: float
    files: int

    @property
    def passes(self) -> bool:
        return self.report_seconds < TARGET_SECONDS

    def summary(self) -> str:
        verdict = "pass" if self.passes else "MISS"
        return (
            f"nvwatch report over {self.days:g} days of {self.nodes} nodes: "
            f"{self.report_seconds:.1f} s (target < {TARGET_SECONDS:.0f} s: {verdict}), "
            f"{self.files} files; set-up: history {self.generate_seconds:.0f} s, "
            f"promtool backfill {self.backfill_seconds:.0f} s"
        )


def measure_report_cost(
    nodes: int = 124, days: float = 30.0, step: float = 900.0, workdir: Path | None = None
) -> ReportCost:
    with contextlib.ExitStack() as stack:
        work = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory("nvwatch-report")))
        end = float(int(time.time() // 3600 * 3600))
        plan = plan_history(nodes=nodes, days=days, step=step, end=end)
        history = work / "history.om"
        started = time.monotonic()
        generate(plan, history)
        generated = time.monotonic() - started
        started = time.monotonic()
        _backfill(history, work / "tsdb", days)
        backfilled = time.monotonic() - started
        history.unlink()
        with _prometheus(work, step) as url:
            options = ReportOptions(
                connection=Connection(url),
                range_text=f"{int(days)}d",
                end_text=str(int(end)),
                step_text=None,
                cluster=None,
                config=MixinConfig.from_yaml(EXAMPLE_CONFIG),
                out=work / "report",
            )
            started = time.monotonic()
            written = run_report(options, progress=None)
            reported = time.monotonic() - started
        return ReportCost(nodes, days, generated, backfilled, reported, len(written))


def _backfill(history: Path, tsdb: Path, days: float) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("promtool is not installed (Debian: prometheus)")
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            # one block for the range: promtool reads its input once per block
            f"--max-block-duration={int(days * 24) + 48}h",
            "openmetrics",
            "--quiet",
            str(history),
            str(tsdb),
        ],
        check=True,
        capture_output=True,
    )


@contextlib.contextmanager
def _prometheus(work: Path, step: float) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed")
    config = work / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\n")
    port = free_port(HOST)
    with (work / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={work / 'tsdb'}",
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
        deadline = time.monotonic() + 120
        while not _ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"prometheus did not start; see {work / 'prometheus.log'}")
            time.sleep(0.5)
        yield url
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=124)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--step", default="15m", help="the history's scrape interval")
    args = parser.parse_args()
    cost = measure_report_cost(args.nodes, args.days, parse_duration(args.step, "--step"))
    print(cost.summary())
    sys.exit(0 if cost.passes else 1)


if __name__ == "__main__":
    main()
