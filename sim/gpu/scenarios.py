"""GPU fault scenarios for the simulated NVML: what an operator would be paged for.

A scenario is a timeline applied to one victim GPU through hooks that `SimulatedGpu`
calls at every sub-step with the seconds elapsed since the simulation started. Faults
begin at `FAULT_ONSET_S`, so the first scrapes of a simulated agent show a healthy
baseline that the fault then departs from (what alerts with `for:` clauses need).

Every fault ends: at its `until_s`, or when `end()` is called (a test, an operator's
repair request). Ending runs the fault's own repair, what an operator would do about it:
a GPU reset for an uncorrectable ECC error or a lost GPU, a fixed fan for a thermal
runaway, the default power limit back, a replaced NVLink cable, a stopped faulting job.
Counters the fault drove keep their counts; conditions (volatile ECC, a down link, a
lost GPU, a pending retirement) clear.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from nvwatch.sim.gpu.model import ScenarioHook, SimulatedGpu
from nvwatch.sim.gpu.state import EVENT_DOUBLE_BIT_ECC
from nvwatch.sim.gpu.thermal import THERMAL_GAIN_PER_C
from nvwatch.sim.scenario_names import (
    DEFAULT_SLOWDOWN,
    DRIVER_SCENARIOS,
    FAULT_ONSET_S,
    NVML_SCENARIOS,
    WORKLOAD_SCENARIOS,
)
from nvwatch.sim.workload import TRAINING_COMPUTE, Workload

THERMAL_RAMP_S = 120.0  # cooling degrades over minutes (a failing fan / clogged filter)
THERMAL_OVERSHOOT_C = 20.0  # uncontrolled steady state this far above slowdown
POWER_CAP_FRACTION = 0.6  # e.g. a facility power-brake policy, `nvidia-smi -pl`
NVLINK_FAIL_AFTER_S = 20.0  # the bad link retrains (recoveries) for a while, then drops
GPU_LOST_AFTER_XID_S = 2.0  # XID 79 is logged, then the GPU stops answering
XID_STORM_PERIOD_S = 30.0
XID_STORM_BURST = (13, 31, 13, 43, 31)  # app faults: engine exception, MMU fault, hang
XID_STORM_SPACING_S = 0.2


def validate(name: str) -> str:
    if name not in NVML_SCENARIOS:
        raise ValueError(f"unknown scenario {name!r} (known: {', '.join(NVML_SCENARIOS)})")
    return name


def workload_kind(name: str) -> str:
    """The node workload a scenario runs on: faults show best under training load."""
    return "idle" if validate(name) == "idle" else "training"


def workload_of(name: str, base: Workload) -> Workload:
    """`base` (its seed and timing) running the workload scenario or fault `name`."""
    return dataclasses.replace(
        base, kind=workload_kind(name), cold_start=validate(name) == "cold-start"
    )


def default_victim(name: str, link_counts: Sequence[int]) -> int:
    """GPU a node-wide fault scenario hits: GPU 0, or the first GPU that has NVLink."""
    if validate(name) == "nvlink-degraded":
        for index, count in enumerate(link_counts):
            if count:
                return index
    return 0


def _mean_power_w(gpu: SimulatedGpu, *, floor: bool = True) -> float:
    """Mean demanded power over one workload period at full clocks (`floor`: at least
    half the TDP, so that a runaway still overheats a GPU that is idle-ish)."""
    model = gpu.model
    period = gpu.workload.step_seconds
    samples = 64
    intensity = (
        sum(gpu.workload.compute_intensity(period * i / samples, gpu.index) for i in range(samples))
        / samples
    )
    power = model.idle_watts + intensity * (model.tdp_watts - model.idle_watts)
    return max(power, 0.5 * model.tdp_watts) if floor else power


@dataclass
class GpuFault:
    """One fault on one GPU: `progress` from `onset_s`, `repair` once when it ends.

    `until_s` (seconds since the simulation started) ends it on schedule; `end()` ends it
    now. A fault ended before its onset never begins, and its repair finds nothing broken.
    """

    name: ClassVar[str] = ""
    onset_s: float = FAULT_ONSET_S
    until_s: float | None = None
    # how much it slows what it hits (sim/scenario_names.SLOWDOWN_SCENARIOS); None: the
    # fault's own fixed effect
    slowdown: float | None = None
    ended: bool = field(default=False, init=False)

    def __call__(self, gpu: SimulatedGpu, elapsed: float) -> None:
        if self.ended:
            return
        if self.until_s is not None and elapsed >= self.until_s:
            self.end(gpu)
        elif elapsed >= self.onset_s:
            self.progress(gpu, elapsed)

    def end(self, gpu: SimulatedGpu) -> None:
        if not self.ended:
            self.ended = True
            self.repair(gpu)

    def progress(self, gpu: SimulatedGpu, elapsed: float) -> None:
        raise NotImplementedError

    def repair(self, gpu: SimulatedGpu) -> None:
        raise NotImplementedError


@dataclass
class ThermalRunaway(GpuFault):
    """Cooling fails: thermal resistance ramps up until the GPU would sit 20 C over slowdown.

    The target is per board, so every profile crosses slowdown ~2-3 minutes after onset
    (ramp to the crossing resistance ~70 s, plus the thermal time constant's lag). With
    `slowdown=S` the cooling fails only as far as the thermal controller needs to hold
    the clocks at 1 - S (S / THERMAL_GAIN_PER_C degrees over slowdown) at the load the
    GPU runs at onset. Repair: the fan is fixed, the resistance is the board's again, and
    the temperature relaxes with the thermal time constant (clocks recover as it falls
    under slowdown).
    """

    name: ClassVar[str] = "thermal-runaway"
    _base: float | None = field(default=None, init=False)
    _final: float = field(default=0.0, init=False)

    def progress(self, gpu: SimulatedGpu, elapsed: float) -> None:
        if self._base is None:
            self._base = gpu.thermal_resistance_c_per_w
            self._final = max(self._base, self._resistance(gpu))
        fraction = min(1.0, (elapsed - self.onset_s) / THERMAL_RAMP_S)
        gpu.thermal_resistance_c_per_w = self._base + fraction * (self._final - self._base)

    def _resistance(self, gpu: SimulatedGpu) -> float:
        """The thermal resistance that holds the GPU where the fault takes it."""
        if self.slowdown is None:
            target_c = gpu.model.temp_slowdown_c + THERMAL_OVERSHOOT_C
            return (target_c - gpu.ambient_c) / _mean_power_w(gpu)
        # closed loop: at target_c the controller leaves 1 - S of the dynamic power,
        # and that power must hold the die there
        target_c = gpu.model.temp_slowdown_c + self.slowdown / THERMAL_GAIN_PER_C
        idle = gpu.model.idle_watts
        power = idle + (1.0 - self.slowdown) * (_mean_power_w(gpu, floor=False) - idle)
        return (target_c - gpu.ambient_c) / power

    def repair(self, gpu: SimulatedGpu) -> None:
        if self._base is not None:
            gpu.thermal_resistance_c_per_w = self._base


@dataclass
class PowerCapped(GpuFault):
    """The enforced limit drops to 60 % of TDP; with `slowdown=S`, to where a GPU
    computing a training step runs at 1 - S of its clocks (idle power plus 1 - S of the
    step's compute demand). Repair: the brake is released, the default limit (TDP)
    applies again."""

    name: ClassVar[str] = "power-capped"

    def progress(self, gpu: SimulatedGpu, elapsed: float) -> None:
        model = gpu.model
        if self.slowdown is None:
            limit = POWER_CAP_FRACTION * model.tdp_watts
        else:
            compute = TRAINING_COMPUTE[1] * (model.tdp_watts - model.idle_watts)
            limit = model.idle_watts + (1.0 - self.slowdown) * compute
        # NVML will not enforce below the board's minimum limit (T4: 60 W > 0.6 x 70 W)
        gpu.power_limit_w = max(limit, model.min_power_limit_watts)

    def repair(self, gpu: SimulatedGpu) -> None:
        gpu.power_limit_w = gpu.model.tdp_watts


@dataclass
class NvlinkDegraded(GpuFault):
    """One link flaps with heavy CRC/replay/recovery errors, then goes down (XID 74).

    The GPU's other links keep logging errors at a lower rate: a bad NVSwitch port or
    cable tray usually shows on neighbours too. With `slowdown=S` the bad link keeps
    replaying instead of going down, and the replays leave the GPU 1 - S of its NVLink
    bandwidth. Repair: the part is replaced and the link
    retrained: up again, no link logs new errors, the counts so far stay.
    """

    name: ClassVar[str] = "nvlink-degraded"
    link: int = 0
    _stage: int = field(default=0, init=False)

    def progress(self, gpu: SimulatedGpu, elapsed: float) -> None:
        if not gpu.links:
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
            if self.slowdown is not None:
                gpu.nvlink_speed = 1.0 - self.slowdown
        if (
            self._stage == 1
            and self.slowdown is None
            and elapsed >= self.onset_s + NVLINK_FAIL_AFTER_S
        ):
            self._stage = 2
            victim = gpu.links[self.link]
            victim.up = False
            victim.error_rates = dict.fromkeys(victim.error_rates, 0.0)  # counters freeze
            gpu.emit_xid(74)

    def repair(self, gpu: SimulatedGpu) -> None:
        if self._stage == 0:
            return
        for link in gpu.links:
            link.error_rates = dict.fromkeys(link.error_rates, 0.0)
        gpu.links[self.link].up = True
        gpu.nvlink_speed = 1.0


@dataclass
class EccDoubleBit(GpuFault):
    """An uncorrectable DRAM error: XID 48, the page retired / row remapped, XID 63.

    Repair: the GPU is drained and reset. The volatile counts restart at 0, the pending
    retirement or remap takes effect, and the weak cell, now out of use, stops flipping.
    """

    name: ClassVar[str] = "ecc-dbe"
    _stage: int = field(default=0, init=False)

    def progress(self, gpu: SimulatedGpu, elapsed: float) -> None:
        if self._stage == 0:
            self._stage = 1
            gpu.add_ecc_errors(corrected=3, uncorrected=1)
            gpu.ecc.corrected_rate_per_s = 0.05  # the weak cell keeps flipping single bits
            gpu.emit_event(EVENT_DOUBLE_BIT_ECC)
            gpu.emit_xid(48)
        if self._stage == 1 and elapsed >= self.onset_s + 1.0:
            self._stage = 2
            gpu.retire_page(double_bit=True)
            gpu.emit_xid(63)

    def repair(self, gpu: SimulatedGpu) -> None:
        if self._stage:
            gpu.reset()
            gpu.ecc.corrected_rate_per_s = 0.0


@dataclass
class GpuLost(GpuFault):
    """XID 79, then the GPU stops answering (GPU_IS_LOST); repair: a reset brings it back."""

    name: ClassVar[str] = "gpu-lost"
    _stage: int = field(default=0, init=False)

    def progress(self, gpu: SimulatedGpu, elapsed: float) -> None:
        if self._stage == 0:
            self._stage = 1
            gpu.emit_xid(79)
        if self._stage == 1 and elapsed >= self.onset_s + GPU_LOST_AFTER_XID_S:
            self._stage = 2
            gpu.lost = True

    def repair(self, gpu: SimulatedGpu) -> None:
        if self._stage:
            gpu.reset()


@dataclass
class XidStorm(GpuFault):
    """A job hitting application XIDs in bursts; repair: the job is stopped, no more XIDs."""

    name: ClassVar[str] = "xid-storm"
    _next: int = field(default=0, init=False)

    def _time_of(self, n: int) -> float:
        burst, position = divmod(n, len(XID_STORM_BURST))
        return self.onset_s + burst * XID_STORM_PERIOD_S + position * XID_STORM_SPACING_S

    def progress(self, gpu: SimulatedGpu, elapsed: float) -> None:
        while self._time_of(self._next) <= elapsed:
            gpu.emit_xid(XID_STORM_BURST[self._next % len(XID_STORM_BURST)])
            self._next += 1

    def repair(self, gpu: SimulatedGpu) -> None:
        pass  # nothing stays broken: the XIDs logged so far are history


@dataclass
class GpuSlow(GpuFault):
    """The GPU runs slower with no clock-event reason to show for it (a board that
    lost its boost, a degraded part): its clocks, and its dynamic power with them, at
    1 - S (`slowdown=S`, 0.2 by default). Repair: the board is replaced, full speed."""

    name: ClassVar[str] = "gpu-slow"

    def progress(self, gpu: SimulatedGpu, elapsed: float) -> None:
        gpu.speed_factor = 1.0 - _slowdown(self)

    def repair(self, gpu: SimulatedGpu) -> None:
        gpu.speed_factor = 1.0


@dataclass
class PcieDowntrained(GpuFault):
    """The GPU's PCIe link trains down to a narrower width (x16 -> x8; x4 from
    `slowdown=` 0.75 up, and so on), as after a marginal riser or slot: the link's
    throughput halves with each halving. What goes through it, a synchronous job's
    GPUDirect RDMA to its HCA (or its all-reduce on a board without NVLink), runs at
    1 - S (`slowdown=S`, 0.5 by default): a x16 link has headroom over its HCA. Repair:
    the link retrains at full width."""

    name: ClassVar[str] = "pcie-downtrained"

    def progress(self, gpu: SimulatedGpu, elapsed: float) -> None:
        gpu.pcie_width_trained = trained_width(gpu.model.pcie_width, _slowdown(self))
        gpu.pcie_share = 1.0 - _slowdown(self)

    def repair(self, gpu: SimulatedGpu) -> None:
        gpu.pcie_width_trained = None
        gpu.pcie_share = 1.0


def trained_width(width: int, slowdown: float) -> int:
    """The width a link of `width` lanes trains down to for `slowdown`: halved at least
    once, and once more for each halving of the bandwidth the slowdown leaves beyond
    the first."""
    halvings = max(1, math.floor(math.log2(1.0 / (1.0 - slowdown)) + 1e-9))
    return max(1, width >> halvings)


def _slowdown(fault: GpuFault) -> float:
    return DEFAULT_SLOWDOWN[fault.name] if fault.slowdown is None else fault.slowdown


_FAULTS: dict[str, type[GpuFault]] = {
    fault.name: fault
    for fault in (
        ThermalRunaway,
        PowerCapped,
        NvlinkDegraded,
        EccDoubleBit,
        GpuLost,
        XidStorm,
        GpuSlow,
        PcieDowntrained,
    )
}


@dataclass
class DriverBroken:
    """The NVIDIA kernel module is not loaded (a kernel update it was not built for, an
    unload): the PCI functions stay, every NVML call fails with DRIVER_NOT_LOADED.
    Repair: the module is loaded again and NVML answers."""

    name: ClassVar[str] = DRIVER_SCENARIOS[0]
    onset_s: float = FAULT_ONSET_S
    until_s: float | None = None
    ended: bool = False

    def broken(self, elapsed: float) -> bool:
        if self.ended or elapsed < self.onset_s:
            return False
        return self.until_s is None or elapsed < self.until_s

    def end(self) -> None:
        self.ended = True


def apply(
    name: str,
    gpu: SimulatedGpu,
    *,
    onset_s: float | None = None,
    until_s: float | None = None,
    slowdown: float | None = None,
) -> ScenarioHook | None:
    """Attach fault `name` to `gpu` (healthy-training and idle only set the workload)."""
    if validate(name) in WORKLOAD_SCENARIOS:
        return None
    if name not in _FAULTS:
        raise ValueError(f"{name} is node-wide: it takes no GPU")
    hook = _FAULTS[name](FAULT_ONSET_S if onset_s is None else onset_s, until_s, slowdown)
    gpu.scenario_hooks.append(hook)
    return hook
