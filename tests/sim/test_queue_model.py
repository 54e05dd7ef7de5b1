"""The simulated Slurm queue: its conservation laws at every instant, jobs that wait until
their GPUs are free (and for the other reasons Slurm gives), waits and GPU-seconds that
integrate to what the jobs did, fair share as Slurm's classic formula, determinism.

Expectations come from the jobs themselves (their requests, starts and ends as the model
recorded them) and from hand-made queues whose outcome follows from their input, never
from the model's own tables."""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import TypeVar

import pytest

from nvwatch.sim.queue.arrivals import Arrivals, Demand, PartitionShape, Surge
from nvwatch.sim.queue.jobs import (
    DEPENDENCY,
    DOWN,
    DRAINED,
    HELD,
    LIMITS,
    NODE_REASONS,
    OTHER,
    PRIORITY,
    REASON_CLASSES,
    RESOURCES,
    Account,
    Job,
    JobRequest,
    Partition,
    SlurmNode,
)
from nvwatch.sim.queue.model import QueueModel
from nvwatch.sim.queue.state import WAIT_BUCKETS, QueueState

K = TypeVar("K")
HOUR = 3600.0
DAY = 24 * HOUR
ACCOUNTS = (Account("a", 3), Account("b", 1))


def _request(job_id: int, gpus: int, run_h: float, **kw: object) -> JobRequest:
    fields: dict[str, object] = {
        "account": "a",
        "user": "u",
        "partition": "p",
        "nodes": 1,
        "submit": 0.0,
        "time_limit_s": run_h * HOUR,
    }
    fields.update(kw)
    return JobRequest(job_id, gpus_per_node=gpus, run_s=run_h * HOUR, **fields)  # type: ignore[arg-type]


def _one_node(gpus: int = 8, **kw: object) -> QueueModel:
    return QueueModel([SlurmNode("n0", gpus)], [Partition("p", ("n0",))], ACCOUNTS, start=0.0, **kw)  # type: ignore[arg-type]


def _nonzero(counts: Mapping[K, int]) -> dict[K, int]:
    return {key: value for key, value in counts.items() if value}


class _Recorder:
    """Every job the model starts and ends, in order."""

    def __init__(self, model: QueueModel) -> None:
        self.started: list[Job] = []
        self.ended: list[Job] = []
        model.on_start.append(self.started.append)
        model.on_end.append(self.ended.append)


# -- a busy month on an overlapping cluster: the laws hold at every instant ---------------

NODES = [SlurmNode(f"n{i}", 8) for i in range(5)] + [SlurmNode("t0", 4)]
PARTITIONS = [
    Partition("big", ("n0", "n1", "n2", "n3")),
    Partition("mix", ("n3", "n4")),  # n3 is in both
    Partition("small", ("t0",)),
]


Month = tuple[QueueModel, _Recorder, list[QueueState], list[JobRequest]]


def _busy_month(seed: int = 3) -> Month:
    nodes = [SlurmNode(n.name, n.gpus) for n in NODES]
    model = QueueModel(nodes, PARTITIONS, ACCOUNTS, start=0.0)
    shapes = [
        PartitionShape("big", 32, 4, 8),
        PartitionShape("mix", 16, 2, 8),
        PartitionShape("small", 4, 1, 4),
    ]
    demand = Demand({"a": 0.6, "b": 0.4}, load=0.8, surges=(Surge("big", 5 * DAY, 9 * DAY, 2.0),))
    requests = Arrivals(demand, shapes, seed=seed, start=0.0).until(20 * DAY)
    model.submit_all(requests)
    model.set_node(3 * DAY, "n1", DRAINED, "bad fan")
    model.set_node(4 * DAY, "n1", None)
    model.set_node(6 * DAY, "n4", DOWN, "not responding")
    model.set_node(7 * DAY, "n4", None)
    model.set_limit(10 * DAY, "b", 4)
    model.set_limit(12 * DAY, "b", None)
    recorder = _Recorder(model)
    states = []
    for step in range(1, 20 * 48 + 1):  # every 30 minutes
        model.advance(step * 1800.0)
        states.append(model.state())
    return model, recorder, states, requests


@pytest.fixture(scope="module")
def month() -> Month:
    return _busy_month()


