"""What a job's summary costs where it runs: in slurmctld's path at every job's end.

    python -m benchmarks.job_cost [--hours 24] [--runs 5] [--history-nodes 124]
                                  [--out docs/job-cost.md]

Writes the series of one 64-GPU job (8 DGX nodes x 8 GPUs, every series `nvwatch job`
reads, one sample per 15 s over --hours) as OpenMetrics, backfills them with promtool
into a fresh TSDB and serves it with Prometheus on 127.0.0.1. Then it times the command
the slurmctld epilog runs, `nvwatch job ID --prometheus URL --store --job-store dir:X`,
end to end as a new process (Python's start included), --runs times; measures the
stored summary's size as the AdminComment would hold it; and times `nvwatch jobs --since
30d` over a month of the --history-nodes cluster's jobs in a job store: every job `simulate
history` runs there in 30 days (the placed ones and those drawn from its distributions),
with its id, user, account and times, each stored as the 64-GPU summary (an upper bound:
most held fewer GPUs). Budget: 2 s per summary at 64 GPUs, 4 KB.
A function, not a timed test: the suite never fails on speed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import cpu_model, tool_version
from nvwatch.report.jobs.codec import LIMIT_BYTES, encode_within
from nvwatch.sim.history.jobs import JobEpisode
from nvwatch.sim.history.plan import plan_history
from tests.history.backfill import backfill, serve_tsdb
from tests.report.job_series import SeriesWriter

NODES, GPUS = 8, 8
STEP_S = 15
JOB_ID = "64064"
BUDGET_S = 2.0
NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]


@dataclass(frozen=True)
class JobCost:
    hours: float
    samples: int
    summary_seconds: list[float]
    summary_bytes: int
    stored: int
    history_nodes: int
    list_seconds: float


def write_job(path: Path, first: float, hours: float) -> int:
    """One 64-GPU job over `hours`, its GPUs' utilization and power varied per GPU."""
    w, samples = SeriesWriter(), 0
    energy = {(n, g): 0.0 for n in range(NODES) for g in range(GPUS)}
    for t in range(0, int(hours * 3600) + 1, STEP_S):
        at = first + t
        for (n, g), joules in energy.items():
            labels = {"job": "nvwatch", "cluster": "c1", "instance": f"dgx-{n:03d}", "gpu": str(g)}
            util = 0.5 + 0.4 * ((n * GPUS + g + t // STEP_S) % 7) / 6
            watts = 100 + 500 * util
            energy[n, g] = joules + watts * STEP_S
            owner = {**labels, "scheduler": "slurm", "job_id": JOB_ID, "user": "u", "account": "a"}
            for family, value in (
                ("nvwatch_gpu_utilization_ratio", util),
                ("nvwatch_gpu_sm_active_ratio", util * 0.8),
                ("nvwatch_gpu_tensor_active_ratio", util * 0.5),
                ("nvwatch_gpu_memory_used_bytes", 3e10 + 1e8 * g),
                ("nvwatch_gpu_memory_total_bytes", 8.5e10),
                ("nvwatch_gpu_power_watts", watts),
                ("nvwatch_gpu_power_limit_watts", 700.0),
                ("nvwatch_gpu_energy_joules", energy[n, g]),
            ):
                w.add(family, labels, value, at)
            capped = {**labels, "reason": "sw_power_cap"}
            w.add("nvwatch_gpu_clock_event_active", capped, float(util > 0.85), at)
            w.add("nvwatch_gpu_info", {**labels, "name": "NVIDIA H100 80GB HBM3"}, 1.0, at)
            w.add("nvwatch_gpu_allocation_info", owner, 1.0, at)
            samples += 11
        for n in range(NODES):
            node = f"dgx-{n:03d}"
            bmc = {"job": "nvwatch-bmc", "instance": node, "sensor": "dcmi", "method": "dcmi"}
            w.add("nvwatch_bmc_power_watts", bmc, 6000.0, at)
            for p in range(8):
                port = {"job": "nvwatch", "cluster": "c1", "instance": node}
                port = {**port, "device": f"mlx5_{p}", "port": "1"}
                w.add("nvwatch_ib_port_transmit_bytes", port, 2.0e10 * t, at)
                w.add("nvwatch_ib_port_receive_bytes", port, 2.0e10 * t, at)
            samples += 17
    w.write(path)
    return samples


def month_of_jobs(nodes: int, end: float) -> tuple[JobEpisode, ...]:
    """Every job a 30-day history of `nodes` nodes ending at `end` runs."""
    return plan_history(nodes=nodes, days=30, step=float(STEP_S), end=end).job_episodes


def store_month(store: Path, summary: dict[str, object], jobs: tuple[JobEpisode, ...]) -> None:
    """`summary` stored once per job of the month, as that job (id, owner, life)."""
    for job in jobs:
        mine = {**summary, "job_id": job.job_id, "user": job.user, "account": job.account}
        mine |= {"start": job.start, "end": job.end}
        (store / f"{job.job_id}.json").write_text(json.dumps(mine))


def run(hours: float, runs: int, history_nodes: int) -> JobCost:
    with tempfile.TemporaryDirectory(prefix="nvwatch-job-cost-") as scratch:
        work = Path(scratch)
        first = float(int(time.time()) - hours * 3600 - 600)
        samples = write_job(work / "job.om", first, hours)
        backfill(work / "job.om", work / "tsdb", days=hours / 24 + 1)
        (work / "job.om").unlink()
        store = work / "store"
        with serve_tsdb(work / "tsdb", work, step=STEP_S) as url:
            seconds = []
            for _ in range(runs):
                began = time.perf_counter()
                subprocess.run(
                    [*NVWATCH, "job", JOB_ID, "--prometheus", url, "--store",
                     "--job-store", f"dir:{store}"],
                    check=True, capture_output=True, timeout=120,
                )  # fmt: skip
                seconds.append(time.perf_counter() - began)
        summary = json.loads((store / f"{JOB_ID}.json").read_text())
        size = len(encode_within(summary, limit=10**9))
        (store / f"{JOB_ID}.json").unlink()
        month = month_of_jobs(history_nodes, time.time() - 600)
        store_month(store, summary, month)
        began = time.perf_counter()
        subprocess.run(
            [*NVWATCH, "jobs", "--since", "30d", "--job-store", f"dir:{store}"],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        listed = time.perf_counter() - began
        return JobCost(hours, samples, seconds, size, len(month), history_nodes, listed)


def render(cost: JobCost, argv: str) -> str:
    median, worst = statistics.median(cost.summary_seconds), max(cost.summary_seconds)
    return "\n".join(
        [
            "# What a job's summary costs",
            "",
            f"Generated by `python -m benchmarks.job_cost {argv}` on "
            f"{datetime.date.today().isoformat()} ({cpu_model()}; "
            f"{tool_version(['prometheus', '--version'])}), on this project's shared 2-core "
            "machine: wall times are upper bounds for a quiet controller.",
            "",
            f"One job of {NODES * GPUS} GPUs on {NODES} nodes over {cost.hours:g} h, one "
            f"sample per {STEP_S} s ({cost.samples:,} samples), backfilled into Prometheus.",
            "",
            "| figure | measured | budget |",
            "|---|---|---|",
            f"| `nvwatch job --store` as the slurmctld epilog runs it, median of "
            f"{len(cost.summary_seconds)} (worst) | {median:.2f} s ({worst:.2f} s) | "
            f"{BUDGET_S:g} s: {'within' if worst <= BUDGET_S else '**over**'} |",
            f"| its summary as an AdminComment | {cost.summary_bytes:,} bytes | "
            f"{LIMIT_BYTES:,} bytes: {'within' if cost.summary_bytes <= LIMIT_BYTES else '**over**: rows dropped'} |",  # noqa: E501
            f"| `nvwatch jobs --since 30d` over the {cost.stored:,} jobs of a month of the "
            f"{cost.history_nodes}-node simulated history, each stored as that "
            f"{NODES * GPUS}-GPU summary | {cost.list_seconds:.2f} s | |",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--history-nodes", type=int, default=124)
    parser.add_argument("--out", type=Path, default=Path("docs/job-cost.md"))
    args = parser.parse_args(argv)
    cost = run(args.hours, args.runs, args.history_nodes)
    flags = f"--hours {args.hours:g} --runs {args.runs} --history-nodes {args.history_nodes}"
    args.out.write_text(render(cost, flags), encoding="utf-8")
    print(f"job_cost: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
