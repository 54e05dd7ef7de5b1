"""The scheduler source against a real Slurm, compared with what squeue and sinfo print.

One cluster for the file (cluster.py): node `host` with 5 typed fake GPUs and 8 CPUs in
partitions `gpu` (the default) and `shared`, and `ghost` (2 GPUs, `shared` only),
configured but never started, so DOWN. Jobs ask for GPUs every way Slurm takes; enough
of them that some run, some wait for resources or priority, one is held, one waits on
another, one is an array held back by its own task limit, one may run in either
partition. The test keeps its own record of what each job asked for and reads Slurm's
plain columns with its own parsing; the source is refreshed between two reads of them, and
the two reads must agree (else it reads again), so both describe the same moment.

Then the queue moves: a job ends and a waiting one starts (its wait is observed once, and
the GPU-seconds follow the jobs' real start and end times), two more end and jobs of two
other accounts start (each account's wait histogram counts its own, as squeue shows them),
the node is drained, the controller goes down and comes back.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.exposition.client import registry_of
from nvwatch.agent.exposition.render import prepare
from nvwatch.agent.exposition.text import render_text
from nvwatch.agent.sources import SourceDegraded, SourceUnavailable
from nvwatch.agent.sources.scheduler.fairshare import FairShare, read_fairshare
from nvwatch.agent.sources.scheduler.model import SchedulerSample, WaitCounts
from nvwatch.agent.sources.scheduler.slurm_commands import SchedulerError
from nvwatch.agent.sources.scheduler.source import SchedulerSource
from tests.slurm.cluster import Cluster, slurm_cluster
from tests.slurm.scheduler_queue import LAYOUT, ODD_ACCOUNT, Queue, submit_queue
from tests.slurm.slurm_plain import (
    expected_capacity,
    plain_nodes,
    plain_pending,
    plain_started,
    rpc_counts,
    rpc_difference,
    times,
)
from tests.slurm.test_real_slurm import _need_slurm

pytestmark = pytest.mark.timeout(300)

NVWATCH = str(Path(sys.executable).parent / "nvwatch")
# What Slurm's pending reasons mean, as its manual (squeue(1), JOB REASON CODES) says:
# the classes a reader of the series expects each in.
MEANING = {
    "Resources": "resources",
    "Priority": "priority",
    "JobHeldUser": "held",
    "JobHeldAdmin": "held",
    "Dependency": "dependency",
    "DependencyNeverSatisfied": "dependency",
    "JobArrayTaskLimit": "limits",
    # a job that may run where a node is down: the nodes it needs are not there
    "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
    "partitions": "resources",
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    _need_slurm()
    with slurm_cluster("linuxproc", layout=LAYOUT) as running:
        yield running


@pytest.fixture(scope="module")
def queue(cluster: Cluster) -> Queue:
    return submit_queue(cluster)


@pytest.fixture(scope="module")
def source(cluster: Cluster) -> Iterator[SchedulerSource]:
    """Refreshed by the tests (`refresh()`), never on its own: one refresh per read. Its
    fair-share reader is the agent's: this cluster has no accounting, so it finds none."""
    scheduler = SchedulerSource(
        interval=3600.0,
        timeout=10.0,
        max_accounts=50,
        max_users=5,
        env=cluster.env,
        fairshare=read_fairshare,
    )
    yield scheduler
    scheduler.close()


T = TypeVar("T")


def _same_moment(read: Callable[[], T], source: SchedulerSource) -> tuple[T, SchedulerSample]:
    """Slurm's plain output and a refresh between two identical reads of it."""
    for _ in range(10):
        before = read()
        sample = source.refresh()
        assert sample is not None, source.collect()
        if read() == before:
            return before, sample
        time.sleep(0.5)
    raise AssertionError("squeue/sinfo kept changing around the refresh")


