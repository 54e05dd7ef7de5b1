"""What a GPU (and an HCA port) of a history runs over time: its jobs, one after another.

A `TimelineWorkload` is a training `Workload` (the node's seed and step timing, so every
GPU of a node stays in phase) whose levels are scaled, span by span, by the `JobLoad` of
the job holding the GPU then: a job's GPU that computes a quarter of the time (its data
loader starves it) runs the training step a quarter of the time, so its utilization,
power above idle, GPM activity and NVLink traffic are a quarter of a busy one's; an idle
GPU of a job runs nothing. Power, energy, temperature and clocks then follow from the
GPU model as for any workload. Between jobs it runs `outside`: the node's own workload
(training, or nothing on an idle node), or nothing where another GPU of the node is held
by a job (a Slurm node is given to one job's allocation, the rest idle unless another
job holds them), or nothing on a node of drawn jobs (job_mix.py), between them.

An HCA port reads the same timeline in its `ib` view: it carries a job's all-reduce only
when the job's inter-node traffic takes InfiniBand (a multi-node job that uses it); a
single-node job's traffic stays on NVLink, and a multi-node job that does not use IB
leaves the port with only its management traffic.

Spans are (start, end] in the simulator's seconds and fall on the history's step grid,
which a GPU's sub-steps divide: a sub-step lies in one span, and a sample at t reads the
span holding t.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from nvwatch.sim.workload import MEMORY_SHARE, TRAINING_ALLREDUCE, TRAINING_COMPUTE, Workload


@dataclass(frozen=True)
class JobLoad:
    """How hard a job drives one GPU: `duty`, the share of time it runs the training step
    (0: the GPU idles), `memory_share` of the board its processes hold, and whether the
    job's inter-node traffic takes InfiniBand."""

    duty: float
    memory_share: float
    infiniband: bool = False


# a reading this close after a bound is still of the span before it (the clock adds up
# sub-steps in floating point)
TIME_SLACK_S = 1e-6
BUSY = JobLoad(1.0, MEMORY_SHARE["training"], infiniband=True)  # the node's own training
IDLE = JobLoad(0.0, 0.0)
# a training GPU's utilization averaged over its step (compute and all-reduce phases)
_COMM = Workload().comm_fraction
TRAINING_MEAN_UTILIZATION = (1 - _COMM) * TRAINING_COMPUTE[0] + _COMM * TRAINING_ALLREDUCE[0]


@dataclass(frozen=True)
class Span:
    start: float  # exclusive, simulator seconds
    end: float  # inclusive
    load: JobLoad


@dataclass(frozen=True)
class TimelineWorkload(Workload):
    """`spans` (sorted, disjoint) over `outside`; `ib` reads it as an HCA port does."""

    # identifies the timeline in a cache key: hashing every span at each sub-step would
    # cost more than the sub-step
    name: str = ""
    outside: JobLoad = BUSY
    ib: bool = False
    spans: tuple[Span, ...] = field(default=(), compare=False)
    _ends: tuple[float, ...] = field(init=False, repr=False, compare=False, default=())
    exact_means = True  # training_means below is exact over any span

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "_ends", tuple(span.end for span in self.spans))

    def load_at(self, t: float) -> JobLoad:
        """The load of the span holding `t` (start < t <= end), else `outside`."""
        t -= TIME_SLACK_S
        index = bisect.bisect_left(self._ends, t)
        if index < len(self.spans) and self.spans[index].start < t:
            return self.spans[index].load
        return self.outside

    def _duty(self, load: JobLoad) -> float:
        return load.duty if load.infiniband or not self.ib else 0.0

    def gpu_utilization(self, t: float, gpu: int = 0) -> float:
        return self.load_at(t).duty * Workload.gpu_utilization(self, t, gpu)

    def compute_intensity(self, t: float, gpu: int = 0) -> float:
        return self.load_at(t).duty * Workload.compute_intensity(self, t, gpu)

    def comm_intensity(self, t: float) -> float:
        return self._duty(self.load_at(t)) * Workload.comm_intensity(self, t)

    def memory_share(self, t: float) -> float:
        return self.load_at(t).memory_share

    def training_means(self, t0: float, t1: float) -> tuple[float, float, float]:
        """Exact means over [t0, t1], piece by piece between the spans' bounds."""
        if t1 <= t0:
            load = self.load_at(t0)
            util, intensity, comm = Workload.training_means(self, t0, t1)
            return load.duty * util, load.duty * intensity, self._duty(load) * comm
        inner = self._bounds_within(t0, t1)
        if not inner:  # the common case: a sub-step within one span or between two
            load = self.load_at(t1)
            util, intensity, comm = Workload.training_means(self, t0, t1)
            return load.duty * util, load.duty * intensity, self._duty(load) * comm
        cuts = [t0, *inner, t1]
        sums = [0.0, 0.0, 0.0]
        for a, b in itertools.pairwise(cuts):
            load = self.load_at((a + b) / 2)
            util, intensity, comm = Workload.training_means(self, a, b)
            weights = (load.duty, load.duty, self._duty(load))
            for i, (level, weight) in enumerate(zip((util, intensity, comm), weights, strict=True)):
                sums[i] += weight * level * (b - a)
        span = t1 - t0
        return sums[0] / span, sums[1] / span, sums[2] / span

    def _bounds_within(self, t0: float, t1: float) -> list[float]:
        first = bisect.bisect_left(self._ends, t0)
        if first == len(self.spans) or self.spans[first].start >= t1:
            return []
        bounds: list[float] = []
        for span in self.spans[first:]:
            if span.start >= t1:
                break
            bounds += [b for b in (span.start, span.end) if t0 < b < t1]
        return bounds


def timeline(
    base: Workload,
    name: str,
    spans: Sequence[Span],
    *,
    ib: bool = False,
    outside: JobLoad | None = None,
) -> TimelineWorkload:
    """`base` (its seed and timing) running `spans`; between them `outside`, by default
    what `base` runs."""
    if outside is None:
        outside = IDLE if base.kind == "idle" else BUSY
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(Workload) if f.init}
    fields["kind"] = "training"
    fields["cold_start"] = False
    return TimelineWorkload(
        **fields, name=name, outside=outside, ib=ib, spans=tuple(sorted(spans, key=_start))
    )


def _start(span: Span) -> float:
    return span.start
