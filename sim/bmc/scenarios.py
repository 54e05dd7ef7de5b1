"""Faults of the node around the GPUs, as its BMC sees them: the room, a fan, a supply.

Each is a window of simulated time (seconds since the node started): it begins at
`onset_s` and ends at `until_s` or when repaired (`end`), so every reading is a function
of time alone and a history stepped minutes at a time sees what a live node would.
- `hot-aisle[@RISE]`: the rack breathes hot-aisle air (a containment door open, a
  cooling unit down): the inlet climbs RISE °C (default 35: the 50-60 °C exhaust of
  DGX-class neighbours) over five minutes, and falls back as fast once repaired;
- `fan-failure[@N]`: fan N (the SDR's FANn, default 1) stops; repaired, a new fan spins up;
- `psu-failure[@N]`: supply N fails (present, failure detected); repaired, it is replaced;
- `bmc-unreachable`: the BMC stops answering on the management network; the node runs on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from nvwatch.agent.config import ScenarioSpec
from nvwatch.sim.bmc.classes import BmcClass
from nvwatch.sim.profiles import Profile
from nvwatch.sim.scenario_names import BMC_SCENARIOS, FAULT_ONSET_S

HOT_AISLE_RISE_C = 35.0
HOT_AISLE_MAX_RISE_C = 60.0
HOT_AISLE_RAMP_S = 300.0  # room air changes over minutes, in both directions


def is_bmc_scenario(name: str) -> bool:
    return name in BMC_SCENARIOS


@dataclass
class BmcFault:
    """One fault's window; `ended_at` is when a repair ended it early (elapsed seconds)."""

    name: ClassVar[str] = ""
    onset_s: float = FAULT_ONSET_S
    until_s: float | None = None
    ended_at: float | None = field(default=None, init=False)

    @property
    def target(self) -> str | None:
        return None

    @property
    def label(self) -> str:
        """'name@target' as the node reports what started and what it repaired."""
        return self.name if self.target is None else f"{self.name}@{self.target}"

    def end_s(self) -> float:
        """When the fault ends (elapsed seconds): repaired, scheduled, or never (inf)."""
        ends = [t for t in (self.ended_at, self.until_s) if t is not None]
        return min(ends) if ends else math.inf

    def active(self, elapsed: float) -> bool:
        return self.onset_s <= elapsed < self.end_s()

    def running(self, elapsed: float) -> bool:
        """Not over yet at `elapsed` (begun or still to come): a repair can end it."""
        return elapsed < self.end_s()

    def end(self, elapsed: float) -> None:
        if self.running(elapsed):
            self.ended_at = elapsed


@dataclass
class HotAisle(BmcFault):
    name: ClassVar[str] = "hot-aisle"
    rise_c: float = HOT_AISLE_RISE_C

    @property
    def target(self) -> str:
        return f"{self.rise_c:g}"

    def inlet_rise(self, elapsed: float) -> float:
        """°C above the room: a ramp up from the onset, and back down from the end."""
        if elapsed <= self.onset_s:
            return 0.0
        end = self.end_s()
        reached = self._ramp(min(elapsed, end))
        if elapsed <= end:
            return reached
        return reached * max(0.0, 1.0 - (elapsed - end) / HOT_AISLE_RAMP_S)

    def _ramp(self, elapsed: float) -> float:
        return self.rise_c * min(1.0, max(0.0, elapsed - self.onset_s) / HOT_AISLE_RAMP_S)


@dataclass
class FanFailure(BmcFault):
    name: ClassVar[str] = "fan-failure"
    fan: int = 0  # 0-based; the SDR names it FAN{fan + 1}

    @property
    def target(self) -> str:
        return str(self.fan + 1)


@dataclass
class PsuFailure(BmcFault):
    name: ClassVar[str] = "psu-failure"
    psu: int = 0  # 0-based; the SDR names it PSU{psu + 1}

    @property
    def target(self) -> str:
        return str(self.psu + 1)


@dataclass
class BmcUnreachable(BmcFault):
    name: ClassVar[str] = "bmc-unreachable"


def check_target(profile: Profile, chassis: BmcClass, spec: ScenarioSpec) -> None:
    """ValueError (one line) unless `spec` fits the node: a fan or supply it has, a rise
    in range, no target where none is taken."""
    name, target = spec.name, spec.target
    if name == "fan-failure" and target is not None:
        _number(spec, chassis.fans, "FAN", profile)
    elif name == "psu-failure":
        if chassis.supplies.count < 2:
            raise ValueError(
                f"{spec}: {profile.name} has one power supply; losing it powers the node "
                "off, which this simulator does not model"
            )
        if target is not None:
            _number(spec, chassis.supplies.count, "PSU", profile)
    elif name == "hot-aisle" and target is not None:
        hot_aisle_rise(spec)
    elif name == "bmc-unreachable" and target is not None:
        raise ValueError(f"{spec}: bmc-unreachable is node-wide; it takes no @TARGET")


def _number(spec: ScenarioSpec, count: int, kind: str, profile: Profile) -> int:
    text = spec.target or "1"
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= count:
        raise ValueError(
            f"{spec}: no {kind}{text} in {profile.name}; {spec.name} takes {kind} 1..{count}"
        )
    return int(text) - 1


def hot_aisle_rise(spec: ScenarioSpec) -> float:
    """The rise of `hot-aisle@RISE` in °C ('12', '12C'); the default without a target."""
    if spec.target is None:
        return HOT_AISLE_RISE_C
    text = spec.target.removesuffix("C")
    try:
        rise = float(text)
    except ValueError:
        rise = math.nan
    if not 0 < rise <= HOT_AISLE_MAX_RISE_C:
        raise ValueError(
            f"{spec}: hot-aisle@RISE takes the inlet's rise in °C, more than 0 and at most "
            f"{HOT_AISLE_MAX_RISE_C:g} (e.g. hot-aisle@12)"
        )
    return rise


def make_fault(profile: Profile, chassis: BmcClass, spec: ScenarioSpec) -> BmcFault:
    """The fault `spec` describes on this node (checked first); from= is its onset."""
    check_target(profile, chassis, spec)
    onset = FAULT_ONSET_S if spec.from_s is None else spec.from_s
    if spec.name == "hot-aisle":
        return HotAisle(onset, spec.until_s, rise_c=hot_aisle_rise(spec))
    if spec.name == "fan-failure":
        return FanFailure(onset, spec.until_s, fan=_number(spec, chassis.fans, "FAN", profile))
    if spec.name == "psu-failure":
        psu = _number(spec, chassis.supplies.count, "PSU", profile)
        return PsuFailure(onset, spec.until_s, psu=psu)
    if spec.name == "bmc-unreachable":
        return BmcUnreachable(onset, spec.until_s)
    raise ValueError(f"{spec.name} is not a BMC scenario (known: {', '.join(BMC_SCENARIOS)})")
