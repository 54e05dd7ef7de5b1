"""The node around the GPUs as its BMC saw it, step by step: inlet air, fans, supplies.

Shared by the cooling section (its tables and events) and the thermal section (which of
the room, the node or the GPU a slowdown came from). A node's inlet air is its warmest
inlet sensor, each step's average, above its envelope in a step where that average is
above its class's operating maximum (mixin config `node_classes`, `inlet_max_celsius`).
A fan is low in a step where it turned slower than the mixin config's `fan_stopped_rpm`
(the speed NvwatchNodeFanStopped pages at) or its BMC rated it critical; a supply failed in a
step where it reported a failure or a lost input for any part of it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nvwatch.report import stats
from nvwatch.report.context import Context, NodeKey
from nvwatch.report.frame import Array

STATE_CRITICAL = 2  # nvwatch_bmc_sensor_state: 0 nominal, 1 warning, 2 critical
SensorKey = tuple[str, ...]  # (cluster, rack, node_class, instance, sensor)
Flags = npt.NDArray[np.bool_]  # one per step
# kinds of event
FAN_STOPPED = "fan stopped"
FAN_CRITICAL = "fan critical"
SUPPLY_FAILED = "power supply failed"
# where a GPU's heat came from, most telling first (thermal's slowdown table)
ROOM = "the room (inlet air above its envelope)"
NODE = "the node (a fan stopped or critical)"
GPU = "the GPU (inlet air and fans normal)"


@dataclass(frozen=True)
class Event:
    kind: str  # FAN_STOPPED, FAN_CRITICAL or SUPPLY_FAILED
    node: NodeKey
    sensor: str
    first: int  # first step of the run
    last: int  # one past its last step
    hours: float
    lowest_rpm: float | None = None


def _node(key: SensorKey) -> NodeKey:
    return (key[0], key[1], key[2], key[3])


def inlet_above(ctx: Context, node: NodeKey, inlet: Array) -> Array:
    """1 in each step the node's inlet was above its class's envelope, else 0."""
    envelope = ctx.inlet_max_celsius(node[2])
    if envelope is None:
        return np.zeros_like(inlet)
    with np.errstate(invalid="ignore"):
        return (inlet > envelope).astype(float)


def runs(flags: Flags) -> list[tuple[int, int]]:
    """(first, one past last) of each run of true steps."""
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True))


def _by_sensor(ctx: Context, name: str) -> dict[SensorKey, Array]:
    return ctx.frame(name).by((*ctx.node_labels, "sensor"))


def _fans_low(ctx: Context) -> dict[SensorKey, tuple[Flags, Flags]]:
    """Per fan: (stopped, critical) per step."""
    states = _by_sensor(ctx, "bmc_fan_state")
    rpms = _by_sensor(ctx, "bmc_fan_min")
    low = {}
    for key in {*states, *rpms}:
        missing = np.full(ctx.window.steps, np.nan)
        with np.errstate(invalid="ignore"):
            stopped = rpms.get(key, missing) < ctx.cfg.fan_stopped_rpm
            critical = states.get(key, missing) >= STATE_CRITICAL
        low[key] = (stopped, critical)
    return low


def fan_events(ctx: Context) -> list[Event]:
    rpms = _by_sensor(ctx, "bmc_fan_min")
    events = []
    for key, (stopped, critical) in sorted(_fans_low(ctx).items()):
        rpm = rpms.get(key, np.full(ctx.window.steps, np.nan))
        for first, last in runs(stopped | critical):
            kind = FAN_STOPPED if stopped[first:last].any() else FAN_CRITICAL
            hours = (last - first) * ctx.window.step_hours
            lowest = stats.lowest(rpm[first:last])
            events.append(Event(kind, _node(key), key[4], int(first), int(last), hours, lowest))
    return events


def supply_events(ctx: Context) -> list[Event]:
    events = []
    for key, failed in sorted(_by_sensor(ctx, "bmc_supply_failed").items()):
        with np.errstate(invalid="ignore"):
            flags = failed > 0
        for first, last in runs(flags):
            hours = ctx.hours(failed[first:last])  # the share of each step it was failed
            events.append(Event(SUPPLY_FAILED, _node(key), key[4], int(first), int(last), hours))
    return events


class HeatSources:
    """Which of the room, the node or the GPU a GPU's hot steps came from."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._inlet = ctx.by_node("bmc_inlet")
        self._fans: dict[NodeKey, list[Flags]] = defaultdict(list)
        for key, (stopped, critical) in _fans_low(ctx).items():
            self._fans[_node(key)].append(stopped | critical)

    def of(self, node: NodeKey, hot: Array) -> str:
        """The room when the node's inlet air was above its envelope in any step where
        `hot` is above 0, else the node when one of its fans was low in one, else the GPU;
        "" when the node's BMC said nothing in those steps."""
        steps = hot > 0
        air = self._inlet.get(node)
        if air is not None and np.any(inlet_above(self._ctx, node, air)[steps] > 0):
            return ROOM
        if any(np.any(low[steps]) for low in self._fans.get(node, [])):
            return NODE
        if air is not None and np.any(~np.isnan(air[steps])):
            return GPU
        return ""
