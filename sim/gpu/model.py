"""Physical state and dynamics of one simulated GPU.

The simulated NVML library (`nvwatch.sim.nvml`) reads everything it reports from a
`SimulatedGpu`; this module knows nothing about ctypes or NVML return codes. The records
it integrates (links, ECC, events, activity) are in `nvwatch.sim.gpu.state`, what it reads
as between steps (utilization, memory, clocks, the PCIe link) in `readings`. State moves
only in `step()`, which integrates up to a given time in bounded sub-steps, so a clock
jump of an hour costs a few hundred cheap iterations and stays stable.

Model, per sub-step:
- demanded power = idle + compute_intensity x (TDP - idle), mean intensity over the step;
- the power limit and the thermal controller turn demand into power, clocks and throttle
  reasons (`nvwatch.sim.gpu.thermal`); time under each counts as violation time;
- temperature relaxes towards the closed-loop steady state (thermal.py) with time
  constant tau: exact for any step length, no explicit-Euler instability; the air the
  board breathes (its ambient, and how well its fans move it) comes from the node's
  `AirSupply` (the BMC model, sim/bmc/model.py) at every sub-step;
- energy integrates power; NVLink/PCIe byte counters integrate the workload's traffic;
- error counters accumulate expected counts (rate x dt) and report the integer part, so
  they depend only on time, not on how often anyone polls.
"""

from __future__ import annotations

import hashlib
import math
import uuid as uuid_module
from typing import Protocol

from nvwatch.sim.gpu.readings import GpuReadings
from nvwatch.sim.gpu.state import (
    EVENT_XID,
    REASON_GPU_IDLE,
    REASON_SW_THERMAL,
    EccState,
    GpuEvent,
    LinkState,
)
from nvwatch.sim.gpu.thermal import AMBIENT_C, power_at, steady_temperature, throttle_reasons
from nvwatch.sim.profiles import GpuModel, LinkEnd
from nvwatch.sim.workload import TRAINING_COMPUTE, Workload, workload_means

# a rank at or above this utilization is in its steps (below: a checkpoint idles it)
RANK_COMPUTING_UTIL = 0.5

MAX_SUBSTEP_S = 0.5  # a training step's phases last ~0.6 s and longer (workload.py)
MAX_SUBSTEPS = 128  # per advance: bounds the cost of a big clock jump


def _stable_digest(*parts: object) -> bytes:
    return hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()


class ScenarioHook(Protocol):
    """A fault on one GPU (`nvwatch.sim.gpu.scenarios`): called at every sub-step with the
    seconds since the simulation started; `end()` stops it and repairs what it broke."""

    @property
    def name(self) -> str: ...

    @property
    def ended(self) -> bool: ...

    def __call__(self, gpu: SimulatedGpu, elapsed: float) -> None: ...

    def end(self, gpu: SimulatedGpu) -> None: ...


class AirSupply(Protocol):
    """The chassis around a GPU: at `elapsed` seconds since the start, (the temperature of
    the air reaching GPU `index`, the factor its fans' airflow puts on its thermal
    resistance: 1 with its fans turning as designed)."""

    def conditions(self, index: int, elapsed: float) -> tuple[float, float]: ...


