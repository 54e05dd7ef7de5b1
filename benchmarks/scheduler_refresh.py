"""What one refresh of the scheduler source costs Slurm's controller and the agent.

    python -m benchmarks.scheduler_refresh [--pending 1000] [--update docs/performance.md]

Starts a real one-node Slurm (Debian's slurm-wlm, tests/slurm/cluster.py) whose node has
as many fake GPUs as it runs GPU jobs, CPUs oversubscribed four ways so CPU-only jobs run
beside them (the most a one-node controller on this machine holds without starving it),
in two partitions, and queues `--pending` GPU jobs behind them from 20 accounts, asking
for GPUs every way Slurm takes; some held, some waiting on a running job, some arrays,
some on either partition. Then refreshes the source `--refreshes` times and measures
each: the controller RPCs it made (sdiag's counters before and after, and the time the
controller says it spent on them), slurmctld's CPU time, the refresh's wall time, the
CPU of the agent's process (parsing, tallying) and of the squeue and sinfo it ran, and
the series the sample renders to, per partition, per partition and account, and per
account.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import cpu_model, replace_section
from nvwatch.agent.exposition.render import prepare
from nvwatch.agent.sources.scheduler.fairshare import read_fairshare
from nvwatch.agent.sources.scheduler.model import SchedulerSample
from nvwatch.agent.sources.scheduler.source import SchedulerSource
from tests.slurm.cluster import Cluster, Layout, slurm_cluster

BEGIN, END = "<!-- scheduler-refresh:begin -->", "<!-- scheduler-refresh:end -->"
ACCOUNTS = 20
OVERSUBSCRIBE = 4
SUBMITTERS = 4  # sbatch processes at once
# the ways the queued jobs ask, in turn: (sbatch flags, GPUs per job)
_ASKS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("--gres=gpu:1",), 1),
    (("--gpus=2",), 2),
    (("--gpus-per-node=1",), 1),
    (("--gpus-per-task=1", "--ntasks=2"), 2),
    (("--gres=gpu:bench:1", "--partition=gpu,shared"), 1),
    (("--hold", "--gpus=1"), 1),
    (("--array=0-9%2", "--gres=gpu:1"), 10),
)


@dataclass(frozen=True)
class Settings:
    pending: int = 1000
    gpu_jobs: int = 64  # running, one GPU each: the node's fake GPUs
    cpu_jobs: int = 64  # running beside them on oversubscribed CPUs
    refreshes: int = 5

    @classmethod
    def quick(cls) -> Settings:
        return cls(pending=40, gpu_jobs=4, cpu_jobs=4, refreshes=2)


@dataclass(frozen=True)
class Refresh:
    rpcs: dict[str, int]  # controller RPCs by type
    controller_ms: float  # the controller's own time for them (sdiag total_time)
    controller_cpu_s: float  # slurmctld's CPU time over the refresh
    wall_s: float
    agent_cpu_s: float  # the agent's process: parsing and tallying
    commands_cpu_s: float  # squeue, sinfo and sshare, as children of the agent


@dataclass(frozen=True)
class Result:
    settings: Settings
    running: int
    pending_records: int
    squeue_bytes: int
    refreshes: list[Refresh]
    series: int
    series_per_partition: int  # series of a partition's own (capacity, waits)
    series_per_partition_account: int  # pending and GPU-seconds of one account in one
    series_per_account: int  # the account's wait histogram (one per cluster)
    series_per_account_accounting: int  # fair share, with accounting
    partitions: int
    accounts: int
    pairs: int  # (partition, account) pairs with series: seen pending or running there
    cpu: str
    load: str  # the machine's load average when the refreshes began (it is shared)
    when: str


def _sbatch(cluster: Cluster, account: str, flags: tuple[str, ...]) -> str:
    args = ("sbatch", "--parsable", "--output=/dev/null", f"--account={account}", *flags)
    return cluster.run(*args, "--wrap=sleep 3600").split(";")[0]


def _fill(cluster: Cluster, settings: Settings) -> list[str]:
    """The running jobs, every GPU taken; their ids."""
    plans = [("--gres=gpu:1",)] * settings.gpu_jobs + [("--ntasks=1",)] * settings.cpu_jobs
    with ThreadPoolExecutor(SUBMITTERS) as pool:
        jobs = list(pool.map(lambda i: _sbatch(cluster, _account(i), plans[i]), range(len(plans))))
    total = len(plans)
    cluster.wait_for(f"{total} jobs running", lambda: _count(cluster, "R") >= total, 600)
    return jobs


def _queue(cluster: Cluster, settings: Settings, running: list[str]) -> None:
    def submit(index: int) -> str:
        flags, _ = _ASKS[index % len(_ASKS)]
        if index % 10 == 9:  # waits on a running job
            flags = (f"--dependency=afterok:{running[index % len(running)]}", "--gpus=1")
        return _sbatch(cluster, _account(index), flags)

    with ThreadPoolExecutor(SUBMITTERS) as pool:
        list(pool.map(submit, range(settings.pending)))
    # the scheduler looks at the first jobs of its queue each cycle: let it have one
    cluster.wait_for("a scheduling cycle", lambda: _reasons(cluster) != {"None"}, 120)


def _account(index: int) -> str:
    return f"acct{index % ACCOUNTS:02d}"


def _count(cluster: Cluster, state: str) -> int:
    return len(cluster.run("squeue", "-h", "-t", state, "-o", "%i").split())


def _reasons(cluster: Cluster) -> set[str]:
    return set(cluster.run("squeue", "-h", "-t", "PD", "-o", "%r").splitlines())


def _rpc_stats(cluster: Cluster) -> dict[str, tuple[int, int]]:
    """sdiag's (count, total microseconds) per RPC type."""
    section = cluster.run("sdiag").split("by message type")[1].split("by user")[0]
    pattern = r"^\s+(\w+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)"
    return {name: (int(c), int(t)) for name, c, t in re.findall(pattern, section, re.M)}


