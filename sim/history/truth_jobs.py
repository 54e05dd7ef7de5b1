"""The ground truth of a history's jobs (sim/history/jobs.py), from the samples written.

Over a job's life, the samples in (start, end] (a PromQL range `[end - start]` evaluated
at `end` sees those), as truth.py integrates: per GPU it holds, mean utilization, HBM
peak against the board's memory, mean power and power limit, the share of its life in
each clock-event reason the history writes, energy from the power samples (power x step)
and from the GPU's energy counter (its reading at `end` less its reading at `start`, the
sample before the job); per node, the BMC's node energy (DCMI power x step, as
truth_bmc.py integrates it), the job's share of it (1 where no other job held a GPU of
the node during its life, else the GPUs it holds over the node's GPUs) and the bytes its
HCA ports moved (their counters at `end` less at `start`). With each job, the notes it
should make `nvwatch job` write, from its plan; null for a drawn job (job_mix.py), whose
notes follow from where its figures fall among the cluster's, which no plan states.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nvwatch.sim.history.jobs import DRAWN, JobEpisode
from nvwatch.sim.history.series import Row
from nvwatch.sim.history.truth_bmc import DCMI, POWER

REASONS = ("sw_power_cap", "sw_thermal_slowdown")
_IB_BYTES = ("nvwatch_ib_port_transmit_bytes_total", "nvwatch_ib_port_receive_bytes_total")
_GPU_FAMILIES = frozenset(
    {
        "nvwatch_gpu_utilization_ratio",
        "nvwatch_gpu_memory_used_bytes",
        "nvwatch_gpu_memory_total_bytes",
        "nvwatch_gpu_power_watts",
        "nvwatch_gpu_power_limit_watts",
        "nvwatch_gpu_energy_joules_total",
        "nvwatch_gpu_clock_event_active",
    }
)


@dataclass
class GpuLife:
    samples: int = 0
    utilization: float = 0.0  # sums over the samples
    power_w: float = 0.0
    limit_w: float = 0.0
    memory_peak: float = 0.0
    memory_total: float = 0.0
    reasons: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    counter_first: float | None = None
    counter_last: float | None = None


@dataclass
class NodeLife:
    node_joules: float = 0.0
    ib_first: dict[str, float] = field(default_factory=dict)  # series -> counter at start
    ib_last: dict[str, float] = field(default_factory=dict)


class JobsTruth:
    def __init__(self, jobs: Sequence[JobEpisode], step: float, node_gpus: dict[str, int]) -> None:
        """`node_gpus`: each instance's GPU count."""
        self.jobs = tuple(jobs)
        self.node_gpus = node_gpus
        self.step = step
        # (instance, gpu) -> its life; keyed as a series' `gpu` label parses (None: none)
        self.gpus: list[dict[tuple[str, int | None], GpuLife]] = [
            {(n, g): GpuLife() for n in job.nodes for g in job.gpus} for job in jobs
        ]
        self.nodes = [{n: NodeLife() for n in job.nodes} for job in jobs]
        self._gpu_of: dict[str, int | None] = {}
        # a month of a large fleet holds tens of thousands of jobs: each sample looks at
        # its own node's only
        self._on_node: dict[str, list[tuple[int, JobEpisode]]] = defaultdict(list)
        for index, job in enumerate(self.jobs):
            for instance in job.nodes:
                self._on_node[instance].append((index, job))

    def observe(self, instance: str, t: float, rows: Sequence[Row]) -> None:
        """The rows written for `instance` at Unix time `t`."""
        for index, job in self._on_node.get(instance, ()):
            if job.runs_at(t):
                self._sample(index, instance, rows)
            elif job.runs_at(t + self.step):  # the sample before its life: counters' base
                self._base(index, instance, rows)

    def _gpu(self, labels: str) -> int | None:
        """The `gpu` label of a series (None: not a GPU's), parsed once per label set."""
        gpu = self._gpu_of.get(labels, -1)
        if gpu == -1:
            _, found, rest = labels.partition('gpu="')
            gpu = self._gpu_of[labels] = int(rest.split('"')[0]) if found else None
        return gpu

    def _base(self, index: int, instance: str, rows: Sequence[Row]) -> None:
        gpus, node = self.gpus[index], self.nodes[index][instance]
        for family, labels, value in rows:
            if family == "nvwatch_gpu_energy_joules_total":
                life = gpus.get((instance, self._gpu(labels)))
                if life is not None:
                    life.counter_first = value
            elif family in _IB_BYTES:
                node.ib_first[family + labels] = value

    def _sample(self, index: int, instance: str, rows: Sequence[Row]) -> None:
        gpus, node, step = self.gpus[index], self.nodes[index][instance], self.step
        for family, labels, value in rows:
            if family in _GPU_FAMILIES:
                gpu = self._gpu(labels)
                life = gpus.get((instance, gpu))
                if life is not None:
                    _add(life, family, labels, value)
            elif family == POWER and DCMI in labels:
                node.node_joules += value * step
            elif family in _IB_BYTES:
                node.ib_last[family + labels] = value

    # --- the truth file ------------------------------------------------------------------

    def to_json(self) -> list[dict[str, Any]]:
        return [self._job_json(i) for i in range(len(self.jobs))]

    def _job_json(self, index: int) -> dict[str, Any]:
        job = self.jobs[index]
        life_s = job.end - job.start
        gpus = [
            _gpu_json(instance, gpu or 0, life, self.step, life_s)
            for (instance, gpu), life in self.gpus[index].items()
        ]
        nodes = [self._node_json(index, instance) for instance in job.nodes]
        busy = [g for g in gpus if g["samples"]]
        return {
            "kind": job.kind,
            "job_id": job.job_id,
            "user": job.user,
            "account": job.account,
            "start": job.start,
            "end": job.end,
            "seconds": life_s,
            "gpus_held": len(gpus),
            "gpu_hours": len(gpus) * life_s / 3600,
            "utilization_mean": sum(g["utilization_mean"] for g in busy) / len(busy)
            if busy
            else None,
            "memory_peak_bytes": max((g["memory_peak_bytes"] for g in gpus), default=None),
            "energy_joules": sum(g["energy_joules"] for g in gpus),
            "energy_counter_joules": _total(g["energy_counter_joules"] for g in gpus),
            "node_energy_joules": sum(n["job_energy_joules"] for n in nodes),
            "ib_bytes": sum(n["ib_bytes"] for n in nodes),
            "notes": None if job.kind == DRAWN else list(job.notes),
            "nodes": nodes,
            "gpus": gpus,
        }

    def _node_json(self, index: int, instance: str) -> dict[str, Any]:
        job, life = self.jobs[index], self.nodes[index][instance]
        others = [
            other.job_id
            for _, other in self._on_node[instance]
            if other is not job and other.start < job.end and job.start < other.end
        ]
        held = len(job.gpus)
        share = 1.0 if not others else held / self.node_gpus[instance]
        moved = {series: life.ib_last[series] - first for series, first in life.ib_first.items()}
        per_direction: dict[str, float] = defaultdict(float)
        for series, count in moved.items():
            per_direction["transmit" if "transmit" in series else "receive"] += count
        return {
            "instance": instance,
            "gpus": list(job.gpus),
            "shared_with": others,
            "share": share,
            "node_energy_joules": life.node_joules,
            "job_energy_joules": share * life.node_joules,
            "ib_transmit_bytes": per_direction["transmit"],
            "ib_receive_bytes": per_direction["receive"],
            "ib_bytes": sum(moved.values()),
        }


