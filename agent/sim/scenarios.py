"""GPU fault scenarios for the simulated NVML: what an operator would be paged for.

A scenario is a timeline applied to one victim GPU through hooks that `SimulatedGpu`
calls at every sub-step with the seconds elapsed since the simulation started. Faults
begin at `FAULT_ONSET_S`, so the first scrapes of a simulated agent show a healthy
baseline that the fault then departs from (what alerts with `for:` clauses need).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.sim.gpu_model import AMBIENT_C, SimulatedGpu
from agent.sim.gpu_state import EVENT_DOUBLE_BIT_ECC

GPU_SCENARIOS: tuple[str, ...] = (
    "healthy-training",
    "idle",
    "thermal-runaway",
    "power-capped",
    "nvlink-degraded",
    "ecc-dbe",
    "gpu-lost",
    "xid-storm",
)
FAULT_SCENARIOS = GPU_SCENARIOS[2:]

FAULT_ONSET_S = 30.0  # a few 5 s polls of healthy baseline before the fault
THERMAL_RAMP_S = 120.0  # cooling degrades over minutes (a failing fan / clogged filter)
THERMAL_OVERSHOOT_C = 20.0  # uncontrolled steady state this far above slowdown
POWER_CAP_FRACTION = 0.6  # e.g. a facility power-brake policy, `nvidia-smi -pl`
NVLINK_FAIL_AFTER_S = 20.0  # the bad link retrains (recoveries) for a while, then drops
GPU_LOST_AFTER_XID_S = 2.0  # XID 79 is logged, then the GPU stops answering
XID_STORM_PERIOD_S = 30.0
XID_STORM_BURST = (13, 31, 13, 43, 31)  # app faults: engine exception, MMU fault, hang
XID_STORM_SPACING_S = 0.2


def validate(name: str) -> str:
    if name not in GPU_SCENARIOS:
        raise ValueError(f"unknown scenario {name!r} (known: {', '.join(GPU_SCENARIOS)})")
    return name


def workload_kind(name: str) -> str:
    """The node workload a scenario runs on: faults show best under training load."""
    return "idle" if validate(name) == "idle" else "training"


def default_victim(name: str, link_counts: Sequence[int]) -> int:
    """GPU a node-wide fault scenario hits: GPU 0, or the first GPU that has NVLink."""
    if validate(name) == "nvlink-degraded":
        for index, count in enumerate(link_counts):
            if count:
                return index
    return 0


def _mean_power_w(gpu: SimulatedGpu) -> float:
    """Mean demanded power over one workload period at full clocks."""
    model = gpu.model
    period = gpu.workload.step_seconds
    samples = 64
    intensity = (
        sum(gpu.workload.compute_intensity(period * i / samples, gpu.index) for i in range(samples))
        / samples
    )
    power = model.idle_watts + intensity * (model.tdp_watts - model.idle_watts)
    return max(power, 0.5 * model.tdp_watts)  # still overheats if the GPU is idle-ish


@dataclass
class ThermalRunaway:
    """Cooling fails: thermal resistance ramps up until the GPU would sit 20 C over slowdown.

    The target is per board, so every profile crosses slowdown ~2-3 minutes after onset
    (ramp to the crossing resistance ~70 s, plus the thermal time constant's lag).
    """

    onset_s: float = FAULT_ONSET_S
    _base: float | None = None
    _final: float = 0.0

    def __call__(self, gpu: SimulatedGpu, elapsed: float) -> None:
        if elapsed < self.onset_s:
            return
        if self._base is None:
            self._base = gpu.thermal_resistance_c_per_w
            target_c = gpu.model.temp_slowdown_c + THERMAL_OVERSHOOT_C
            self._final = max(self._base, (target_c - AMBIENT_C) / _mean_power_w(gpu))
        fraction = min(1.0, (elapsed - self.onset_s) / THERMAL_RAMP_S)
        gpu.thermal_resistance_c_per_w = self._base + fraction * (self._final - self._base)


@dataclass
class PowerCapped:
    onset_s: float = FAULT_ONSET_S

    def __call__(self, gpu: SimulatedGpu, elapsed: float) -> None:
        if elapsed >= self.onset_s:
            model = gpu.model
            # NVML will not enforce below the board's minimum limit (T4: 60 W > 0.6 x 70 W)
            gpu.power_limit_w = max(
                POWER_CAP_FRACTION * model.tdp_watts, model.min_power_limit_watts
            )


@dataclass
class NvlinkDegraded:
    """One link flaps with heavy CRC/replay/recovery errors, then goes down (XID 74).

    The GPU's other links keep logging errors at a lower rate: a bad NVSwitch port or
    cable tray usually shows on neighbours too.
    """

    link: int = 0
    onset_s: float = FAULT_ONSET_S
    _stage: int = 0

    def __call__(self, gpu: SimulatedGpu, elapsed: float) -> None:
        if not gpu.links or elapsed < self.onset_s:
            return
        ecc = gpu.model.nvlink_version >= 3  # NVLink data ECC counters exist from NVLink3
        if self._stage == 0:
            self._stage = 1
            for i, link in enumerate(gpu.links):
                bad = i == self.link
                link.error_rates.update(
                    crc_flit=40.0 if bad else 1.0,
                    crc_data=4.0 if bad else 0.1,
                    replay=20.0 if bad else 0.5,
                    recovery=0.5 if bad else 0.02,
                    ecc=(2.0 if bad else 0.05) if ecc else 0.0,
                )
        if self._stage == 1 and elapsed >= self.onset_s + NVLINK_FAIL_AFTER_S:
            self._stage = 2
            victim = gpu.links[self.link]
            victim.up = False
            victim.error_rates = dict.fromkeys(victim.error_rates, 0.0)  # counters freeze
            gpu.emit_xid(74)


@dataclass
class EccDoubleBit:
    """An uncorrectable DRAM error: XID 48, the page retired / row remapped, XID 63."""

    onset_s: float = FAULT_ONSET_S
    _stage: int = 0

    def __call__(self, gpu: SimulatedGpu, elapsed: float) -> None:
        if self._stage == 0 and elapsed >= self.onset_s:
            self._stage = 1
            gpu.add_ecc_errors(corrected=3, uncorrected=1)
            gpu.ecc.corrected_rate_per_s = 0.05  # the weak cell keeps flipping single bits
            gpu.emit_event(EVENT_DOUBLE_BIT_ECC)
            gpu.emit_xid(48)
        if self._stage == 1 and elapsed >= self.onset_s + 1.0:
            self._stage = 2
            gpu.retire_page(double_bit=True)
            gpu.emit_xid(63)


@dataclass
class GpuLost:
    onset_s: float = FAULT_ONSET_S
    _stage: int = 0

    def __call__(self, gpu: SimulatedGpu, elapsed: float) -> None:
        if self._stage == 0 and elapsed >= self.onset_s:
            self._stage = 1
            gpu.emit_xid(79)
        if self._stage == 1 and elapsed >= self.onset_s + GPU_LOST_AFTER_XID_S:
            self._stage = 2
            gpu.lost = True


@dataclass
class XidStorm:
    onset_s: float = FAULT_ONSET_S
    _next: int = 0

    def _time_of(self, n: int) -> float:
        burst, position = divmod(n, len(XID_STORM_BURST))
        return self.onset_s + burst * XID_STORM_PERIOD_S + position * XID_STORM_SPACING_S

    def __call__(self, gpu: SimulatedGpu, elapsed: float) -> None:
        while self._time_of(self._next) <= elapsed:
            gpu.emit_xid(XID_STORM_BURST[self._next % len(XID_STORM_BURST)])
            self._next += 1


def apply(name: str, gpu: SimulatedGpu, *, onset_s: float = FAULT_ONSET_S) -> None:
    """Attach scenario `name` to `gpu` (healthy-training and idle only set the workload)."""
    validate(name)
    if name == "thermal-runaway":
        gpu.scenario_hooks.append(ThermalRunaway(onset_s))
    elif name == "power-capped":
        gpu.scenario_hooks.append(PowerCapped(onset_s))
    elif name == "nvlink-degraded":
        gpu.scenario_hooks.append(NvlinkDegraded(onset_s=onset_s))
    elif name == "ecc-dbe":
        gpu.scenario_hooks.append(EccDoubleBit(onset_s))
    elif name == "gpu-lost":
        gpu.scenario_hooks.append(GpuLost(onset_s))
    elif name == "xid-storm":
        gpu.scenario_hooks.append(XidStorm(onset_s))
