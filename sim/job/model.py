"""The step of a synchronous job, and each rank's share of it.

A healthy step lasts STEP_S: (1 - COMM_FRACTION) of it computing, the rest in the
all-reduce. Rank r, with speeds (compute s, comm b, input i: shadow.py), needs

    compute  C_r = C0 / s             (its clocks)
    input    D_r = max(0, C0 / i - C_r)  (its loaders prefetch while it computes; a
                                      starved host makes it wait for the batch)
    comm     M_r = M0 / b             (its slowest all-reduce path)

and the job's step is T = max_r (C_r + D_r + M_r): every rank waits for the slowest in
the all-reduce, W_r = T - C_r - D_r - M_r, in an NCCL kernel. Over the step a rank's GPU
is busy (utilization) computing, communicating and waiting, idle while it waits for
input; its SMs work hard only while computing, so its power, SM, tensor and DRAM
activity fall with its waiting share. Every rank moves one step's gradients per step,
so the job's NVLink and InfiniBand bytes per second fall as its step grows.

Two imbalances are by design, not faults (SyncJobPlan): a pipeline-parallel job's stages
compute different shares of a step (`compute_weights`: C_r = w_r C0 / s), so the lighter
stages wait on the heaviest; and a checkpoint (`pauses`) stops every rank together, each
GPU idle while the host writes the job's state.

The job's time runs in cells of CELL_S from its start: at each cell the ranks' shadows
are stepped to it, under the load each rank ran in the cell before, and the step is
computed once for every rank; a cell's state is a function of its time alone, so every
node of the job, and every GPU of a node, reads the same state whenever it asks.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from nvwatch.sim.job.plan import SyncJobPlan
from nvwatch.sim.job.shadow import HEALTHY, RankShadow, RankSpeeds
from nvwatch.sim.workload import TRAINING_ALLREDUCE, TRAINING_COMPUTE, Workload

CELL_S = 5.0  # the ranks' speeds move with faults' onsets and over thermal minutes
_NOMINAL = Workload()
STEP_S = _NOMINAL.step_seconds  # a healthy step
COMM_FRACTION = _NOMINAL.comm_fraction
COMPUTE_S = (1.0 - COMM_FRACTION) * STEP_S  # C0
COMM_S = COMM_FRACTION * STEP_S  # M0
# (utilization, compute intensity) of a GPU in an NCCL kernel waiting for the other
# ranks: busy to nvidia-smi, the SMs spinning on flags at a fraction of their power
NCCL_WAIT = (TRAINING_ALLREDUCE[0], 0.15)
# (utilization, compute intensity, comm intensity) of a GPU while its job checkpoints:
# the host writes the state the GPU handed over; the GPU runs nothing
CHECKPOINTING = (0.02, 0.02, 0.0)
# Cells kept behind the newest: every GPU of a node asks for the same span within a tick
# of the others, so the span of the widest question asked (a poll's interval, a history's
# step), with room to spare, is all that need stay; never fewer than this many. Keeping
# thousands made a 124-node fleet of jobs grow by ~25 MB a minute for hours.
_MIN_CACHED_CELLS = 720  # an hour
_CACHE_SPARE_CELLS = 8


@dataclass(frozen=True)
class RankTimes:
    """One rank's seconds per job step."""

    compute: float
    input: float
    comm: float
    wait: float

    @property
    def busy(self) -> float:
        """Seconds of the step it needs, not waiting for the others."""
        return self.compute + self.input + self.comm


@dataclass(frozen=True)
class JobState:
    """The job over one cell: its step and every rank's share of it."""

    step_s: float
    ranks: tuple[RankTimes, ...]
    speeds: tuple[RankSpeeds, ...]
    checkpointing: bool = False  # every rank stopped together (SyncJobPlan.pauses)

    def levels(self, rank: int) -> tuple[float, float, float]:
        """(utilization, compute intensity, comm intensity) of rank `rank`'s GPU,
        averaged over the step."""
        if self.checkpointing:
            return CHECKPOINTING
        times, step = self.ranks[rank], self.step_s
        (u_c, i_c, c_c), (u_a, i_a, c_a) = TRAINING_COMPUTE, TRAINING_ALLREDUCE
        u_w, i_w = NCCL_WAIT
        util = (u_c * times.compute + u_a * times.comm + u_w * times.wait) / step
        intensity = (i_c * times.compute + i_a * times.comm + i_w * times.wait) / step
        # one healthy step's traffic, whatever the step's length
        comm = (c_c * COMPUTE_S + c_a * COMM_S) / step
        return util, intensity, comm


