"""The ground truth of a generated history: what it wrote, integrated, for tests to check.

Integrals are over the samples written, each standing for the step before it (the
window (start, end], as a PromQL range `[end - start]` evaluated at `end` sees them):
energy in kWh is the sum of a node's GPU power samples times the step, GPU-hours busy
the sum of utilization samples times the step. The simulator's own energy counter over
the same window is recorded beside it, as an independent check of the sampling.

Per episode, what it did in its window on its target, from the same samples: seconds in
thermal slowdown and the hottest reading, seconds at the power cap, the transmit-wait
share of the congested port, the XIDs raised, the scrapes missed. What the BMCs' series
hold (node energy, the non-GPU share per class, inlet air per rack against the envelope,
the fan and supply failures) is in nvwatch.sim.history.truth_bmc; what each placed job
did (utilization, HBM, power, energy, its node share, IB bytes, the notes it should
draw) in nvwatch.sim.history.truth_jobs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nvwatch.sim.fabric.ib_port import XMIT_WAIT_TICKS_PER_SECOND
from nvwatch.sim.history.plan import HistoryPlan
from nvwatch.sim.history.queue import plan_queue
from nvwatch.sim.history.scheduler import CONTROLLER
from nvwatch.sim.history.series import UP, Row
from nvwatch.sim.history.truth_bmc import BMC_EPISODES, BmcTruth
from nvwatch.sim.history.truth_jobs import JobsTruth
from nvwatch.sim.history.truth_queue import QueueTruth
from nvwatch.sim.profiles import get_profile

_KWH = 3.6e6


@dataclass
class NodeTotals:
    instance: str
    node_class: str
    rack: str
    cluster: str
    gpus: int
    power_joules: float = 0.0  # from the power samples written
    busy_gpu_seconds: float = 0.0
    up_gpu_seconds: float = 0.0
    samples: int = 0
    missed_scrapes: int = 0
    energy_counter_first: float | None = None
    energy_counter_last: float = 0.0


@dataclass
class EpisodeStats:
    seconds: float = 0.0  # seconds the episode's signal was on in the samples
    peak: float | None = None  # hottest reading, lowest power limit ...
    first: float | None = None  # a counter at the first sample of the window
    last: float | None = None
    values: dict[str, float] = field(default_factory=dict)


class GroundTruth:
    def __init__(self, plan: HistoryPlan) -> None:
        self.plan = plan
        self.nodes = {
            s.name: NodeTotals(s.name, s.profile, s.rack, s.cluster, 0) for s in plan.nodes
        }
        self.episodes = [EpisodeStats() for _ in plan.episodes]
        self.bmc = BmcTruth(plan)
        self.queue_plan = plan_queue(plan)
        self.queue = QueueTruth(plan, self.queue_plan.episodes)
        gpus = {spec.name: get_profile(spec.profile).gpu_count for spec in plan.nodes}
        self.jobs = JobsTruth(plan.job_episodes, plan.step, gpus)

    def observe(self, instance: str, t: float, rows: list[Row]) -> None:
        """The rows written for `instance` at Unix time `t`."""
        totals = self.nodes[instance]
        self.bmc.observe(instance, t, rows)
        self.jobs.observe(instance, t, rows)
        in_window = t > self.plan.start  # the first sample stands for no step
        step = self.plan.step if in_window else 0.0
        energy = 0.0
        gpus = 0
        for family, _labels, value in rows:
            if family == "nvwatch_gpu_power_watts":
                totals.power_joules += value * step
            elif family == "nvwatch_gpu_utilization_ratio":
                totals.busy_gpu_seconds += value * step
            elif family == "nvwatch_gpu_up":
                totals.up_gpu_seconds += value * step
                gpus += 1
            elif family == "nvwatch_gpu_energy_joules_total":
                energy += value
            elif family == UP and value == 0.0 and in_window:
                totals.missed_scrapes += 1
        totals.gpus = max(totals.gpus, gpus)
        totals.samples += 1
        if gpus:
            if totals.energy_counter_first is None:
                totals.energy_counter_first = energy
            totals.energy_counter_last = energy
        for index, episode in enumerate(self.plan.episodes):
            if episode.node == instance and episode.start < t <= episode.end:
                self._episode(index, rows, step)

    def _episode(self, index: int, rows: list[Row], step: float) -> None:
        episode, stats = self.plan.episodes[index], self.episodes[index]
        gpu = f'gpu="{episode.gpu}"' if episode.gpu is not None else "gpu="
        device = f'device="{episode.device}"'
        for family, labels, value in rows:
            if episode.kind == "thermal-runaway" and gpu in labels:
                if family == "nvwatch_gpu_clock_event_active" and "sw_thermal" in labels:
                    stats.seconds += value * step
                elif family == "nvwatch_gpu_temperature_celsius" and 'sensor="gpu"' in labels:
                    stats.peak = value if stats.peak is None else max(stats.peak, value)
            elif episode.kind == "power-capped":
                if family == "nvwatch_gpu_clock_event_active" and "sw_power_cap" in labels:
                    stats.seconds += value * step  # GPU-seconds at the cap
                elif family == "nvwatch_gpu_power_limit_watts":
                    stats.peak = value if stats.peak is None else min(stats.peak, value)
            elif episode.kind == "ib-congestion" and device in labels:
                if family == "nvwatch_ib_port_transmit_wait_total":
                    stats.first = value if stats.first is None else stats.first
                    stats.last = value
                    stats.seconds += step
            elif episode.kind == "ecc-dbe" and family == "nvwatch_gpu_xid_errors_total":
                if gpu in labels:
                    xid = labels.split('xid="')[1].split('"')[0]
                    stats.values[xid] = value
            elif episode.kind == "agent-down" and family == UP and value == 0.0:
                stats.seconds += step

    def to_json(self) -> dict[str, Any]:
        plan = self.plan
        nodes = []
        for totals in self.nodes.values():
            counter = totals.energy_counter_last - (totals.energy_counter_first or 0.0)
            nodes.append(
                {
                    "instance": totals.instance,
                    "node_class": totals.node_class,
                    "rack": totals.rack,
                    "cluster": totals.cluster,
                    "gpus": totals.gpus,
                    "energy_kwh": totals.power_joules / _KWH,
                    "energy_counter_kwh": counter / _KWH,
                    "gpu_hours_up": totals.up_gpu_seconds / 3600,
                    "gpu_hours_busy": totals.busy_gpu_seconds / 3600,
                    "samples": totals.samples,
                    "missed_scrapes": totals.missed_scrapes,
                    **self.bmc.node_json(totals.instance),
                }
            )
        return {
            "start": plan.start,
            "end": plan.end,
            "step_seconds": plan.step,
            "window": "(start, end]: each sample stands for the step before it",
            "nodes": nodes,
            "classes": self.bmc.classes_json(
                {name: totals.power_joules for name, totals in self.nodes.items()}
            ),
            "racks": self.bmc.racks_json(),
            "episodes": [self._episode_json(i) for i in range(len(plan.episodes))],
            "scheduler": self.queue.to_json(CONTROLLER, plan.nodes[0].cluster),
            "jobs": self.jobs.to_json(),
        }

    def _episode_json(self, index: int) -> dict[str, Any]:
        episode, stats = self.plan.episodes[index], self.episodes[index]
        result = asdict(episode)
        result["week"] = episode.week(self.plan.start)
        measured: dict[str, Any] = {}
        if episode.kind == "thermal-runaway":
            measured = {"slowdown_seconds": stats.seconds, "peak_temperature_celsius": stats.peak}
        elif episode.kind == "power-capped":
            measured = {"capped_gpu_seconds": stats.seconds, "power_limit_watts": stats.peak}
        elif episode.kind == "ib-congestion" and stats.first is not None and stats.seconds:
            assert stats.last is not None
            ticks = stats.last - stats.first
            window = stats.seconds - self.plan.step  # first to last sample
            share = ticks / XMIT_WAIT_TICKS_PER_SECOND / window if window > 0 else 0.0
            measured = {"transmit_wait_share": share}
        elif episode.kind == "ecc-dbe":
            measured = {"xids": dict(sorted(stats.values.items()))}
        elif episode.kind == "agent-down":
            measured = {"missed_seconds": stats.seconds}
        elif episode.kind in BMC_EPISODES:
            measured = self.bmc.measured(index)
        result["measured"] = measured
        return result

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