def _served_capacity(
    sample: SchedulerSample,
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    gpus = {(p.partition, s): n for p in sample.partitions for s, n in p.gpus.items() if n}
    down = {
        (p.partition, r): n for p in sample.partitions for r, n in p.nodes_unavailable.items() if n
    }
    return gpus, down


def _served_pending(sample: SchedulerSample) -> dict[tuple[str, str, str], int]:
    return {
        (d.partition, d.account, r): n
        for d in sample.demand
        for r, n in d.pending_gpus.items()
        if n
    }


# --- the first moment -----------------------------------------------------------------------


def test_gpus_by_state_and_unavailable_nodes_are_what_sinfo_prints(
    queue: Queue, source: SchedulerSource
) -> None:
    nodes, sample = _same_moment(lambda: plain_nodes(queue.cluster), source)
    assert _served_capacity(sample) == expected_capacity(nodes)
    # the node in both partitions counts in each; the down one only in its own
    by_partition = {p.partition: sum(p.gpus.values()) for p in sample.partitions}
    assert by_partition == {"gpu": 5, "shared": 7}


def test_pending_gpus_per_partition_account_and_reason_are_what_squeue_prints(
    queue: Queue, source: SchedulerSource
) -> None:
    pending, sample = _same_moment(lambda: plain_pending(queue.cluster), source)
    expected: dict[tuple[str, str, str], int] = {}
    for job in pending:
        asked = queue.asked[job.job]
        assert job.reason in MEANING, f"a reason this scenario does not make: {job.reason}"
        for partition in job.partitions:
            key = (partition, asked.account, MEANING[job.reason])
            expected[key] = expected.get(key, 0) + asked.gpus
    assert _served_pending(sample) == expected
    # every way of asking showed up: held, dependency, array limit, resources
    classes = {cls for _, _, cls in expected}
    assert {"held", "dependency", "limits", "resources"} <= classes


def test_oldest_pending_is_the_longest_eligible_wait_squeue_prints(
    queue: Queue, source: SchedulerSource
) -> None:
    pending, sample = _same_moment(lambda: plain_pending(queue.cluster), source)
    now = sample.refreshed_at
    oldest: dict[str, float] = {}
    for job in pending:
        if MEANING[job.reason] in ("held", "dependency") or job.eligible is None:
            continue
        for partition in job.partitions:
            oldest[partition] = max(oldest.get(partition, 0.0), now - job.eligible)
    served = {p.partition: p.oldest_pending_seconds for p in sample.partitions}
    assert served == pytest.approx(oldest, abs=1e-6)
    assert all(seconds > 0 for seconds in oldest.values())


def test_per_user_series_sum_to_the_partition_demand(queue: Queue, source: SchedulerSource) -> None:
    sample = source.refresh()
    assert sample is not None
    users = {(u.partition, u.user): u.pending_gpus for u in sample.users}
    assert {user for _, user in users} == {"nobody", "root"}
    for partition in ("gpu", "shared"):
        demand = sum(
            sum(d.pending_gpus.values()) for d in sample.demand if d.partition == partition
        )
        assert sum(n for (p, _), n in users.items() if p == partition) == demand


def test_accounts_beyond_the_cap_are_other_and_nothing_is_lost(
    queue: Queue, source: SchedulerSource
) -> None:
    capped = SchedulerSource(interval=3600.0, timeout=10.0, max_accounts=2, env=queue.cluster.env)
    try:
        few, full = capped.refresh(), source.refresh()
    finally:
        capped.close()
    assert few is not None and full is not None
    accounts = {d.account for d in few.demand}
    assert len(accounts - {"other"}) == 2 and "other" in accounts
    for sample in (few, full):
        assert _served_pending(sample)  # something waits
    total = [sum(_served_pending(s).values()) for s in (few, full)]
    assert total[0] == total[1]


def test_the_exposition_is_prometheus_clients_and_an_odd_account_survives_it(
    queue: Queue, source: SchedulerSource
) -> None:
    sample = source.refresh()
    assert sample is not None
    families = prepare("scheduler", sample)
    text = render_text([families])
    assert text == generate_latest(registry_of(families))
    accounts = {
        sample_.labels["account"]
        for family in text_string_to_metric_families(text.decode())
        for sample_ in family.samples
        if "account" in sample_.labels
    }
    assert ODD_ACCOUNT in accounts


def test_one_refresh_costs_the_controller_four_rpcs(queue: Queue, source: SchedulerSource) -> None:
    """squeue, sinfo and sshare as the source runs them, counted by the controller itself
    (sdiag), whatever the number of jobs."""
    before = rpc_counts(queue.cluster)
    sample = source.refresh()
    assert sample is not None and sample.fairshare is None  # no accounting here
    assert rpc_difference(before, rpc_counts(queue.cluster)) == {
        "REQUEST_JOB_INFO": 1,
        "REQUEST_NODE_INFO": 1,
        "REQUEST_PARTITION_INFO": 1,
        "REQUEST_SHARE_INFO": 1,
    }


# what sshare's reader returns with accounting (tests/slurm/test_fairshare.py reads a real
# one); under Fair Tree an account without users has no factor
SHARES = (FairShare("zeta", 0.7, 0.25, 0.6), FairShare("alpha", 0.3, 0.75, None))


def _families(sample: SchedulerSample) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in prepare("scheduler", sample):
        found[family.name] = [(s.labels, s.value) for s in family.samples]
    return found


def test_fair_share_takes_the_first_account_labels_and_without_accounting_is_absent(
    queue: Queue,
) -> None:
    env = queue.cluster.env
    readers = {
        "accounting": lambda _timeout, _env, _run: SHARES,
        "none": lambda _timeout, _env, _run: None,
    }
    samples = {}
    for name, reader in readers.items():
        scheduler = SchedulerSource(
            interval=3600.0, timeout=10.0, max_accounts=2, env=env, fairshare=reader
        )
        samples[name] = scheduler.refresh()
        scheduler.close()
    with_shares, without = samples["accounting"], samples["none"]
    assert with_shares is not None and without is not None
    served = {
        (labels["account"], labels["kind"]): value
        for labels, value in _families(with_shares)["nvwatch_scheduler_fairshare"]
    }
    assert served == {
        (s.account, kind): getattr(s, kind)
        for s in SHARES
        for kind in ("shares_norm", "usage_effective", "factor")
        if getattr(s, kind) is not None
    }
    # the configured accounts hold the two labels: the jobs' other accounts are "other"
    assert {d.account for d in with_shares.demand} == {"alpha", "other"}
    assert "nvwatch_scheduler_fairshare" not in _families(without)


def test_a_real_queue_renders_every_scheduler_family(queue: Queue) -> None:
    scheduler = SchedulerSource(
        interval=3600.0,
        timeout=10.0,
        max_accounts=50,
        max_users=5,
        env=queue.cluster.env,
        fairshare=lambda _timeout, _env, _run: SHARES,
    )
    try:
        sample = scheduler.refresh()
    finally:
        scheduler.close()
    assert sample is not None
    assert set(_families(sample)) == {
        "nvwatch_scheduler_gpus",
        "nvwatch_scheduler_nodes_unavailable",
        "nvwatch_scheduler_oldest_pending_seconds",
        "nvwatch_scheduler_wait_seconds",
        "nvwatch_scheduler_account_wait_seconds",
        "nvwatch_scheduler_pending_gpus",
        "nvwatch_scheduler_allocated_gpu_seconds",  # prometheus_client's name, less _total
        "nvwatch_scheduler_user_pending_gpus",
        "nvwatch_scheduler_fairshare",
    }
    # nvwatch_scheduler_allocated_gpu_seconds_total as the scrape writes it
    assert b"nvwatch_scheduler_allocated_gpu_seconds_total{" in render_text(
        [prepare("scheduler", sample)]
    )


def test_a_failed_fair_share_read_serves_the_rest_with_its_reason(queue: Queue) -> None:
    def failing(_timeout: float, _env: object, _run: object) -> None:
        raise SchedulerError("sshare failed: sshare: error: Problem talking to the database")

    scheduler = SchedulerSource(
        interval=3600.0, timeout=10.0, max_accounts=50, env=queue.cluster.env, fairshare=failing
    )
    try:
        scheduler.refresh()
        with pytest.raises(SourceDegraded) as degraded:
            scheduler.collect()
    finally:
        scheduler.close()
    assert str(degraded.value).startswith("sshare failed: sshare: error: Problem talking")
    sample = degraded.value.sample
    assert isinstance(sample, SchedulerSample) and sample.fairshare is None
    assert "nvwatch_scheduler_pending_gpus" in _families(sample)


# --- the queue moves ------------------------------------------------------------------------


def test_a_job_that_starts_is_one_wait_and_gpu_seconds_follow_start_and_end(
    queue: Queue, source: SchedulerSource
) -> None:
    cluster, names = queue.cluster, queue.names
    first = source.refresh()
    assert first is not None
    time.sleep(1.5)  # Slurm's times are whole seconds: the end must fall after `first`
    # the two-GPU job ends; the two-GPU job waiting for resources takes its GPUs
    cluster.run("scancel", names["per_task"])
    cluster.wait_for(
        "the waiting job started", lambda: cluster.job_state(names["per_job"]) == "RUNNING"
    )
    second = source.refresh()
    assert second is not None
    ended, started = times(cluster, names["per_task"]), times(cluster, names["per_job"])
    assert ended.end is not None

    waits = {p.partition: p.wait for p in second.partitions}
    before = {p.partition: p.wait for p in first.partitions}
    assert waits["gpu"].cumulative[-1] - before["gpu"].cumulative[-1] == 1
    assert waits["gpu"].sum_seconds - before["gpu"].sum_seconds == pytest.approx(
        started.start - started.eligible, abs=1e-6
    )
    assert waits["shared"] == before["shared"]  # nothing started there

    t1, t2 = first.refreshed_at, second.refreshed_at
    grown = _gpu_seconds(second, "gpu", "beta") - _gpu_seconds(first, "gpu", "beta")
    # per_node: 1 GPU all along; per_task: 2 GPUs until it ended
    assert grown == pytest.approx(1 * (t2 - t1) + 2 * (ended.end - t1), abs=1e-6)
    grown = _gpu_seconds(second, "gpu", "alpha") - _gpu_seconds(first, "gpu", "alpha")
    # typed: 1 GPU all along; per_job: 2 GPUs since it started; cpu_only: none
    assert grown == pytest.approx(1 * (t2 - t1) + 2 * (t2 - started.start), abs=1e-6)

    third = source.refresh()  # the started job is not counted twice
    assert third is not None
    assert {p.partition: p.wait for p in third.partitions}["gpu"] == waits["gpu"]


def _gpu_seconds(sample: SchedulerSample, partition: str, account: str) -> float:
    (seconds,) = [
        d.allocated_gpu_seconds
        for d in sample.demand
        if (d.partition, d.account) == (partition, account)
    ]
    return seconds


def test_jobs_of_two_accounts_start_and_each_account_histogram_counts_its_own(
    queue: Queue, source: SchedulerSource
) -> None:
    """Two running jobs end and three GPUs go to waiting jobs of other accounts: the
    account histograms grow by the jobs squeue shows started per account and their waits,
    together exactly as much as the partition histograms; a source capped at two accounts
    counts the third account's starts in "other"."""
    cluster, names = queue.cluster, queue.names
    capped = SchedulerSource(interval=3600.0, timeout=10.0, max_accounts=2, env=cluster.env)
    try:
        assert capped.refresh() is not None  # the first refresh counts no start
        started, first = _same_moment(lambda: plain_started(cluster), source)
        before_capped = capped.refresh()
        cluster.run("scancel", names["per_node"], names["per_job"])
        cluster.wait_for("the freed GPUs taken", lambda: _node_gpus_used(cluster) == 5)
        now_started, second = _same_moment(lambda: plain_started(cluster), source)
        after_capped = capped.refresh()
    finally:
        capped.close()
    assert before_capped is not None and after_capped is not None
    new = [now_started[job] for job in now_started.keys() - started.keys()]
    by_account: dict[str, list[float]] = {}
    for job in new:
        by_account.setdefault(job.account, []).append(job.wait)
    assert len(by_account) >= 2, by_account  # two accounts' jobs started after waiting
    assert all(wait > 0 for waits in by_account.values() for wait in waits)

    grown = _grown(_account_waits(first), _account_waits(second))
    assert {a: w.cumulative[-1] for a, w in grown.items() if w.cumulative[-1]} == {
        a: len(waits) for a, waits in by_account.items()
    }
    for account, waits in by_account.items():
        counts = grown[account]
        assert counts.sum_seconds == pytest.approx(sum(waits), abs=1e-6)
        assert list(counts.cumulative) == [
            sum(1 for w in waits if w <= bound) for bound in counts.bounds
        ]
    # the same jobs as the partition histograms, in this refresh and since the source started
    partitions = _grown(_partition_waits(first), _partition_waits(second))
    for sample_grown in (grown, partitions):
        assert sum(w.cumulative[-1] for w in sample_grown.values()) == len(new)
        assert sum(w.sum_seconds for w in sample_grown.values()) == pytest.approx(
            sum(job.wait for job in new), abs=1e-6
        )
    for sample in (first, second):
        assert _totals(_account_waits(sample)) == pytest.approx(_totals(_partition_waits(sample)))

    # capped at two: the first two accounts (in order) keep their label, the rest are other
    capped_grown = _grown(_account_waits(before_capped), _account_waits(after_capped))
    named = {a for a in capped_grown if a != "other"}
    assert len(named) == 2 and "other" in capped_grown
    beyond = [w for a, ws in by_account.items() if a not in named for w in ws]
    assert beyond, "no start of an account beyond the cap"
    assert capped_grown["other"].cumulative[-1] == len(beyond)
    assert capped_grown["other"].sum_seconds == pytest.approx(sum(beyond), abs=1e-6)
    for account in named:
        assert capped_grown[account].cumulative == grown[account].cumulative
        assert capped_grown[account].sum_seconds == pytest.approx(grown[account].sum_seconds)


def _account_waits(sample: SchedulerSample) -> dict[str, WaitCounts]:
    return {w.account: w.wait for w in sample.account_waits}


def _partition_waits(sample: SchedulerSample) -> dict[str, WaitCounts]:
    return {p.partition: p.wait for p in sample.partitions}


def _grown(before: dict[str, WaitCounts], after: dict[str, WaitCounts]) -> dict[str, WaitCounts]:
    """Each histogram's increase between two samples (one new since `before`: all of it)."""
    grown = {}
    for name, counts in after.items():
        old = before.get(name)
        cumulative = counts.cumulative
        if old is not None:
            cumulative = tuple(
                n - o for n, o in zip(counts.cumulative, old.cumulative, strict=True)
            )
        total = counts.sum_seconds - (old.sum_seconds if old is not None else 0.0)
        grown[name] = WaitCounts(counts.bounds, cumulative, total)
    return grown


def _totals(histograms: dict[str, WaitCounts]) -> tuple[int, float]:
    return (
        sum(w.cumulative[-1] for w in histograms.values()),
        sum(w.sum_seconds for w in histograms.values()),
    )


def test_a_drained_node_takes_its_free_gpus_out_of_service(
    queue: Queue, source: SchedulerSource
) -> None:
    cluster = queue.cluster
    cluster.run(
        "scontrol", "update", f"NodeName={cluster.host}", "State=DRAIN", "Reason=nvwatch test"
    )
    cluster.run("scancel", queue.names["typed"])  # a GPU freed on a draining node
    cluster.wait_for("the GPU freed", lambda: _node_gpus_used(cluster) == 4)
    nodes, sample = _same_moment(lambda: plain_nodes(cluster), source)
    assert _served_capacity(sample) == expected_capacity(nodes)
    gpus, down = _served_capacity(sample)
    assert gpus[("gpu", "unavailable")] == 1 and ("gpu", "idle") not in gpus
    assert down[("gpu", "drained")] == 1


def _node_gpus_used(cluster: Cluster) -> int:
    return next(n.used for n in plain_nodes(cluster) if n.name == cluster.host)


def test_the_controller_down_is_one_line_and_its_return_is_up_again(
    queue: Queue, source: SchedulerSource
) -> None:
    cluster = queue.cluster
    quick = SchedulerSource(interval=3600.0, timeout=5.0, max_accounts=50, env=cluster.env)
    try:
        cluster.stop_controller()
        try:
            assert quick.refresh() is None
            with pytest.raises(SourceUnavailable) as down:
                quick.collect()
        finally:
            cluster.start_controller()
        reason = str(down.value)
        assert "\n" not in reason and reason.startswith("squeue ")
        assert "controller" in reason or "within 5 s" in reason, reason
        assert quick.refresh() is not None
        quick.collect()
    finally:
        quick.close()


def test_the_sample_can_be_read_by_a_process_like_any(queue: Queue) -> None:
    """`nvwatch dump --sources scheduler,host`: the scheduler's thread refreshes, the
    poller serves it beside another source."""
    done = subprocess.run(
        [NVWATCH, "dump", "--sources", "scheduler,host", "--settle", "0"],
        env=queue.cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert 'nvwatch_agent_source_up{source="scheduler"} 1.0' in done.stdout
    assert 'nvwatch_scheduler_gpus{partition="shared",state="unavailable"}' in done.stdout