def _holding_at(jobs: list[Job], t: float) -> list[Job]:
    return [
        j for j in jobs if j.start is not None and j.start <= t and (j.end is None or j.end > t)
    ]


def test_every_gpu_is_allocated_idle_or_unavailable_at_every_instant(month: Month) -> None:
    _, recorder, states, _ = month
    sizes = {n.name: n.gpus for n in NODES}
    assert len(recorder.started) > 300  # a busy month, not an empty one
    for state in states:
        running = _holding_at(recorder.started, state.time)
        for partition in PARTITIONS:
            total = sum(sizes[n] for n in partition.nodes)
            counts = [state.gpus[partition.name, s] for s in ("allocated", "idle", "unavailable")]
            assert sum(counts) == total and min(counts) >= 0
            held = sum(
                len(gpus)
                for job in running
                for node, gpus in job.allocation.items()
                if node in partition.nodes
            )
            assert counts[0] == held
        # no GPU held by two jobs, none beyond its node
        owners: Counter[tuple[str, int]] = Counter(
            (node, gpu) for job in running for node, gpus in job.allocation.items() for gpu in gpus
        )
        assert not owners or max(owners.values()) == 1
        assert all(0 <= gpu < sizes[node] for node, gpu in owners)


def test_a_job_starts_only_on_whole_free_gpus_of_its_partition(month: Month) -> None:
    _, recorder, _, _ = month
    members = {p.name: set(p.nodes) for p in PARTITIONS}
    for job in recorder.started:
        request = job.request
        assert len(job.allocation) == request.nodes
        assert set(job.allocation) <= members[request.partition]
        assert all(len(gpus) == request.gpus_per_node for gpus in job.allocation.values())
        assert job.start is not None and job.eligible is not None
        assert request.submit <= job.eligible <= job.start


def test_waiting_reasons_hold_at_every_instant(month: Month) -> None:
    """A job waiting for resources could not fit anywhere in its partition (limits and
    priority aside); one held, not begun or depending was never eligible yet."""
    _, recorder, states, requests = month
    by_id = {r.job_id: r for r in requests}
    ends = {j.job_id: j.end for j in recorder.started}
    starts = {j.job_id: j.start for j in recorder.started}
    seen: Counter[str] = Counter()
    for request in requests:
        start = starts.get(request.job_id)
        if start is None:
            continue
        if request.hold_until is not None:
            assert start >= request.hold_until
            seen[HELD] += 1
        if request.begin is not None:
            assert start >= request.begin
            seen[OTHER] += 1
        if request.after is not None:
            parent_end = ends.get(request.after)
            assert parent_end is not None and start >= parent_end
            seen[DEPENDENCY] += 1
    assert min(seen[HELD], seen[OTHER], seen[DEPENDENCY]) > 0
    reasons = Counter(r for s in states for (_, _, r) in s.pending_gpus)
    assert {RESOURCES, PRIORITY, LIMITS, HELD, DEPENDENCY, OTHER} <= set(reasons)
    assert set(by_id)  # every request was numbered


def test_resources_means_it_did_not_fit() -> None:
    """Checked on the live model at many instants: the job at the head of a partition
    waiting for resources has fewer nodes with its GPUs free than it asks for."""
    model = QueueModel(
        [SlurmNode(f"n{i}", 8) for i in range(3)], [Partition("p", ("n0", "n1", "n2"))], ACCOUNTS,
        start=0.0,
    )  # fmt: skip
    shapes = [PartitionShape("p", 24, 3, 8)]
    model.submit_all(
        Arrivals(Demand({"a": 1.0, "b": 1.0}, load=1.2), shapes, seed=9, start=0.0).until(5 * DAY)
    )
    checked = 0
    for step in range(1, 5 * 96):
        model.advance(step * 900.0)
        for job in model.pending.values():
            if job.reason == RESOURCES:
                fits = [n for n in model.nodes.values() if n.free >= job.request.gpus_per_node]
                assert len(fits) < job.request.nodes
                checked += 1
    assert checked > 50