def _reads(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> Iterator[tuple[str, int, int]]:
    """RPCs that read the controller's state, less sdiag's own: (type, count, µs)."""
    for name, (count, micros) in after.items():
        was = before.get(name, (0, 0))
        if name.endswith("_INFO") and name != "REQUEST_STATS_INFO" and count > was[0]:
            yield name, count - was[0], micros - was[1]


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_refresh(cluster: Cluster, source: SchedulerSource) -> tuple[Refresh, SchedulerSample]:
    controller = psutil.Process(cluster.daemons["slurmctld"].pid)
    stats, controller_cpu = _rpc_stats(cluster), _cpu_seconds(controller)
    agent_cpu, children_cpu = time.process_time(), _children_cpu()
    started = time.perf_counter()
    sample = source.refresh()
    wall = time.perf_counter() - started
    agent_cpu, children_cpu = time.process_time() - agent_cpu, _children_cpu() - children_cpu
    controller_cpu = _cpu_seconds(controller) - controller_cpu
    if sample is None:
        source.collect()  # raises with the reason
        raise AssertionError("refresh failed")
    reads = list(_reads(stats, _rpc_stats(cluster)))
    rpcs = {name: count for name, count, _ in reads}
    controller_ms = sum(micros for _, _, micros in reads) / 1000
    return Refresh(rpcs, controller_ms, controller_cpu, wall, agent_cpu, children_cpu), sample


def _series(sample: SchedulerSample) -> tuple[int, int, int, int]:
    """(all series, those of one partition alone, those of one partition and account,
    those of one account alone)."""
    total = 0
    own: dict[str, int] = {}
    per_pair: dict[tuple[str, str], int] = {}
    per_account: dict[str, int] = {}
    for family in prepare("scheduler", sample):
        for series in family.samples:
            total += 1
            labels = series.labels
            if "account" in labels and "partition" in labels:
                key = (labels["partition"], labels["account"])
                per_pair[key] = per_pair.get(key, 0) + 1
            elif "partition" in labels and "user" not in labels:
                own[labels["partition"]] = own.get(labels["partition"], 0) + 1
            elif "account" in labels:
                per_account[labels["account"]] = per_account.get(labels["account"], 0) + 1
    return total, max(own.values()), max(per_pair.values()), max(per_account.values())


def measure(settings: Settings) -> Result:
    layout = Layout(
        gpus=settings.gpu_jobs,
        gpu_type="bench",
        cpus=max(2, settings.gpu_jobs + settings.cpu_jobs) // OVERSUBSCRIBE + 1,
        partitions=("gpu", "shared"),
        partition_options=f"OverSubscribe=FORCE:{OVERSUBSCRIBE}",
        extra="MaxJobCount=20000",
    )
    with slurm_cluster("linuxproc", layout=layout) as cluster:
        running = _fill(cluster, settings)
        _queue(cluster, settings, running)
        source = SchedulerSource(
            interval=3600.0,
            timeout=60.0,
            max_accounts=50,
            env=cluster.env,
            fairshare=read_fairshare,
        )
        load = " ".join(f"{value:.1f}" for value in os.getloadavg())
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        try:
            source.refresh()  # the first: its waits and GPU-seconds start from here
            refreshes, sample = [], None
            for _ in range(settings.refreshes):
                refresh, sample = measure_refresh(cluster, source)
                refreshes.append(refresh)
        finally:
            source.close()
        squeue_bytes = len(cluster.run("squeue", "--json").encode())
        records = _count(cluster, "PD")
        assert sample is not None
        total, per_partition, per_pair, per_account = _series(sample)
        return Result(
            settings=settings,
            running=_count(cluster, "R"),
            pending_records=records,
            squeue_bytes=squeue_bytes,
            refreshes=refreshes,
            series=total,
            series_per_partition=per_partition,
            series_per_partition_account=per_pair,
            series_per_account=per_account,
            series_per_account_accounting=3,
            partitions=len(sample.partitions),
            accounts=len({d.account for d in sample.demand}),
            pairs=len(sample.demand),
            cpu=f"{cpu_model()} with {os.cpu_count()} cores",
            load=load,
            when=when,
        )


# the table's timed rows: (row, what of a refresh, in milliseconds)
_TIMED: tuple[tuple[str, Callable[[Refresh], float]], ...] = (
    ("controller time on them (sdiag)", lambda r: r.controller_ms),
    ("slurmctld CPU over the refresh (10 ms ticks)", lambda r: r.controller_cpu_s * 1000),
    ("wall time", lambda r: r.wall_s * 1000),
    ("agent CPU (parse, tally)", lambda r: r.agent_cpu_s * 1000),
    ("squeue, sinfo and sshare CPU", lambda r: r.commands_cpu_s * 1000),
)


def _rows(result: Result) -> str:
    last = result.refreshes[-1].rpcs
    rpcs = ", ".join(f"{n} {name}" for name, n in sorted(last.items()))
    rows = [f"| controller RPCs | {sum(last.values())} ({rpcs}) | the same |"]
    for name, read in _TIMED:
        values = [read(r) for r in result.refreshes]
        rows.append(f"| {name} | {statistics.median(values):.0f} ms | {max(values):.0f} ms |")
    return "\n".join(rows)


def section(result: Result) -> str:
    s = result.settings
    most = result.series_per_partition + 51 * result.series_per_partition_account
    most_accounts = 51 * result.series_per_account
    return f"""{BEGIN}
## The scheduler source's refresh

`python -m benchmarks.scheduler_refresh --update docs/performance.md`, {result.when}, on
{result.cpu}, a machine shared with other work (load average {result.load} as the
refreshes began). A real one-node Slurm 22.05 whose node runs
{s.gpu_jobs} GPU jobs on as many fake GPUs and {s.cpu_jobs} CPU-only jobs on CPUs
oversubscribed {OVERSUBSCRIBE} ways ({result.running} running), with {s.pending} GPU jobs
queued behind them from {ACCOUNTS} accounts in every way of asking for GPUs (held,
waiting on a running job, arrays of ten, on either of the two partitions):
{result.pending_records} pending records. `squeue --json` printed
{result.squeue_bytes / 2**20:.1f} MiB. The median and worst of {len(result.refreshes)}
refreshes (the source's first refresh is not counted):

| per refresh | median | worst |
|---|---|---|
{_rows(result)}

This cluster runs no accounting: sshare's RPC is answered all the same (with no row),
and with accounting it costs what "Accounting and fair share" in docs/scheduler.md
measured. Every 30 s (the default interval) this is the controller's whole cost: the
number of RPCs does not grow with the jobs, only their size does. Series:
{result.series} for {result.partitions} partitions and {result.accounts} accounts
({result.pairs} pairs of a partition and an account with jobs):
{result.series_per_partition} per partition (GPUs by state 3, unavailable nodes 10,
oldest wait 1, the wait histogram 16), {result.series_per_partition_account} per
partition and account (6 pending classes, 1 GPU-seconds counter),
{result.series_per_account} per account (its wait histogram, one per cluster), and
{result.series_per_account_accounting} more per account with accounting. At the default
cap of 50 accounts (the rest are "other") a partition costs at most {most} series, and
the accounts' wait histograms at most {most_accounts} for the cluster.
{END}
"""


def update(path: Path, text: str) -> None:
    replace_section(path, text, BEGIN, END)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=Settings.pending)
    parser.add_argument("--gpu-jobs", type=int, default=Settings.gpu_jobs)
    parser.add_argument("--cpu-jobs", type=int, default=Settings.cpu_jobs)
    parser.add_argument("--refreshes", type=int, default=Settings.refreshes)
    parser.add_argument("--quick", action="store_true", help="a tiny queue (~30 s)")
    parser.add_argument("--update", type=Path, help="rewrite this section of a markdown file")
    args = parser.parse_args()
    settings = (
        Settings.quick()
        if args.quick
        else Settings(args.pending, args.gpu_jobs, args.cpu_jobs, args.refreshes)
    )
    result = measure(settings)
    print(json.dumps(asdict(result), indent=2))
    if args.update:
        update(args.update, section(result))


if __name__ == "__main__":
    main()
