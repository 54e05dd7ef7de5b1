"""`nvwatch report` measured again on the Prometheus data directory a 1,000-node run
left (copied aside while it ran), its figure replacing the run's: for a report changed
after the run, without writing the day again. The section says the figure was measured
apart.

    python -m benchmarks.thousand.report_again --data DIR --json docs/scale-thousand.json \\
        [--out docs/scale.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import tempfile
from pathlib import Path

from benchmarks.scale.stack import Stack
from benchmarks.thousand.measure import report_growth
from benchmarks.thousand.section import write_section
from nvwatch.sim.bulk.write import CLUSTER
from tests.e2e.loopback import Endpoint
from tests.e2e.service_commands import prometheus_argv, prometheus_config, write_yaml


def measure(data: Path, hours: float, end: float, parent: Path | None) -> dict[str, object]:
    """The report over `hours` up to `end` from a Prometheus opened on `data`."""
    work = Path(tempfile.mkdtemp(prefix="nvwatch-report-again-", dir=parent))
    stack = Stack(work)
    try:
        (work / "targets").mkdir()
        config = prometheus_config(rule_files=[], targets=work / "targets",
                                   scrape_interval="1h", scrape_timeout="10s",
                                   evaluation_interval="1h")  # fmt: skip
        endpoint = Endpoint.free()
        argv = prometheus_argv("prometheus", write_yaml(work / "p.yml", config), data, endpoint)
        stack.sampler.start()
        stack.spawn("prometheus", argv, f"{endpoint.url}/-/ready")
        cost = report_growth(stack, endpoint.url, CLUSTER, hours, "report-prometheus", end)
    finally:
        stack.close()
        shutil.rmtree(work, ignore_errors=True)
    return {**cost, "apart": datetime.date.today().isoformat()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the run's Prometheus data")
    parser.add_argument("--json", type=Path, required=True, help="the run's figures")
    parser.add_argument("--out", type=Path, help="write the section of this document")
    parser.add_argument("--workdir", type=Path, help="parent of the scratch directory")
    args = parser.parse_args(argv)
    figures = json.loads(args.json.read_text())
    end = figures["generation"]["history_end"]
    report = measure(args.data, figures["hours"], end, args.workdir)
    figures["engines"]["prometheus"]["report"] = report
    args.json.write_text(json.dumps(figures, indent=1) + "\n")
    if args.out:
        write_section(args.out, figures)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
