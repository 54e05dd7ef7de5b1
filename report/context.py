"""What every section reads: the fetched frames, the window, the config, node identities."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from nvwatch.mixin.config import MixinConfig
from nvwatch.report import stats, style
from nvwatch.report.frame import Array, Frame
from nvwatch.report.window import Window

# (cluster, rack, node_class, instance): a node's identity in every table
NodeKey = tuple[str, str, str, str]


@dataclass(frozen=True)
class Context:
    cfg: MixinConfig
    window: Window
    frames: dict[str, Frame]
    # rack -> colour, given out as charts ask (rack_colour)
    _rack_colours: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def rack_colour(self, rack: str) -> str:
        """The rack's colour in every chart of this report: the next unused one of
        style.RACK_COLOURS the first time a chart asks (distinct within a chart of up
        to that many racks), the same one after."""
        colour = self._rack_colours.get(rack)
        if colour is None:
            palette = style.RACK_COLOURS
            colour = palette[len(self._rack_colours) % len(palette)]
            self._rack_colours[rack] = colour
        return colour

    @property
    def node_labels(self) -> tuple[str, str, str, str]:
        c = self.cfg
        return (c.cluster_label, c.rack_label, c.node_class_label, c.instance_label)

    def frame(self, name: str) -> Frame:
        found = self.frames.get(name)
        return found if found is not None else Frame.empty(self.window.steps)

    def node_of(self, labels: dict[str, str]) -> NodeKey:
        cluster, rack, node_class, instance = (labels.get(n, "") for n in self.node_labels)
        return (cluster, rack, node_class, instance)

    def nodes(self, name: str) -> list[NodeKey]:
        return [self.node_of(labels) for labels in self.frame(name).labels]

    def by_node(self, name: str) -> dict[NodeKey, Array]:
        """A per-node (or finer) frame summed per node: one row per node."""
        grouped = self.frame(name).by(self.node_labels)
        return {(k[0], k[1], k[2], k[3]): v for k, v in grouped.items()}

    def hours(self, values: Array) -> float:
        """Integral over the window of a per-step average (GPUs, GPU fractions): hours."""
        return float(np.nansum(values)) * self.window.step_hours

    @functools.cached_property
    def _several_clusters(self) -> bool:
        labels = self.frame("gpu_up").labels
        return len({lb.get(self.cfg.cluster_label, "") for lb in labels}) > 1

    @functools.cached_property
    def _week_of_step(self) -> Array:
        return np.asarray(self.window.week_of_step())

    @functools.cached_property
    def _inlet_max(self) -> dict[str, float]:
        return {c.name: c.inlet_max_celsius for c in self.cfg.node_classes if c.inlet_max_celsius}

    def inlet_max_celsius(self, node_class: str) -> float | None:
        """The class's highest operating inlet air (mixin config `node_classes`, from the
        system's user guide); None where the config knows none."""
        return self._inlet_max.get(node_class)

    def node_name(self, node: NodeKey) -> str:
        """The instance, with its cluster when the report spans several."""
        return f"{node[0]}/{node[3]}" if self._several_clusters else node[3]

    def rack_name(self, cluster: str, rack: str) -> str:
        """The rack, with its cluster when the report spans several."""
        return f"{cluster}/{rack}" if self._several_clusters else rack

    def weekly(self, values: Array, how: str = "sum") -> list[float]:
        """Per-week sum (x step hours: hours) or mean of one row of per-step values."""
        weeks = self._week_of_step
        out: list[float] = []
        for week in range(self.window.weeks):
            chunk = values[weeks == week]
            if how == "sum":
                out.append(float(np.nansum(chunk)) * self.window.step_hours)
            else:
                out.append(stats.mean(chunk))
        return out

    def worst_week(self, values: Array) -> str:
        per_week = self.weekly(values)
        if not per_week or max(per_week) <= 0:
            return ""
        return self.window.week_label(int(np.argmax(per_week)))

    def daily(self, values: Array, how: str = "mean") -> tuple[list[float], list[float]]:
        """(day start times, per-day mean or max) of a row of per-step values, for trends."""
        per_day = max(1, round(86400 / self.window.step))
        days = self.window.steps // per_day
        if days < 2:  # shorter than two days: plot the steps themselves
            return self.window.times(), [float(v) for v in values]
        shaped = values[: days * per_day].reshape(days, per_day)
        reduce = stats.peak if how == "max" else stats.mean
        times = [self.window.start + d * 86400 for d in range(days)]
        return times, [reduce(day) for day in shaped]