def _add(life: GpuLife, family: str, labels: str, value: float) -> None:
    if family == "nvwatch_gpu_utilization_ratio":
        life.samples += 1
        life.utilization += value
    elif family == "nvwatch_gpu_memory_used_bytes":
        life.memory_peak = max(life.memory_peak, value)
    elif family == "nvwatch_gpu_memory_total_bytes":
        life.memory_total = value
    elif family == "nvwatch_gpu_power_watts":
        life.power_w += value
    elif family == "nvwatch_gpu_power_limit_watts":
        life.limit_w += value
    elif family == "nvwatch_gpu_energy_joules_total":
        life.counter_last = value
    else:  # nvwatch_gpu_clock_event_active
        for reason in REASONS:
            if f'reason="{reason}"' in labels:
                life.reasons[reason] += int(value)


def _gpu_json(instance: str, gpu: int, life: GpuLife, step: float, life_s: float) -> dict[str, Any]:
    n = life.samples or 1
    counter = None
    if life.counter_first is not None and life.counter_last is not None:
        counter = life.counter_last - life.counter_first
    return {
        "instance": instance,
        "gpu": gpu,
        "samples": life.samples,
        "utilization_mean": life.utilization / n,
        "memory_peak_bytes": life.memory_peak,
        "memory_total_bytes": life.memory_total,
        "memory_peak_share": life.memory_peak / life.memory_total if life.memory_total else None,
        "power_mean_watts": life.power_w / n,
        "power_limit_mean_watts": life.limit_w / n,
        "clock_event_share": {
            r: count * step / life_s for r, count in life.reasons.items() if count
        },
        "energy_joules": life.power_w * step,
        "energy_counter_joules": counter,
    }


def _total(values: Any) -> float | None:
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total