def test_a_job_waits_until_its_gpus_are_free() -> None:
    """8 GPUs: A holds six for two hours; B asks for four ten minutes in and waits for
    A's end; C asks for two for an hour and starts at once beside A (it ends before B
    could start)."""
    model = _one_node()
    recorder = _Recorder(model)
    model.submit(_request(1, 6, 2.0))
    model.submit(_request(2, 4, 1.0, submit=600.0))
    model.submit(_request(3, 2, 1.0, submit=900.0))
    model.advance(1800.0)
    state = model.state()
    assert model.pending[2].reason == RESOURCES
    assert _nonzero(state.pending_gpus) == {("p", "a", RESOURCES): 4}
    # the pair that had a job shows every reason, 0 but one; the other account none
    assert {(p, a) for p, a, _ in state.pending_gpus} == {("p", "a")}
    assert len(state.pending_gpus) == len(REASON_CLASSES)
    assert state.gpus["p", "allocated"] == 8 and state.gpus["p", "idle"] == 0
    assert state.oldest_pending_s == {"p": 1800.0 - 600.0}
    model.advance(3 * HOUR)
    starts = {j.job_id: j.start for j in recorder.started}
    assert starts == {1: 0.0, 3: 900.0, 2: 2 * HOUR}
    waits = {j.job_id: j.wait_s for j in recorder.started}
    assert waits == {1: 0.0, 3: 0.0, 2: 2 * HOUR - 600.0}


def test_backfill_lets_short_jobs_by_and_keeps_the_head_jobs_place() -> None:
    """The head job needs all 8 GPUs, free when the running one ends at its limit (2 h);
    a job that ends before then starts now, one that would end after it waits."""
    model = _one_node()
    recorder = _Recorder(model)
    model.submit(_request(1, 4, 2.0))
    model.submit(_request(2, 8, 1.0, submit=60.0))
    model.submit(_request(3, 2, 1.0, submit=120.0))  # ends at 1 h 2 min: before the head's turn
    model.submit(_request(4, 2, 5.0, submit=180.0))  # would end long after it
    model.advance(600.0)
    assert (model.pending[2].reason, model.pending[4].reason) == (RESOURCES, PRIORITY)
    assert 3 in model.running
    model.advance(4 * HOUR)
    starts = {j.job_id: j.start for j in recorder.started}
    assert starts[2] == 2 * HOUR and starts[4] == 3 * HOUR


def test_fair_share_orders_the_queue_and_age_breaks_starvation() -> None:
    """Account a used the node for a day; then both ask for it whole at once: b (no
    usage) goes first. a's job waits, and its age lifts it over b's later jobs."""
    model = _one_node()
    recorder = _Recorder(model)
    model.submit(_request(1, 8, 24.0))
    model.submit(_request(2, 8, 1.0, submit=23 * HOUR))
    model.submit(_request(3, 8, 1.0, submit=23 * HOUR, account="b"))
    model.advance(26 * HOUR)
    starts = {j.job_id: j.start for j in recorder.started}
    assert starts[3] == 24 * HOUR and starts[2] == 25 * HOUR
    shares = model.fair_shares()
    assert shares["a"].usage_effective > shares["b"].usage_effective
    assert shares["a"].factor < shares["b"].factor


def test_fifo_policy_keeps_submission_order() -> None:
    model = _one_node(policy="fifo")
    recorder = _Recorder(model)
    model.submit(_request(1, 8, 24.0))
    model.submit(_request(2, 8, 1.0, submit=23 * HOUR))
    model.submit(_request(3, 8, 1.0, submit=23 * HOUR, account="b"))
    model.advance(26 * HOUR)
    assert [j.job_id for j in recorder.started] == [1, 2, 3]


def test_held_begin_and_dependent_jobs_are_not_eligible_until_released() -> None:
    model = _one_node()
    recorder = _Recorder(model)
    model.submit(_request(1, 1, 1.0, hold_until=2 * HOUR))
    model.submit(_request(2, 1, 1.0, begin=3 * HOUR))
    model.submit(_request(3, 1, 2.0))
    model.submit(_request(4, 1, 1.0, after=3))
    model.submit(_request(5, 1, 1.0, hold_until=math.inf))
    model.advance(HOUR)
    reasons = {i: j.reason for i, j in model.pending.items()}
    assert reasons == {1: HELD, 2: OTHER, 4: DEPENDENCY, 5: HELD}
    assert model.state().oldest_pending_s == {"p": 0.0}  # nobody eligible waits
    model.advance(10 * HOUR)
    starts = {j.job_id: j.start for j in recorder.started}
    assert starts == {3: 0.0, 1: 2 * HOUR, 4: 2 * HOUR, 2: 3 * HOUR}
    # eligible when released: no queue wait
    assert all(j.wait_s == 0.0 for j in recorder.started)
    assert model.pending[5].reason == HELD


