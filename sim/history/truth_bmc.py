"""The ground truth of a history's BMC series, from the samples written (as truth.py).

Per node, its energy from node power (DCMI's reading, each sample standing for the step
before it) and its time with the inlet above its class's operating envelope; per node
class, the share of node energy that is not the GPUs' (GPU energy as written: none while
an agent is down, when its BMC still reports); per rack, inlet percentiles (PromQL's
`quantile`: linear between ranks) over every inlet sample of its nodes in the window, and
over the rack's hottest inlet at each step, and the time any of its nodes breathed air
above its envelope; per BMC episode, what it did in its window.
"""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nvwatch.sim.bmc.classes import bmc_class
from nvwatch.sim.history.plan import Episode, HistoryPlan
from nvwatch.sim.history.series import Row
from nvwatch.sim.profiles import get_profile

_KWH = 3.6e6
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
BMC_EPISODES = ("hot-aisle", "fan-failure", "psu-failure")
TEMPERATURE = "nvwatch_bmc_temperature_celsius"
POWER = "nvwatch_bmc_power_watts"
FAN = "nvwatch_bmc_fan_speed_rpm"
SUPPLY_FAILED = "nvwatch_bmc_power_supply_failed"
DCMI = 'method="dcmi"'
INLET = 'entity="inlet"'
EXHAUST = 'entity="exhaust"'
THERMAL_SLOWDOWN = 'reason="sw_thermal_slowdown"'


@dataclass
class NodeAir:
    node_joules: float = 0.0
    inlet: array[float] = field(default_factory=lambda: array("d"))
    above_s: float = 0.0


@dataclass
class EpisodeAir:
    seconds: float = 0.0  # the episode's signal on: inlet above, fan stopped, supply failed
    peak: float | None = None  # hottest inlet (hot aisle), hottest exhaust (fan failure)
    gpu_slowdown_s: dict[str, float] = field(default_factory=dict)  # GPU -> seconds
    above_at: set[float] = field(default_factory=set)