def rank_times(speeds: RankSpeeds, weight: float = 1.0) -> RankTimes:
    """A rank's own seconds per step at these speeds, before any wait; `weight`: its
    share of a data-parallel rank's compute (a pipeline stage's)."""
    compute = weight * COMPUTE_S / speeds.compute
    loading = weight * COMPUTE_S / speeds.input
    return RankTimes(compute, max(0.0, loading - compute), COMM_S / speeds.comm, 0.0)


def job_state(speeds: tuple[RankSpeeds, ...], weights: tuple[float, ...] = ()) -> JobState:
    own = [rank_times(s, weights[i] if weights else 1.0) for i, s in enumerate(speeds)]
    step = max((t.busy for t in own), default=STEP_S)
    # ranks at equal speeds (most of a job) share one RankTimes: a cell is then a tuple
    # of references, and the cells a job keeps cost little
    shared: dict[RankTimes, RankTimes] = {}
    ranks = tuple(
        shared.setdefault(r, r)
        for r in (RankTimes(t.compute, t.input, t.comm, step - t.busy) for t in own)
    )
    return JobState(step, ranks, speeds)


class SyncJob:
    """One synchronous job as one node follows it, from its plan, on time from `start`."""

    def __init__(self, plan: SyncJobPlan, clock: Callable[[], float]) -> None:
        self.plan = plan
        self.start = start = clock()
        self.shadows: dict[int, RankShadow] = {
            i: RankShadow(plan, rank, start, clock)
            for i, rank in enumerate(plan.ranks)
            if RankShadow.needed(plan, rank)
        }
        self._cells: OrderedDict[int, JobState] = OrderedDict()
        self._next = 0  # the first cell not computed yet
        self._keep = _MIN_CACHED_CELLS
        self._last = job_state(tuple(HEALTHY for _ in plan.ranks), plan.compute_weights)

    def repair(self, node: int, what: str | None) -> None:
        """Node `node` was repaired (SimulatedNode.repair): its ranks speed up from the
        next cell not computed yet."""
        for rank, shadow in self.shadows.items():
            if self.plan.ranks[rank].node == node:
                shadow.repair(what)

    def cell(self, t: float) -> int:
        return max(0, math.floor((t - self.start) / CELL_S))

    def state(self, t: float) -> JobState:
        """The job's state over the cell holding `t`."""
        index = self.cell(t)
        while self._next <= index:
            self._compute(self._next)
        found = self._cells.get(index)
        if found is None:  # long evicted: the oldest kept is the nearest there is
            found = next(iter(self._cells.values()))
        return found

    def _compute(self, index: int) -> None:
        t = self.start + index * CELL_S
        speeds = list(HEALTHY for _ in self.plan.ranks)
        for rank, shadow in self.shadows.items():
            # the load the rank's GPU ran over the cell before, its waits included
            util, intensity, _ = self._last.levels(rank)
            speeds[rank] = shadow.speeds(t, intensity, util)
        self._last = job_state(tuple(speeds), self.plan.compute_weights)
        if self.plan.paused(index * CELL_S):
            self._last = dataclasses.replace(self._last, checkpointing=True)
        self._cells[index] = self._last
        self._next = index + 1
        while len(self._cells) > self._keep:
            self._cells.popitem(last=False)

    def mean_levels(self, rank: int, t0: float, t1: float) -> tuple[float, float, float]:
        """Rank `rank`'s levels averaged over [t0, t1], cell by cell."""
        if t1 <= t0:
            return self.state(t0).levels(rank)
        # the node's other GPUs ask for this span next: its cells stay until they have
        self._keep = max(self._keep, self.cell(t1) - self.cell(t0) + _CACHE_SPARE_CELLS)
        totals = [0.0, 0.0, 0.0]
        t = t0
        while t < t1:
            end = min(t1, self.start + (self.cell(t) + 1) * CELL_S)
            for i, level in enumerate(self.state(t).levels(rank)):
                totals[i] += level * (end - t)
            t = end
        span = t1 - t0
        return totals[0] / span, totals[1] / span, totals[2] / span