def test_a_limit_holds_jobs_while_gpus_sit_idle() -> None:
    model = _one_node()
    model.set_limit(0.0, "b", 2)
    model.submit(_request(1, 2, 5.0, account="b"))
    model.submit(_request(2, 2, 5.0, account="b", submit=60.0))
    model.advance(HOUR)
    state = model.state()
    assert model.pending[2].reason == LIMITS
    assert state.gpus["p", "idle"] == 6
    assert state.oldest_pending_s == {"p": HOUR - 60.0}
    model.set_limit(2 * HOUR, "b", None)
    model.advance(2 * HOUR)
    assert 2 in model.running and model.running[2].wait_s == 2 * HOUR - 60.0


def test_drained_nodes_finish_their_jobs_and_down_nodes_lose_them() -> None:
    nodes = [SlurmNode("n0", 8), SlurmNode("n1", 8)]
    model = QueueModel(nodes, [Partition("p", ("n0", "n1"))], ACCOUNTS, start=0.0)
    recorder = _Recorder(model)
    model.submit(_request(1, 8, 3.0))
    model.submit(_request(2, 4, 3.0))
    model.advance(60.0)
    drained, lost = model.running[1].allocation, model.running[2].allocation
    model.set_node(HOUR, next(iter(drained)), DRAINED, "bad fan")
    model.set_node(HOUR, next(iter(lost)), DOWN, "not responding")
    model.submit(_request(3, 1, 1.0, submit=HOUR))
    model.advance(2 * HOUR)
    state = model.state()
    assert set(model.running) == {1}  # 2 died with its node, 3 has nowhere to go
    assert [j.job_id for j in recorder.ended] == [2]
    assert state.gpus == {("p", "allocated"): 8, ("p", "idle"): 0, ("p", "unavailable"): 8}
    assert _nonzero(state.nodes_unavailable) == {("p", DRAINED): 1, ("p", DOWN): 1}
    assert {r for _, r in state.nodes_unavailable} == set(NODE_REASONS)
    assert model.pending[3].reason == RESOURCES
    model.advance(3 * HOUR)  # job 1 ends: its drained node's GPUs are all unavailable
    assert model.state().gpus["p", "unavailable"] == 16
    model.set_node(4 * HOUR, next(iter(lost)), None)
    model.advance(4 * HOUR)
    assert 3 in model.running


def test_waits_and_gpu_seconds_integrate_what_the_jobs_did(month: Month) -> None:
    _, recorder, states, _ = month
    last = states[-1]
    now = last.time
    gpu_seconds: dict[tuple[str, str], float] = defaultdict(float)
    waits: dict[str, list[float]] = defaultdict(list)
    account_waits: dict[str, list[float]] = defaultdict(list)
    for job in recorder.started:
        assert job.start is not None
        end = min(job.end if job.end is not None else now, now)
        gpu_seconds[job.request.partition, job.request.account] += job.request.gpus * (
            end - job.start
        )
        waits[job.request.partition].append(job.start - (job.eligible or 0.0))
        account_waits[job.request.account].append(job.start - (job.eligible or 0.0))
    for key, seconds in last.allocated_gpu_seconds.items():
        assert seconds == pytest.approx(gpu_seconds.get(key, 0.0), rel=1e-9, abs=1e-6)
    # per partition and per account: the same jobs, split two ways
    assert set(last.account_waits) == {a for _, a in last.allocated_gpu_seconds}
    for histograms, by in ((last.waits, waits), (last.account_waits, account_waits)):
        assert set(by) <= set(histograms)
        for name, histogram in histograms.items():
            observed = by[name]
            assert histogram.count == len(observed)
            assert histogram.total == pytest.approx(sum(observed), rel=1e-9)
            assert histogram.counts == [sum(1 for w in observed if w <= b) for b in WAIT_BUCKETS]
    # the counters never go down, sample to sample
    for before, after in itertools.pairwise(states):
        for key, seconds in after.allocated_gpu_seconds.items():
            assert seconds >= before.allocated_gpu_seconds.get(key, 0.0)
        assert set(before.allocated_gpu_seconds) <= set(after.allocated_gpu_seconds)
    # and the allocated GPUs, sampled every 30 minutes, integrate to about the same
    # (a node in two partitions counts in each)
    for partition in PARTITIONS:
        held = sum(
            len(gpus) * (min(job.end or now, now) - (job.start or 0.0))
            for job in recorder.started
            for node, gpus in job.allocation.items()
            if node in partition.nodes
        )
        sampled = sum(s.gpus[partition.name, "allocated"] * 1800.0 for s in states)
        assert sampled == pytest.approx(held, rel=0.03)


