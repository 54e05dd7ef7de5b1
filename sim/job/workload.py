"""The workload one rank of a synchronous job runs: its job's step, read cell by cell.

A `RankWorkload` is a training `Workload` whose levels come from the job (model.py): the
rank's GPU (SimulatedGpu.run) and the HCA port of its rail read it as they read any
workload, so power, clocks, GPM activity, NVLink, PCIe and InfiniBand counters follow
the job's step with no change to how they integrate. Its levels are the step's
averages: a poll (seconds apart) sees averages of the ~2 s steps anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nvwatch.sim.job.model import SyncJob
from nvwatch.sim.workload import Workload


@dataclass(frozen=True)
class RankWorkload(Workload):
    job: SyncJob | None = field(default=None, compare=True)
    rank: int = 0
    # a slower rank computes longer (its share of the step grows), not less per cycle
    paced_by_clocks = True
    # its levels are step averages, constant over each cell: mean_levels is exact
    exact_means = True

    def _job(self) -> SyncJob:
        if self.job is None:
            raise ValueError("a rank's workload needs its job")
        return self.job

    def gpu_utilization(self, t: float, gpu: int = 0) -> float:
        return self._job().state(t).levels(self.rank)[0]

    def compute_intensity(self, t: float, gpu: int = 0) -> float:
        return self._job().state(t).levels(self.rank)[1]

    def comm_intensity(self, t: float) -> float:
        return self._job().state(t).levels(self.rank)[2]

    def training_means(self, t0: float, t1: float) -> tuple[float, float, float]:
        return self._job().mean_levels(self.rank, t0, t1)