class SimulatedGpu(GpuReadings):
    """One GPU: identity, fault knobs and physical state, integrated by `step()`."""

    def __init__(
        self,
        index: int,
        model: GpuModel,
        links: tuple[LinkEnd, ...],
        workload: Workload,
        *,
        seed: int = 0,
        start_time: float = 0.0,
        node_name: str = "",
    ) -> None:
        self.index = index
        self.model = model
        self.workload = workload
        self.seed = seed
        digest = _stable_digest(node_name, seed, index, model.name)
        self.uuid = "GPU-" + str(uuid_module.UUID(bytes=digest[:16]))
        # ~ serials are 13 decimal digits on data-centre boards
        self.serial = "1" + str(int.from_bytes(digest[16:24], "big") % 10**12).zfill(12)
        self.links = [LinkState(end) for end in links]

        # fault knobs (scenarios set these)
        self.thermal_resistance_c_per_w = model.thermal_resistance_c_per_w
        self.power_limit_w = model.tdp_watts
        self.lost = False
        self.pcie_replay_rate_per_s = 0.0
        # a GPU running slower with no clock-event reason to show for it (gpu-slow): its
        # clocks, and with them its dynamic power, at this share of what the power and
        # thermal law allow
        self.speed_factor = 1.0
        # share of each live NVLink link's bandwidth the GPU gets (replays on a bad link
        # eat the rest: nvlink-degraded,slowdown=)
        self.nvlink_speed = 1.0
        # the PCIe link as trained (pcie-downtrained); None: the board's own width/gen
        self.pcie_width_trained: int | None = None
        self.pcie_generation_trained: int | None = None
        # share of its rate the traffic through that link keeps (GPUDirect RDMA to the
        # HCA: the x16 link had headroom over the HCA, a narrower one has less)
        self.pcie_share = 1.0
        self.scenario_hooks: list[ScenarioHook] = []
        # sub-steps one step() may take at most: fewer make a long step cheaper (a month
        # of history at minutes per step), the thermal relaxation being exact at any length
        self.max_substeps = MAX_SUBSTEPS
        # Under MIG (sim/gpu/mig_state.py) the share of the GPU's SMs its instances keep
        # busy: it scales the workload's load, and NVLink idles (MIG has no NVLink P2P).
        # None: MIG off, the workload drives the whole GPU.
        self.mig_load: float | None = None
        # the air around the board (attach_air); without a chassis model, AMBIENT_C
        self.air: AirSupply | None = None
        self.ambient_c = AMBIENT_C
        self.cooling_factor = 1.0

        # physical state
        self.time = start_time
        self.start_time = start_time
        self.temperature_c = self.ambient_c + self.thermal_resistance_c_per_w * model.idle_watts
        self.power_w = model.idle_watts
        self.energy_mj = 0.0
        self.clock_factor = 1.0
        self.reasons = REASON_GPU_IDLE
        self.power_violation_ns = 0.0
        self.thermal_violation_ns = 0.0
        self.low_util_violation_ns = 0.0
        self.pcie_tx_bytes = 0.0
        self.pcie_rx_bytes = 0.0
        self.pcie_tx_rate = 0.0  # bytes/s over the last sub-step
        self.pcie_rx_rate = 0.0
        self.pcie_replays = 0.0
        self.ecc = EccState()
        self._activity = [0.0] * 5  # sm, occupancy, tensor, dram, graphics integrals
        self.events: list[GpuEvent] = []  # drained by the library after each step
        self._update_reasons(self._workload_util(start_time), capped=False)
        if not workload.cold_start:
            self._settle(start_time)

    # --- events and faults ----------------------------------------------------------

    def emit_xid(self, xid: int) -> None:
        self.emit_event(EVENT_XID, xid)

    def emit_event(self, event_type: int, data: int = 0) -> None:
        self.events.append(GpuEvent(self.index, event_type, data, self.time))

    def drain_events(self) -> list[GpuEvent]:
        events, self.events = self.events, []
        return events

    def nvlink_error_count(self, link: int, kind: str) -> int:
        return int(self.links[link].errors[kind])

    def reset(self) -> None:
        """A GPU reset (`nvidia-smi -r` after a drain): what it clears, and what it keeps.

        Volatile ECC counts restart at 0; aggregate ones live in the InfoROM and stay. A
        pending page retirement or row remap takes effect: the pages stay retired, nothing
        is pending. A lost GPU answers again. The power limit returns to its default (a
        limit set with `nvidia-smi -pl` does not survive a reset), and with it the clocks
        and throttle reasons; the temperature does not jump, it relaxes from here.
        """
        self.ecc.corrected_volatile = 0
        self.ecc.uncorrected_volatile = 0
        self.ecc.retired_pending = False
        self.ecc.remap_pending = False
        self.lost = False
        self.power_limit_w = self.model.tdp_watts
        self.clock_factor = 1.0
        self._update_reasons(self.utilization, capped=False)

    def run(self, workload: Workload) -> None:
        """Run `workload` from now on (a synchronous job's rank: sim/job/); a board not
        cold-started settles in it at once, as it would have been running it."""
        self.workload = workload
        if not workload.cold_start:
            self._settle(self.time)

    # --- dynamics -------------------------------------------------------------------

    def attach_air(self, air: AirSupply) -> None:
        """Breathe `air` from now on; a board not cold-started settles in it at once."""
        self.air = air
        self._breathe(self.time)
        if not self.workload.cold_start:
            self._settle(self.time)

    def _breathe(self, t: float) -> None:
        if self.air is not None:
            elapsed = t - self.start_time
            self.ambient_c, self.cooling_factor = self.air.conditions(self.index, elapsed)

    def _steady_temperature(self, dynamic_demand_w: float) -> float:
        """Where this demand holds the die, with this board's power limit and cooling."""
        r = self.thermal_resistance_c_per_w * self.cooling_factor
        limit, ambient = self.power_limit_w, self.ambient_c
        return steady_temperature(self.model, limit, r, dynamic_demand_w, ambient)

    def _settle(self, t: float) -> None:
        """Begin in the workload's thermal steady state: the temperature the mean demand of
        the last thermal time constant holds the die at, and power, clocks and reasons as
        they are at `t` at that temperature (not a cold die drawing full power)."""
        model = self.model
        tau = model.thermal_time_constant_s
        mean = self.workload.mean_compute_intensity(t - tau, t, self.index)
        span = (model.tdp_watts - model.idle_watts) * self.speed_factor
        self.temperature_c = self._steady_temperature(mean * span)
        demand = self.workload.compute_intensity(t, self.index)
        util = self._workload_util(t)
        power, factor, capped = self._power_and_clocks(demand * span, util)
        self.power_w = power
        self.clock_factor = factor * self.speed_factor if demand > 0 else 1.0
        self._update_reasons(util, capped=capped)

    def _power_and_clocks(self, demand_w: float, util: float) -> tuple[float, float, bool]:
        """(power W, clock factor, capped) for this dynamic demand now. A rank of a
        synchronous job reads its step's averages, which hide the phase that meets a
        power cap: while it computes it demands TRAINING_COMPUTE's intensity, and its
        clocks (and sw_power_cap) are what the cap leaves it then, the speed its job
        steps at (sim/job/held.py)."""
        model = self.model
        power, factor, capped = power_at(model, self.power_limit_w, self.temperature_c, demand_w)
        if self.workload.paced_by_clocks and demand_w > 0 and util >= RANK_COMPUTING_UTIL:
            span = (model.tdp_watts - model.idle_watts) * self.speed_factor
            computing = max(demand_w, TRAINING_COMPUTE[1] * span)
            _, factor, capped = power_at(model, self.power_limit_w, self.temperature_c, computing)
        return power, factor, capped

    def _update_reasons(self, util: float, *, capped: bool) -> None:
        self.reasons = throttle_reasons(self.model, self.temperature_c, util, capped=capped)

    def _substeps(self, until: float) -> tuple[int, float]:
        """(how many, how long) sub-steps to integrate up to `until`; (0, 0) when there.
        A rank's GPU copy held at its job's load (sim/job/held.py) cuts a span alike."""
        span = until - self.time
        if span <= 0:
            return 0, 0.0
        n = min(self.max_substeps, max(1, math.ceil(span / MAX_SUBSTEP_S)))
        return n, span / n

    def step(self, until: float) -> None:
        """Integrate the state from self.time up to `until`."""
        n, dt = self._substeps(until)
        for _ in range(n):
            self._substep(self.time, self.time + dt)

    def _substep(self, t0: float, t1: float) -> None:
        dt = t1 - t0
        # faults due within this sub-step take effect for it (at most MAX_SUBSTEP_S early),
        # so everything scheduled up to the clock has happened when a call returns
        for hook in self.scenario_hooks:
            hook(self, t1 - self.start_time)
        self._breathe(t1)
        if self.lost:
            intensity = util = comm = 0.0
        else:
            # only inference load differs per GPU; training GPUs share one computation
            key = self.index if self.workload.kind == "inference" else -1
            intensity, util, comm = workload_means(self.workload, key, t0, t1)
            if self.mig_load is not None:
                intensity, util, comm = intensity * self.mig_load, util * self.mig_load, 0.0
        self._integrate_power(dt, intensity, util)
        self.time = t1
        # activity integrals for GPM (~ shares of busy time, typical of LLM training)
        busy = intensity * self._pace
        for i, share in enumerate((0.92, 0.45, 0.70, 0.55, 1.0)):
            self._activity[i] += (util if i == 4 else busy * share) * dt
        self._integrate_traffic(dt, util, comm)
        self.ecc.trickle(dt)

    def _integrate_power(self, dt: float, intensity: float, util: float) -> None:
        """Temperature, power, clocks, energy, reasons and violation times over `dt`."""
        model = self.model
        # lower clocks with no reason (gpu-slow) draw less dynamic power
        demand = intensity * (model.tdp_watts - model.idle_watts) * self.speed_factor
        # temperature: exact relaxation towards the closed-loop steady state
        target = self._steady_temperature(demand)
        alpha = 1.0 - math.exp(-dt / model.thermal_time_constant_s)
        self.temperature_c += (target - self.temperature_c) * alpha
        power, factor, capped = self._power_and_clocks(demand, util)
        self.power_w = power
        self.clock_factor = factor * self.speed_factor if demand > 0 else 1.0
        self.energy_mj += power * dt * 1000.0
        self._update_reasons(util, capped=capped)
        ns = dt * 1e9
        if capped:
            self.power_violation_ns += ns
        if self.reasons & REASON_SW_THERMAL:
            self.thermal_violation_ns += ns
        if util < 0.01:
            self.low_util_violation_ns += ns

    def _integrate_traffic(self, dt: float, util: float, comm: float) -> None:
        """PCIe and NVLink byte counters, PCIe replays and NVLink errors over `dt`."""
        model = self.model
        # PCIe: input pipeline traffic ~ 5% of the link in, 1% out while computing (of
        # the link as trained: a downtrained link carries less)
        lanes = self.pcie_bytes_per_second
        self.pcie_rx_rate = 0.05 * util * lanes
        self.pcie_tx_rate = 0.01 * util * lanes
        self.pcie_rx_bytes += self.pcie_rx_rate * dt
        self.pcie_tx_bytes += self.pcie_tx_rate * dt
        self.pcie_replays += self.pcie_replay_rate_per_s * dt
        # NVLink: all-reduce traffic is symmetric, each live link carries its share
        for link in self.links:
            if link.up:
                moved = comm * model.nvlink_bytes_per_second * self.nvlink_speed * dt
                link.tx_bytes += moved
                link.rx_bytes += moved
            for kind, rate in link.error_rates.items():
                if rate:
                    link.errors[kind] += rate * dt

    # --- ECC helpers used by scenarios ---------------------------------------------

    def add_ecc_errors(self, *, corrected: int = 0, uncorrected: int = 0) -> None:
        self.ecc.add_errors(corrected=corrected, uncorrected=uncorrected)

    def retire_page(self, *, double_bit: bool) -> None:
        """Record a bad DRAM location: page retirement before Ampere, row remap after."""
        if self.model.row_remapping:
            if double_bit:
                self.ecc.remapped_uncorrectable += 1
            else:
                self.ecc.remapped_correctable += 1
            self.ecc.remap_pending = True  # the remap takes effect at the next GPU reset
            return
        pages = self.ecc.retired_dbe if double_bit else self.ecc.retired_sbe
        # a page-aligned address inside the board's memory, stable per seed
        slot = int.from_bytes(_stable_digest(self.uuid, len(pages), double_bit)[:4], "big")
        address = (slot % (self.model.memory_bytes // (4096 * 16))) * 16
        pages.append((address, self.time))
        self.ecc.retired_pending = True