def test_fair_share_usage_is_the_decayed_integral_of_what_each_account_held(month: Month) -> None:
    """Recomputed by summing each job's GPU-seconds with the decay of its own age, one
    minute at a time: an independent way to Slurm's decayed usage."""
    model, recorder, states, _ = month
    now, half_life = states[-1].time, model.half_life_s
    usage: dict[str, float] = defaultdict(float)
    for job in recorder.started:
        assert job.start is not None
        end = min(job.end if job.end is not None else now, now)
        t = job.start
        while t < end:
            span = min(60.0, end - t)
            usage[job.request.account] += (
                job.request.gpus * span * 2 ** (-(now - t - span / 2) / half_life)
            )
            t += span
    total = sum(usage.values())
    shares = {a.name: a.shares / sum(x.shares for x in ACCOUNTS) for a in ACCOUNTS}
    fair = states[-1].fairshare
    assert fair is not None
    for account, row in fair.items():
        assert row.shares_norm == pytest.approx(shares[account])
        assert row.usage_effective == pytest.approx(usage[account] / total, rel=1e-3)
        # Slurm's classic fair-share factor: 2^(-EffectvUsage / NormShares)
        assert row.factor == pytest.approx(2 ** (-row.usage_effective / row.shares_norm))


def test_pending_gpus_and_oldest_wait_match_the_jobs_waiting(month: Month) -> None:
    _, recorder, states, requests = month
    starts = {j.job_id: j for j in recorder.started}
    for state in states[::20]:
        waiting = [
            r
            for r in requests
            if r.submit <= state.time
            and (r.job_id not in starts or (starts[r.job_id].start or 0) > state.time)
        ]
        per_partition: Counter[str] = Counter()
        for request in waiting:
            per_partition[request.partition] += request.gpus
        pending: Counter[str] = Counter()
        for (partition, _, _), gpus in state.pending_gpus.items():
            pending[partition] += gpus
        assert pending == per_partition
        for partition, age in state.oldest_pending_s.items():
            # 0 once nobody waits there (the series stays); else no older than the job
            submits = [r.submit for r in waiting if r.partition == partition]
            assert age == 0 or 0 < age <= state.time - min(submits)


def test_the_same_seed_makes_the_same_queue_drawn_at_once_or_bit_by_bit() -> None:
    shapes = [PartitionShape("big", 32, 4, 8), PartitionShape("small", 4, 1, 4)]
    demand = Demand({"a": 1.0, "b": 0.5})
    whole = Arrivals(demand, shapes, seed=4, start=0.0).until(3 * DAY)
    parts = Arrivals(demand, shapes, seed=4, start=0.0)
    pieces = [r for day in range(1, 4) for r in parts.until(day * DAY)]
    other = Arrivals(demand, shapes, seed=5, start=0.0).until(3 * DAY)
    assert whole == pieces and len(whole) > 20
    assert [r.submit for r in other] != [r.submit for r in whole]
    first, second = _busy_month(seed=3), _busy_month(seed=3)
    assert first[2] == second[2]


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="no node n9"):
        QueueModel([SlurmNode("n0", 8)], [Partition("p", ("n9",))], ACCOUNTS, start=0.0)
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        _one_node(policy="lottery")
    model = _one_node()
    with pytest.raises(ValueError, match="no partition q"):
        model.submit(_request(1, 1, 1.0, partition="q"))
    with pytest.raises(ValueError, match="asks for no GPU"):
        _request(1, 0, 1.0)
    model.advance(HOUR)
    with pytest.raises(ValueError, match="before the queue's time"):
        model.set_limit(0.0, "a", 1)
