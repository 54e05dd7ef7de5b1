"""A simulated Slurm queue on a simulated clock: GPU jobs arrive, wait, start and end.

`QueueModel` is event-driven: submissions, job ends, hold releases, `--begin` times, node
state changes (drain, down, reserve, resume) and account limit changes are events at
simulated times; `advance(t)` applies every event up to `t` in order and runs a
scheduler pass (sched.py) after each instant that had one, so a job starts the
moment its GPUs are free. Between events nothing changes, which makes the integrals
exact: GPU-seconds per partition and account, and each account's decayed fair-share
usage. Nothing here draws a random number: the same requests give the same queue
(arrivals.py makes seeded requests).

`state()` is what the scheduler source would export at the model's time
(state.QueueState). A job that is neither held, waiting for its `--begin` time
nor for the job it depends on is eligible from that moment: its queue wait runs from
there to its start.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nvwatch.sim.queue.jobs import (
    DEPENDENCY,
    DONE,
    DOWN,
    HELD,
    NODE_REASONS,
    OTHER,
    REASON_CLASSES,
    RUNNING,
    WAITING,
    Account,
    Job,
    JobRequest,
    Partition,
    SlurmNode,
)
from nvwatch.sim.queue.sched import Start, schedule
from nvwatch.sim.queue.state import FairShare, QueueState, WaitHistogram, decayed, fair_shares

DEFAULT_HALF_LIFE_S = 7 * 86_400.0  # Slurm's PriorityDecayHalfLife default: 7-0
# PriorityMaxAge: a job's age factor grows to 1 over this long (Slurm's default is 7
# days; a day keeps a large job of an account over its share from waiting a week behind
# small jobs of the others)
DEFAULT_MAX_AGE_S = 86_400.0
POLICIES = ("fairshare", "fifo")
MIN_JOB_AGE_S = 300.0  # Slurm's MinJobAge default: how long an ended job stays listed

# event kinds, in the order events of one instant apply: GPUs freed first, then what
# changes the nodes and limits, then new jobs; a wake-up only asks for a pass
_END, _NODE, _LIMIT, _SUBMIT, _WAKE = range(5)


class QueueModel:
    """Nodes, partitions, accounts and jobs of one simulated Slurm cluster."""

    def __init__(
        self,
        nodes: Iterable[SlurmNode],
        partitions: Iterable[Partition],
        accounts: Iterable[Account],
        *,
        start: float,
        policy: str = "fairshare",
        half_life_s: float = DEFAULT_HALF_LIFE_S,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        accounting: bool = True,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown scheduling policy {policy!r} (known: {POLICIES})")
        self.now = start
        self.nodes = {node.name: node for node in nodes}
        self.partitions = {p.name: p for p in partitions}
        for partition in self.partitions.values():
            missing = [n for n in partition.nodes if n not in self.nodes]
            if missing:
                raise ValueError(f"partition {partition.name}: no node {missing[0]}")
        self.accounts = {a.name: a for a in accounts}
        self.policy = policy
        self.half_life_s = half_life_s
        self.max_age_s = max_age_s
        self.accounting = accounting
        self.pending: dict[int, Job] = {}
        self.running: dict[int, Job] = {}
        self.limits: dict[str, int] = {}
        self.usage = {name: 0.0 for name in self.accounts}  # decayed GPU-seconds
        self.gpu_seconds = {
            (p, a): 0.0 for p in self.partitions for a in self.accounts
        }  # GPU-seconds held, per (partition, account)
        self.waits = {p: WaitHistogram() for p in self.partitions}
        self.account_waits = {a: WaitHistogram() for a in self.accounts}
        self.holding: Counter[tuple[str, str]] = Counter()  # GPUs held now
        self.ended: deque[Job] = deque()  # jobs ended within MIN_JOB_AGE_S, oldest first
        self.on_start: list[Callable[[Job], None]] = []
        self.on_end: list[Callable[[Job], None]] = []
        # the (partition, account) pairs that have had a job, in order: their series
        # stay from then on (QueueState)
        self._pairs: dict[tuple[str, str], None] = {}
        self._events: list[tuple[float, int, int, Any]] = []
        self._seq = 0

    # -- input --------------------------------------------------------------------------

    def submit(self, request: JobRequest) -> None:
        """Queue `request` for its submission time (not before the model's time)."""
        if request.partition not in self.partitions:
            raise ValueError(f"job {request.job_id}: no partition {request.partition}")
        if request.account not in self.accounts:
            raise ValueError(f"job {request.job_id}: no account {request.account}")
        self._push(max(request.submit, self.now), _SUBMIT, request)

    def submit_all(self, requests: Iterable[JobRequest]) -> None:
        for request in requests:
            self.submit(request)

    def set_node(self, at: float, node: str, state: str | None, reason: str = "") -> None:
        """At `at`, take `node` out (a NODE_REASONS state, with sinfo's reason text) or
        put it back (None). Going down ends the jobs on it; drained or reserved, they
        run on and the node takes no new one."""
        if node not in self.nodes:
            raise ValueError(f"no node {node}")
        self._push(at, _NODE, (node, state, reason))

    def set_limit(self, at: float, account: str, gpus: int | None) -> None:
        """At `at`, limit the GPUs `account`'s running jobs may hold (None: no limit)."""
        self._push(at, _LIMIT, (account, gpus))

    def _push(self, at: float, kind: int, payload: Any) -> None:
        if at < self.now:
            raise ValueError(f"event at {at} is before the queue's time {self.now}")
        heapq.heappush(self._events, (at, kind, self._seq, payload))
        self._seq += 1

    # -- time ---------------------------------------------------------------------------

    def advance(self, until: float) -> None:
        """Apply every event up to `until`, scheduling after each instant, and integrate."""
        while self._events and self._events[0][0] <= until:
            at = self._events[0][0]
            self._integrate(at)
            while self._events and self._events[0][0] == at:
                _, kind, _, payload = heapq.heappop(self._events)
                self._apply(kind, payload)
            self._schedule()
        self._integrate(until)
        while self.ended and (self.ended[0].end or 0.0) < self.now - MIN_JOB_AGE_S:
            self.ended.popleft()

    def _integrate(self, until: float) -> None:
        span = until - self.now
        if span <= 0:
            return
        rates: Counter[str] = Counter()
        for (partition, account), gpus in self.holding.items():
            self.gpu_seconds[partition, account] += gpus * span
            rates[account] += gpus
        for account in self.usage:
            self.usage[account] = decayed(
                self.usage[account], rates[account], span, self.half_life_s
            )
        self.now = until

    def _apply(self, kind: int, payload: Any) -> None:
        if kind == _END:
            job = self.running.get(payload)
            if job is not None and job.end == self.now:
                self._finish(job)
        elif kind == _NODE:
            self._node_change(*payload)
        elif kind == _LIMIT:
            account, gpus = payload
            if gpus is None:
                self.limits.pop(account, None)
            else:
                self.limits[account] = gpus
        elif kind == _SUBMIT:
            self._arrive(payload)

    def _arrive(self, request: JobRequest) -> None:
        job = Job(request)
        if request.pinned is not None:
            node, gpus = request.pinned
            self._pin(job, node, gpus)
            return
        self.pending[request.job_id] = job
        self._pairs.setdefault((request.partition, request.account))
        for wake in (request.hold_until, request.begin):
            if wake is not None and math.isfinite(wake) and wake > self.now:
                self._push(wake, _WAKE, request.job_id)

    def _pin(self, job: Job, node_name: str, gpus: tuple[int, ...]) -> None:
        node = self.nodes[node_name]
        taken = [i for i in gpus if node.holders[i] is not None]
        if taken:
            raise ValueError(f"job {job.job_id}: GPU {taken[0]} of {node_name} is taken")
        for index in gpus:
            node.holders[index] = job.job_id
        job.eligible = self.now
        self._started(job, {node_name: tuple(gpus)})

    def _node_change(self, name: str, state: str | None, reason: str) -> None:
        node = self.nodes[name]
        node.unavailable, node.reason_text = state, reason if state else ""
        if state == DOWN:
            for job_id in sorted({h for h in node.holders if h is not None}):
                self._finish(self.running[job_id])

    # -- scheduling ---------------------------------------------------------------------

    def _schedule(self) -> None:
        eligible = [job for job in self.pending.values() if self._gate(job) is None]
        shares = self.fair_shares()
        if self.policy == "fairshare":
            eligible.sort(key=lambda j: (-self._priority(j, shares), j.job_id))
        else:
            eligible.sort(key=lambda j: (j.request.submit, j.job_id))
        starts = schedule(
            self.now, eligible, self.nodes, self.partitions, self.running.values(), self.limits
        )
        for start in starts:
            self._start(start)

    def _priority(self, job: Job, shares: dict[str, FairShare]) -> float:
        """Slurm's multifactor priority with equal weights for fair share and age: the
        fair-share factor plus the share of PriorityMaxAge the job has been eligible."""
        age = self.now - (job.eligible if job.eligible is not None else self.now)
        return shares[job.request.account].factor + min(1.0, age / self.max_age_s)

    def _gate(self, job: Job) -> str | None:
        """Why `job` may not start whatever the GPUs (held, too early, a dependency), or
        None: then it is eligible, from now if it was not before."""
        request = job.request
        if request.hold_until is not None and self.now < request.hold_until:
            job.reason = HELD
        elif request.begin is not None and self.now < request.begin:
            job.reason = OTHER
        elif request.after is not None and (
            request.after in self.pending or request.after in self.running
        ):
            job.reason = DEPENDENCY
        else:
            if job.eligible is None:
                job.eligible = self.now
            return None
        return job.reason

    def _start(self, start: Start) -> None:
        job = start.job
        del self.pending[job.job_id]
        count = job.request.gpus_per_node
        allocation = {node: self.nodes[node].take(job.job_id, count) for node in start.nodes}
        self._started(job, allocation)

    def _started(self, job: Job, allocation: dict[str, tuple[int, ...]]) -> None:
        request = job.request
        job.state, job.start, job.allocation = RUNNING, self.now, allocation
        job.end = self.now + request.run_s
        self.running[job.job_id] = job
        self._pairs.setdefault((request.partition, request.account))
        self.holding[request.partition, request.account] += request.gpus
        self.waits[request.partition].observe(job.wait_s or 0.0)
        self.account_waits[request.account].observe(job.wait_s or 0.0)
        if math.isfinite(job.end):
            self._push(job.end, _END, job.job_id)
        for hook in self.on_start:
            hook(job)

    def _finish(self, job: Job) -> None:
        request = job.request
        job.state, job.end = DONE, self.now
        del self.running[job.job_id]
        for node in job.allocation:
            self.nodes[node].release(job.job_id)
        self.holding[request.partition, request.account] -= request.gpus
        self.ended.append(job)
        for hook in self.on_end:
            hook(job)

    # -- what the scheduler source would read -------------------------------------------

    def fair_shares(self) -> dict[str, FairShare]:
        return fair_shares({a.name: a.shares for a in self.accounts.values()}, self.usage)

    def recently_ended(self) -> list[Job]:
        """The jobs that ended in the last MIN_JOB_AGE_S, oldest first: squeue lists them."""
        return list(self.ended)

    def jobs_on(self, node: str) -> list[Job]:
        """The running jobs holding GPUs of `node`, by job id."""
        held = {h for h in self.nodes[node].holders if h is not None}
        return [self.running[job_id] for job_id in sorted(held)]

    def state(self) -> QueueState:
        return QueueState(
            time=self.now,
            gpus=self._gpu_states(),
            nodes_unavailable=self._unavailable(),
            pending_gpus=self._pending(),
            oldest_pending_s=self._oldest(),
            waits={p: h.copy() for p, h in self.waits.items()},
            account_waits=self._account_waits(),
            fairshare=self.fair_shares() if self.accounting else None,
            allocated_gpu_seconds={pair: self.gpu_seconds[pair] for pair in self._pairs},
        )

    def _account_waits(self) -> dict[str, WaitHistogram]:
        """Per account that has had a job: the source's account histograms exist once the
        account has series of demand."""
        accounts = dict.fromkeys(a for _, a in self._pairs)
        return {a: self.account_waits[a].copy() for a in sorted(accounts)}

    def _gpu_states(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for partition in self.partitions.values():
            allocated = idle = unavailable = 0
            for name in partition.nodes:
                node = self.nodes[name]
                allocated += node.allocated
                if node.unavailable:
                    unavailable += node.gpus - node.allocated
                else:
                    idle += node.gpus - node.allocated
            counts[partition.name, "allocated"] = allocated
            counts[partition.name, "idle"] = idle
            counts[partition.name, "unavailable"] = unavailable
        return counts

    def _unavailable(self) -> dict[tuple[str, str], int]:
        counts = {(p, reason): 0 for p in self.partitions for reason in NODE_REASONS}
        for partition in self.partitions.values():
            for name in partition.nodes:
                state = self.nodes[name].unavailable
                if state:
                    counts[partition.name, state] += 1
        return counts

    def _pending(self) -> dict[tuple[str, str, str], int]:
        counts = {(p, a, reason): 0 for p, a in self._pairs for reason in REASON_CLASSES}
        for job in self.pending.values():
            request = job.request
            counts[request.partition, request.account, job.reason] += request.gpus
        return counts

    def _oldest(self) -> dict[str, float]:
        oldest = dict.fromkeys(self.partitions, 0.0)
        for job in self.pending.values():
            if job.reason in WAITING and job.eligible is not None:
                partition = job.request.partition
                oldest[partition] = max(oldest[partition], self.now - job.eligible)
        return oldest


def pending_jobs(model: QueueModel, partition: str) -> Sequence[Job]:
    """The pending jobs of `partition`, by job id."""
    return sorted(
        (j for j in model.pending.values() if j.request.partition == partition),
        key=lambda j: j.job_id,
    )
