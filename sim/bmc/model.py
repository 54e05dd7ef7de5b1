"""The chassis of one simulated node as its BMC measures it: power, air, fans, supplies.

The model, on the node's clock (figures in sim/bmc/classes.py; ~ constants here are
estimates chosen to behave like a DGX, not measured):
- node input power = (GPU boards + CPUs + fans + the rest) / the supplies' efficiency.
  GPUs: the node's simulated GPUs. CPUs: 30 % of TDP idle, rising with the load a GPU
  job puts on them (its input pipeline). The rest (memory, NICs, NVSwitches, drives):
  60 % of its maximum idle, all of it with every GPU busy. Fans: the cube of their speed.
- inlet = the room's air (per node; AMBIENT_C, which the GPUs are calibrated in, by
  default) plus what a hot aisle adds.
- fans follow temperature: the BMC's fan curve sets a duty from the inlet and from the
  heat to carry (node power against the maximum); each fan turns towards it, a stopped
  one does not turn.
- exhaust = inlet + DESIGN_RISE_C x (power / maximum) / airflow, where airflow is the
  mean fan speed as a share of full speed; it relaxes towards that with EXHAUST_TAU_S.
- the GPUs breathe the inlet air (`conditions`, sim/gpu/model.AirSupply); a GPU behind a
  stopped fan gets DEAD_FAN_AIRFLOW of its air, and its heat sink conducts worse.
Every fault is a window of time (sim/bmc/scenarios.py), so the air the GPUs breathe at
any sub-step is exact; power, fans and exhaust are integrated when `advance` is called.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nvwatch.agent.config import ScenarioSpec
from nvwatch.sim.bmc.classes import PSU_EFFICIENCY, bmc_class, rest_max_watts
from nvwatch.sim.bmc.scenarios import (
    BmcFault,
    BmcUnreachable,
    FanFailure,
    HotAisle,
    PsuFailure,
    make_fault,
)
from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.gpu.thermal import AMBIENT_C
from nvwatch.sim.profiles import Profile

CPU_IDLE_SHARE = 0.30  # ~ of TDP, an idle server processor
CPU_LOAD_IDLE = 0.10  # ~ CPU load with the GPUs idle ...
CPU_LOAD_PER_GPU_UTIL = 0.40  # ~ ... and added by a job keeping every GPU busy
REST_IDLE_SHARE = 0.60  # ~ memory, NICs and switches draw most of their power idle
CPU_RISE_AT_TDP_C = 45.0  # ~ a processor at TDP sits this far above the inlet
# the fan curve: duty = FAN_MIN_DUTY + FAN_INLET_GAIN x (inlet - FAN_CURVE_FROM_C)
#                       + FAN_LOAD_GAIN x power / maximum, at most 1
FAN_MIN_DUTY = 0.30
FAN_CURVE_FROM_C = 20.0
FAN_INLET_GAIN = 0.03  # per °C
FAN_LOAD_GAIN = 0.30
FAN_SPREAD = 0.015  # ~ fans of one model differ by a percent or two at one duty
FAN_TAU_S = 4.0  # ~ spin up and down
DESIGN_RISE_C = 15.0  # ~ exhaust over inlet at the system maximum, every fan at full speed
EXHAUST_TAU_S = 30.0  # ~ the heat sinks and the air in the chassis
MIN_AIRFLOW = 0.05  # convection and the supplies' own fans, with every chassis fan stopped
DEAD_FAN_AIRFLOW = 0.25  # ~ of its air a GPU behind a stopped fan still gets
HEATSINK_SHARE = 0.6  # ~ of a GPU's thermal resistance that is heat sink to air ...
AIRFLOW_EXPONENT = 0.8  # ... and scales with airflow^-0.8 (forced convection)


@dataclass(frozen=True)
class BmcState:
    """What the BMC measures at `time` (the node's clock)."""

    time: float
    inlet_c: float
    exhaust_c: float
    cpu_c: tuple[float, ...]
    fan_rpm: tuple[float, ...]
    psu_failed: tuple[bool, ...]
    gpu_watts: float  # the GPU boards together
    node_watts: float  # at the supplies' input: what DCMI reports
    answering: bool  # False while the BMC is unreachable


class SimulatedBmc:
    """One node's chassis model and its faults; `state` is the BMC's latest reading."""

    def __init__(
        self,
        profile: Profile,
        gpus: Sequence[SimulatedGpu],
        clock: Callable[[], float],
        *,
        seed: int = 0,
        room_c: float = AMBIENT_C,
    ) -> None:
        self.profile = profile
        self.chassis = bmc_class(profile)
        self.gpus = list(gpus)
        self.clock = clock
        self.room_c = room_c
        self.start_time = self.gpus[0].start_time if self.gpus else clock()
        self.faults: list[BmcFault] = []
        self.rest_max_watts = rest_max_watts(profile, self.chassis)
        draw = random.Random(f"bmc:{profile.name}:{seed}")
        self._fan_spread = [1.0 + FAN_SPREAD * (2 * draw.random() - 1) for _ in range(self.fans)]
        self._zones = [_fan_weights(g, len(self.gpus), self.fans) for g in range(len(self.gpus))]
        for gpu in self.gpus:
            gpu.attach_air(self)
        self.state = self._settled(self.start_time)

    @property
    def fans(self) -> int:
        return self.chassis.fans

    # --- faults ----------------------------------------------------------------------

    def start_scenario(self, spec: ScenarioSpec) -> str:
        """Add the fault `spec` names (checked: ValueError); returns 'name@target'."""
        fault = make_fault(self.profile, self.chassis, spec)
        self.faults.append(fault)
        self._refresh()
        return fault.label

    def end_scenarios(self, name: str | None = None, target: str | None = None) -> list[str]:
        """Repair the running faults `name` (None: all) on `target` (None: any) now."""
        elapsed = self.clock() - self.start_time
        ended = []
        for fault in self.faults:
            chosen = name in (None, fault.name) and (target is None or _same_target(fault, target))
            if chosen and fault.running(elapsed):
                fault.end(elapsed)
                ended.append(fault.label)
        self._refresh()
        return ended

    def inlet_at(self, elapsed: float) -> float:
        rise = sum(f.inlet_rise(elapsed) for f in self.faults if isinstance(f, HotAisle))
        return self.room_c + rise

    def fan_stopped(self, fan: int, elapsed: float) -> bool:
        return any(
            isinstance(f, FanFailure) and f.fan == fan and f.active(elapsed) for f in self.faults
        )

    def psu_failed(self, psu: int, elapsed: float) -> bool:
        return any(
            isinstance(f, PsuFailure) and f.psu == psu and f.active(elapsed) for f in self.faults
        )

    def answering(self, elapsed: float) -> bool:
        return not any(isinstance(f, BmcUnreachable) and f.active(elapsed) for f in self.faults)

    # --- the air the GPUs breathe ----------------------------------------------------

    def conditions(self, index: int, elapsed: float) -> tuple[float, float]:
        """(inlet air °C, factor on the thermal resistance) of GPU `index` (AirSupply)."""
        if not self.faults:
            return self.room_c, 1.0
        airflow = sum(
            weight * (DEAD_FAN_AIRFLOW if self.fan_stopped(fan, elapsed) else 1.0)
            for fan, weight in self._zones[index]
        )
        return self.inlet_at(elapsed), _cooling_factor(airflow)

    # --- integration -----------------------------------------------------------------

    def advance(self) -> BmcState:
        """Integrate fans and exhaust up to the clock, with the GPUs as they are now (the
        node advances its GPUs first)."""
        now = self.clock()
        dt = now - self.state.time
        if dt > 0:
            self.state = self._step(self.state, now, dt)
        return self.state

    def _refresh(self) -> None:
        """What a fault begun or ended now changes at once (a supply's bits, the BMC
        answering); what moves with time (fans, air) moves from here."""
        self.state = self._step(self.state, self.state.time, 0.0)

    def _settled(self, now: float) -> BmcState:
        """The steady state at `now`: fans at their duty, the exhaust where it settles
        (twice: the fan curve reads the power the first pass finds)."""
        return self._step(self._step(None, now, math.inf), now, math.inf)

    def _step(self, old: BmcState | None, now: float, dt: float) -> BmcState:
        elapsed = now - self.start_time
        inlet = self.inlet_at(elapsed)
        util = sum(g.utilization for g in self.gpus) / max(1, len(self.gpus))
        gpu_watts = sum(g.power_w for g in self.gpus)
        # the curve reads the heat carried so far (power needs the fans' own draw)
        duty = fan_duty(inlet, (old.node_watts if old else gpu_watts) / self.max_watts)
        fan_rpm = tuple(
            _relax(
                old.fan_rpm[fan] if old else 0.0,
                self._fan_target(fan, duty, elapsed),
                dt,
                FAN_TAU_S,
            )
            for fan in range(self.fans)
        )
        node_watts = self.node_watts(gpu_watts, util, fan_rpm)
        airflow = max(MIN_AIRFLOW, sum(fan_rpm) / (self.fans * self.chassis.fan_max_rpm))
        target = inlet + DESIGN_RISE_C * (node_watts / self.max_watts) / airflow
        exhaust = _relax(old.exhaust_c if old else target, target, dt, EXHAUST_TAU_S)
        rise = CPU_RISE_AT_TDP_C * self.cpu_watts(util) / self.chassis.cpu_tdp_watts
        failed = tuple(self.psu_failed(p, elapsed) for p in range(self.chassis.supplies.count))
        return BmcState(
            now, inlet, exhaust, (inlet + rise,) * self.chassis.cpus, fan_rpm, failed,
            gpu_watts, node_watts, self.answering(elapsed),
        )  # fmt: skip

    def _fan_target(self, fan: int, duty: float, elapsed: float) -> float:
        if self.fan_stopped(fan, elapsed):
            return 0.0
        return duty * self.chassis.fan_max_rpm * self._fan_spread[fan]

    # --- power -----------------------------------------------------------------------

    @property
    def max_watts(self) -> float:
        return self.profile.system_power_watts

    def cpu_watts(self, gpu_util: float) -> float:
        """One processor's draw with the GPUs `gpu_util` busy on average."""
        load = CPU_LOAD_IDLE + CPU_LOAD_PER_GPU_UTIL * gpu_util
        return self.chassis.cpu_tdp_watts * (CPU_IDLE_SHARE + (1 - CPU_IDLE_SHARE) * load)

    def node_watts(self, gpu_watts: float, gpu_util: float, fan_rpm: Sequence[float]) -> float:
        """The node's input power for these GPUs and fans."""
        chassis = self.chassis
        cpus = chassis.cpus * self.cpu_watts(gpu_util)
        rest = self.rest_max_watts * (REST_IDLE_SHARE + (1 - REST_IDLE_SHARE) * gpu_util)
        fans = sum(chassis.fan_max_watts * min(1.0, r / chassis.fan_max_rpm) ** 3 for r in fan_rpm)
        return (gpu_watts + cpus + rest + fans) / PSU_EFFICIENCY


def fan_duty(inlet_c: float, load: float) -> float:
    """The BMC's fan curve: the duty for this inlet air and this share of the maximum power."""
    duty = FAN_MIN_DUTY + FAN_INLET_GAIN * (inlet_c - FAN_CURVE_FROM_C) + FAN_LOAD_GAIN * load
    return min(1.0, max(FAN_MIN_DUTY, duty))


def _relax(value: float, target: float, dt: float, tau: float) -> float:
    """First-order lag, exact at any step (dt = inf: the target)."""
    return target + (value - target) * math.exp(-dt / tau)


def _cooling_factor(airflow: float) -> float:
    """The factor on a GPU's thermal resistance at `airflow` (1: as designed)."""
    if airflow >= 1.0:
        return 1.0
    return (1 - HEATSINK_SHARE) + HEATSINK_SHARE * float(airflow**-AIRFLOW_EXPONENT)


def _fan_weights(gpu: int, gpus: int, fans: int) -> tuple[tuple[int, float], ...]:
    """(fan, share of GPU `gpu`'s air) for the fans in front of it: the GPUs and the fans
    each spread evenly across the tray, a GPU taking air from those that overlap it."""
    low, high = gpu / gpus, (gpu + 1) / gpus
    weights = []
    for fan in range(fans):
        overlap = min(high, (fan + 1) / fans) - max(low, fan / fans)
        if overlap > 1e-12:
            weights.append((fan, overlap * gpus))
    return tuple(weights)


def _same_target(fault: BmcFault, target: str) -> bool:
    return fault.target == target or (
        isinstance(fault, HotAisle) and target.removesuffix("C") == fault.target
    )
