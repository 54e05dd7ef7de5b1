"""What a simulated month of a fleet costs to generate and backfill.

    python benchmarks/history_cost.py [--nodes 124] [--days 30] [--step 10m] [--keep DIR]

Generates the history (`nvwatch simulate history`'s code), backfills it with promtool
and prints the wall and CPU time of each, the samples and the file size. With --keep the
TSDB (and the ground truth) stay in DIR, for the report's benchmark to run against:
`prometheus --storage.tsdb.path=DIR/tsdb --storage.tsdb.retention.time=2y
--query.lookback-delta=STEP+1m`.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nvwatch.common.durations import parse_duration
from nvwatch.sim.commands.history_backfill import importer, promtool_or_fail
from nvwatch.sim.history.history import generate
from nvwatch.sim.history.plan import plan_history

NODES_PER_FILE = 8  # a part of ~1-2 GB at a time on disk, not the whole month


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _progress(done: int, total: int) -> None:
    print(f"  node {done}/{total}", file=sys.stderr)


END_FILE = "history-end"  # in the kept directory: the unix time the history ends


def run(nodes: int, days: float, step: float, workdir: Path) -> dict[str, float]:
    """Generate and backfill into workdir/tsdb, one part of NODES_PER_FILE nodes at a time.
    The history ends on the hour before now; that time is written to workdir/END_FILE so
    a later report (benchmarks/capacity_report.py --tsdb) queries the same range."""
    end = float(int(time.time() // 3600 * 3600))
    plan = plan_history(nodes=nodes, days=days, step=step, end=end)
    (workdir / END_FILE).write_text(f"{end:.0f}\n")
    history = workdir / "history.om"
    backfill = {"wall": 0.0, "cpu": 0.0, "bytes": 0.0}
    # what `simulate history --backfill` does with each part: import it, then delete it
    import_part = importer(promtool_or_fail(), workdir / "tsdb", days)

    def backfilled(path: Path) -> None:
        """Each part into the TSDB as soon as it is written, then gone: one part on disk
        at a time (Prometheus merges the parts' side-by-side blocks)."""
        wall, cpu = time.monotonic(), _cpu()
        backfill["bytes"] += path.stat().st_size
        import_part(path)
        backfill["wall"] += time.monotonic() - wall
        backfill["cpu"] += _cpu() - cpu

    wall, cpu = time.monotonic(), _cpu()
    result = generate(
        plan, history, nodes_per_file=NODES_PER_FILE, progress=_progress, on_file=backfilled
    )
    total_wall, total_cpu = time.monotonic() - wall, _cpu() - cpu
    return {
        "generate_wall_s": total_wall - backfill["wall"],
        "generate_cpu_s": total_cpu - backfill["cpu"],
        "backfill_wall_s": backfill["wall"],
        "backfill_cpu_s": backfill["cpu"],
        "samples": float(result.samples),
        "file_mib": backfill["bytes"] / 2**20,
        "end_unix": end,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=124)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--step", default="10m")
    parser.add_argument("--keep", type=Path, help="keep the TSDB and ground truth here")
    args = parser.parse_args(argv)
    if shutil.which("promtool") is None:
        print("history_cost: promtool is not installed", file=sys.stderr)
        return 2
    step = parse_duration(args.step, "step")
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="nvwatch-history-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        figures = run(args.nodes, args.days, step, workdir)
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"history of {args.nodes} nodes, {args.days:g} days, step {args.step}:")
    for name, value in figures.items():
        print(f"  {name:<16} {value:,.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