class BmcTruth:
    def __init__(self, plan: HistoryPlan) -> None:
        self.plan = plan
        self.specs = {spec.name: spec for spec in plan.nodes}
        self.envelope = {
            spec.name: bmc_class(get_profile(spec.profile)).inlet_max_c for spec in plan.nodes
        }
        self.nodes = {name: NodeAir() for name in self.specs}
        self.rack_above: dict[str, set[float]] = defaultdict(set)
        self.rack_hottest: dict[str, dict[float, float]] = defaultdict(dict)
        self.episodes = {
            i: EpisodeAir() for i, e in enumerate(plan.episodes) if e.kind in BMC_EPISODES
        }

    def observe(self, instance: str, t: float, rows: Sequence[Row]) -> None:
        """The rows written for `instance` at Unix time `t`."""
        if t <= self.plan.start:
            return  # the first sample stands for no step
        step, air = self.plan.step, self.nodes[instance]
        inlet: float | None = None
        for family, labels, value in rows:  # one pass: a node writes hundreds of rows
            if family == TEMPERATURE and INLET in labels:
                inlet = value if inlet is None else max(inlet, value)
            elif family == POWER and DCMI in labels:
                air.node_joules += value * step
        if inlet is not None:
            air.inlet.append(inlet)
            hottest = self.rack_hottest[self.specs[instance].rack]
            hottest[t] = max(inlet, hottest.get(t, inlet))
            if inlet > self.envelope[instance]:
                air.above_s += step
                self.rack_above[self.specs[instance].rack].add(t)
        for index, stats in self.episodes.items():
            episode = self.plan.episodes[index]
            if self._on(episode, instance) and episode.start < t <= episode.end:
                self._episode(episode, stats, instance, t, rows, inlet)

    def _on(self, episode: Episode, instance: str) -> bool:
        if episode.rack is not None:
            return self.specs[instance].rack == episode.rack
        return episode.node == instance

    def _episode(
        self,
        episode: Episode,
        stats: EpisodeAir,
        instance: str,
        t: float,
        rows: Sequence[Row],
        inlet: float | None,
    ) -> None:
        step = self.plan.step
        if episode.kind == "hot-aisle" and inlet is not None:
            stats.peak = inlet if stats.peak is None else max(stats.peak, inlet)
            if inlet > self.envelope[instance]:
                stats.above_at.add(t)
        elif episode.kind == "fan-failure":
            fan = f'sensor="{episode.fan}"'
            stopped = any(_is(f, lab, FAN, fan) and v == 0 for f, lab, v in rows)
            stats.seconds += step if stopped else 0.0
            for family, labels, value in rows:
                if _is(family, labels, TEMPERATURE, EXHAUST):
                    stats.peak = value if stats.peak is None else max(stats.peak, value)
                elif family == "nvwatch_gpu_clock_event_active" and THERMAL_SLOWDOWN in labels:
                    gpu = labels.split('gpu="')[1].split('"')[0]
                    stats.gpu_slowdown_s[gpu] = stats.gpu_slowdown_s.get(gpu, 0.0) + value * step
        elif episode.kind == "psu-failure":
            supply = f'sensor="{episode.supply}"'
            failed = any(_is(f, lab, SUPPLY_FAILED, supply) and v == 1 for f, lab, v in rows)
            stats.seconds += step if failed else 0.0

    # --- the truth file ------------------------------------------------------------------

    def node_json(self, instance: str) -> dict[str, Any]:
        air = self.nodes[instance]
        return {
            "bmc": self.specs[instance].bmc,
            "node_energy_kwh": air.node_joules / _KWH,
            "inlet_envelope_celsius": self.envelope[instance],
            "inlet_max_celsius": max(air.inlet, default=None),
            "seconds_above_envelope": air.above_s,
        }

    def classes_json(self, gpu_joules: dict[str, float]) -> list[dict[str, Any]]:
        """Per node class: its energy, the GPUs' part of it, and the rest's share."""
        by_class: dict[str, list[str]] = defaultdict(list)
        for name, spec in self.specs.items():
            by_class[spec.profile].append(name)
        result = []
        for node_class, members in sorted(by_class.items()):
            node = sum(self.nodes[m].node_joules for m in members)
            gpus = sum(gpu_joules[m] for m in members)
            result.append(
                {
                    "node_class": node_class,
                    "nodes": len(members),
                    "inlet_envelope_celsius": self.envelope[members[0]],
                    "node_energy_kwh": node / _KWH,
                    "gpu_energy_kwh": gpus / _KWH,
                    "non_gpu_share": 1.0 - gpus / node if node else None,
                }
            )
        return result

    def racks_json(self) -> list[dict[str, Any]]:
        by_rack: dict[str, list[str]] = defaultdict(list)
        for name, spec in self.specs.items():
            by_rack[spec.rack].append(name)
        result = []
        for rack, members in sorted(by_rack.items()):
            samples = sorted(v for m in members for v in self.nodes[m].inlet)
            hottest = sorted(self.rack_hottest[rack].values())
            result.append(
                {
                    "rack": rack,
                    "nodes": members,
                    "inlet_celsius": _percentiles(samples),
                    "hottest_inlet_celsius": _percentiles(hottest),
                    "seconds_above_envelope": len(self.rack_above[rack]) * self.plan.step,
                    "node_seconds_above_envelope": sum(self.nodes[m].above_s for m in members),
                }
            )
        return result

    def measured(self, index: int) -> dict[str, Any]:
        episode, stats = self.plan.episodes[index], self.episodes[index]
        if episode.kind == "hot-aisle":
            return {
                "peak_inlet_celsius": stats.peak,
                "seconds_above_envelope": len(stats.above_at) * self.plan.step,
            }
        if episode.kind == "fan-failure":
            return {
                "stopped_seconds": stats.seconds,
                "peak_exhaust_celsius": stats.peak,
                "gpu_slowdown_seconds": {
                    gpu: seconds for gpu, seconds in sorted(stats.gpu_slowdown_s.items()) if seconds
                },
            }
        assert episode.node is not None
        supplies = bmc_class(get_profile(self.specs[episode.node].profile)).supplies
        return {
            "failed_seconds": stats.seconds,
            # one supply down of a class with no spare beyond it
            "redundancy_lost": supplies.count - 1 <= supplies.carry_max,
        }


def _percentiles(ordered: Sequence[float]) -> dict[str, float | None]:
    return {
        **{key: quantile(q, ordered) for key, q in QUANTILES},
        "max": ordered[-1] if ordered else None,
    }


def quantile(q: float, ordered: Sequence[float]) -> float | None:
    """PromQL's `quantile`: rank q x (n - 1), linear between the two samples around it."""
    if not ordered:
        return None
    rank = q * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _is(family: str, labels: str, wanted: str, selector: str) -> bool:
    return family == wanted and selector in labels
