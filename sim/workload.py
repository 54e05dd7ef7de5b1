"""What the simulated machine is doing: one workload drives GPUs, NVLink and InfiniBand.

Both the simulated NVML and the simulated sysfs fabric read the same `Workload`, so a
training job shows GPU utilization, NVLink bytes and IB bytes rising together, as on a
real DGX running data-parallel training: a compute phase, then an all-reduce burst.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field

WORKLOAD_KINDS = ("training", "inference", "idle")

# Training levels per phase: (utilization, compute intensity, comm intensity). NCCL kernels
# count as busy, so utilization stays high in the all-reduce; a data-parallel job draws
# near 85 % of the dynamic range while computing, less in the all-reduce (averaged, a
# healthy node sits around 75 % of its TDP).
TRAINING_COMPUTE = (0.97, 0.85, 0.03)
TRAINING_ALLREDUCE = (0.88, 0.45, 0.75)
INTENSITY_SAMPLES = 8  # samples per GPU model sub-step when averaging the workload
# A sub-step this many workload steps long or more averages a training job exactly
# instead of by samples, which would alias against the ~2 s step (long sub-steps come
# from big clock jumps and from a history stepped minutes at a time).
EXACT_MEANS_MIN_STEPS = 8
# Share of the board's memory a workload's processes hold: frameworks' caching
# allocators grab most of it for training, a served model less, nothing runs when idle.
MEMORY_SHARE = {"training": 0.85, "inference": 0.40, "idle": 0.0}


@dataclass(frozen=True)
class Workload:
    kind: str = "training"
    seed: int = 0
    step_seconds: float = 2.0  # one training step: compute, then gradient all-reduce
    comm_fraction: float = 0.3  # share of the step spent in the all-reduce burst
    # The job has just started on GPUs that sat idle (the cold-start scenario): they
    # warm up over their thermal time constant. Otherwise the simulation begins in the
    # workload's thermal steady state, as on a node that has been running it.
    cold_start: bool = False
    # True where the workload's time shares already stretch with the GPU's clocks (a
    # synchronous job's rank computes longer when slower: sim/job/), so its activity
    # per cycle does not fall with them a second time
    paced_by_clocks = False
    # True where training_means is exact over any span, not only over many steps (a
    # synchronous job's rank reads step averages per cell): integrating it needs no
    # sampling of its instants, which would cost a history of such jobs most of its time
    exact_means = False
    _offset: float = field(init=False, repr=False, compare=False, default=0.0)
    _period: float = field(init=False, repr=False, compare=False, default=0.0)

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            raise ValueError(f"unknown workload {self.kind!r} (known: {WORKLOAD_KINDS})")
        draw = random.Random(self.seed)
        # Per seed: an offset, so the nodes of a fleet are not in lock-step, and a step
        # length stretched by up to 23 % by an irrational-ish factor, so a poll interval
        # that is a whole number of nominal steps does not sample one phase forever.
        object.__setattr__(self, "_offset", draw.random() * self.step_seconds)
        object.__setattr__(self, "_period", self.step_seconds * (1.0 + 0.23 * draw.random()))

    def _phase(self, t: float) -> float:
        return ((t + self._offset) % self._period) / self._period

    def gpu_utilization(self, t: float, gpu: int = 0) -> float:
        """Fraction of time a kernel runs (nvidia-smi utilization.gpu), 0..1."""
        if self.kind == "idle":
            return 0.0
        if self.kind == "inference":
            # diurnal-ish request load with per-GPU jitter
            base = 0.45 + 0.25 * math.sin(2 * math.pi * t / 600.0 + gpu)
            return max(0.05, min(1.0, base))
        return self._training_level(t)[0]

    def compute_intensity(self, t: float, gpu: int = 0) -> float:
        """How hard the SMs/tensor cores work, 0..1; drives power above idle."""
        if self.kind == "idle":
            return 0.0
        if self.kind == "inference":
            return 0.6 * self.gpu_utilization(t, gpu)
        return self._training_level(t)[1]

    def memory_share(self, t: float) -> float:
        """Share of the board's memory the workload's processes hold at `t`."""
        return MEMORY_SHARE[self.kind]

    def comm_intensity(self, t: float) -> float:
        """Fraction of the NVLink/IB line rate in use right now, 0..1."""
        if self.kind == "idle":
            return 0.0
        if self.kind == "inference":
            return 0.02
        return self._training_level(t)[2]

    def _training_level(self, t: float) -> tuple[float, float, float]:
        return TRAINING_COMPUTE if self._phase(t) < 1 - self.comm_fraction else TRAINING_ALLREDUCE

    def _compute_time_by(self, t: float) -> float:
        """Seconds a training job spent computing (not in the all-reduce) from its phase 0
        up to t: whole periods, then the part of the current one."""
        compute_s = (1 - self.comm_fraction) * self._period
        periods, into = divmod(t + self._offset, self._period)
        return periods * compute_s + min(into, compute_s)

    def training_means(self, t0: float, t1: float) -> tuple[float, float, float]:
        """Exact (utilization, compute intensity, comm intensity) of a training job averaged
        over [t0, t1]: the share of the span in the compute phase, whatever its length.

        For long spans (a history generated minutes of simulated time per step) where a
        handful of samples would alias against the step period.
        """
        if t1 <= t0:
            return self._training_level(t0)
        share = (self._compute_time_by(t1) - self._compute_time_by(t0)) / (t1 - t0)
        (u_c, i_c, c_c), (u_a, i_a, c_a) = TRAINING_COMPUTE, TRAINING_ALLREDUCE
        rest = 1.0 - share
        return share * u_c + rest * u_a, share * i_c + rest * i_a, share * c_c + rest * c_a

    def comm_integral(self, t0: float, t1: float) -> float:
        """Exact integral of comm_intensity over [t0, t1] (line-rate seconds)."""
        if t1 <= t0 or self.kind == "idle":
            return 0.0
        if self.kind == "inference":
            return self.comm_intensity(t0) * (t1 - t0)
        return self.training_means(t0, t1)[2] * (t1 - t0)

    def mean_compute_intensity(self, t0: float, t1: float, gpu: int = 0, steps: int = 64) -> float:
        """Average of compute_intensity over [t0, t1]."""
        if t1 <= t0:
            return self.compute_intensity(t0, gpu)
        dt = (t1 - t0) / steps
        return sum(self.compute_intensity(t0 + (i + 0.5) * dt, gpu) for i in range(steps)) / steps

    def mean_comm_intensity(self, t0: float, t1: float, steps: int = 64) -> float:
        """Average of comm_intensity over [t0, t1], for integrating byte counters."""
        if t1 <= t0:
            return 0.0
        dt = (t1 - t0) / steps
        return sum(self.comm_intensity(t0 + (i + 0.5) * dt) for i in range(steps)) / steps


@functools.lru_cache(maxsize=4096)
def workload_means(
    workload: Workload, gpu: int, t0: float, t1: float
) -> tuple[float, float, float]:
    """(compute intensity, utilization, comm intensity) of GPU `gpu` (-1: any GPU of a
    training job, which all run alike) averaged over [t0, t1]: one GPU model sub-step."""
    long_enough = t1 - t0 >= EXACT_MEANS_MIN_STEPS * workload.step_seconds
    if workload.kind == "training" and (long_enough or workload.exact_means):
        util, intensity, comm = workload.training_means(t0, t1)
        return intensity, util, comm
    index = max(gpu, 0)
    dt = (t1 - t0) / INTENSITY_SAMPLES
    times = [t0 + (i + 0.5) * dt for i in range(INTENSITY_SAMPLES)]
    intensity = sum(workload.compute_intensity(t, index) for t in times) / INTENSITY_SAMPLES
    util = sum(workload.gpu_utilization(t, index) for t in times) / INTENSITY_SAMPLES
    # the same midpoint rule as Workload.mean_comm_intensity(t0, t1, INTENSITY_SAMPLES)
    comm = sum(workload.comm_intensity(t) for t in times) / INTENSITY_SAMPLES
    return intensity, util, comm
