"""What a simulated GPU reads as now, derived from its state without moving it.

Utilization, memory, clocks, temperatures, fan, P-state, the PCIe link as trained and
the activity integrals: what the simulated NVML reads off a board between two steps.
`GpuReadings` declares the state it reads; `SimulatedGpu` (model.py), its only subclass,
holds that state and integrates it.
"""

from __future__ import annotations

from nvwatch.sim.gpu.state import Activity, LinkState
from nvwatch.sim.profiles import MIB, GpuModel
from nvwatch.sim.workload import Workload

HBM_OFFSET_C = 4.0  # ~ HBM stacks read a few degrees above the GPU die under load

# PCIe per-lane payload rate in bytes/s after line coding (PCI-SIG: 8 GT/s 128b/130b for
# Gen3, doubling each generation).
PCIE_LANE_BYTES_PER_S = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969.2e6, 5: 3938.5e6}


class GpuReadings:
    """The readings of a GPU's state now; SimulatedGpu sets every attribute below."""

    index: int
    model: GpuModel
    workload: Workload
    lost: bool
    mig_load: float | None
    time: float
    clock_factor: float
    temperature_c: float
    power_w: float
    pcie_width_trained: int | None
    pcie_generation_trained: int | None
    pcie_tx_bytes: float
    pcie_rx_bytes: float
    links: list[LinkState]
    _activity: list[float]

    def _workload_util(self, t: float) -> float:
        if self.lost:
            return 0.0
        util = self.workload.gpu_utilization(t, self.index)
        return util if self.mig_load is None else util * self.mig_load

    @property
    def utilization(self) -> float:
        """GPU busy fraction now (nvidia-smi utilization.gpu), 0..1."""
        return self._workload_util(self.time)

    @property
    def memory_utilization(self) -> float:
        """Memory-controller busy fraction (utilization.memory): ~ 60% of compute load."""
        return 0.6 * self.workload.compute_intensity(self.time, self.index) * self._pace

    @property
    def _pace(self) -> float:
        """What the clocks take off the work done per second: all of it for a workload
        fixed in time, nothing for one whose time shares stretch with them."""
        return 1.0 if self.workload.paced_by_clocks else self.clock_factor

    @property
    def memory_reserved_bytes(self) -> int:
        # ~ nvidia-smi "Reserved": about half a percent of the board on recent drivers
        return (self.model.memory_bytes // 200) // MIB * MIB

    @property
    def memory_used_bytes(self) -> int:
        """Used by processes (NVML v2 `used`, which excludes the reserved part)."""
        share = self.workload.memory_share(self.time)
        driver_overhead = 0 if share == 0.0 else 512 * MIB  # CUDA context + cuBLAS workspace
        return int(self.model.memory_bytes * share) // MIB * MIB + driver_overhead

    @property
    def process_memory_bytes(self) -> int:
        """What the one job process on this GPU holds: all but the context overhead."""
        used = self.memory_used_bytes
        return max(0, used - 512 * MIB) if used else 0

    @property
    def sm_clock_mhz(self) -> int:
        if self.utilization < 0.01:
            return self.model.idle_sm_clock_mhz
        mhz = self.model.max_sm_clock_mhz * self.clock_factor
        return int(max(self.model.idle_sm_clock_mhz, mhz))

    @property
    def memory_clock_mhz(self) -> int:
        # HBM runs at one clock; GDDR boards park the memory clock when idle (~ 405 MHz)
        if self.utilization < 0.01 and not self.model.memory_temperature:
            return 405
        return self.model.max_memory_clock_mhz

    @property
    def video_clock_mhz(self) -> int:
        return int(self.sm_clock_mhz * 0.9)  # ~ video clock tracks ~90% of graphics

    @property
    def max_video_clock_mhz(self) -> int:
        return int(self.model.max_sm_clock_mhz * 0.9)

    @property
    def memory_temperature_c(self) -> float:
        return self.temperature_c + HBM_OFFSET_C * (self.power_w / self.model.tdp_watts)

    @property
    def fan_percent(self) -> int:
        # ~ a GeForce fan curve: 30% floor, ramps from 40 C, full speed by ~87 C
        return int(min(100.0, max(30.0, 30.0 + (self.temperature_c - 40.0) * 1.5)))

    @property
    def pstate(self) -> int:
        return 0 if self.utilization >= 0.01 else 8

    @property
    def pcie_generation_current(self) -> int:
        # the link trains down to Gen1 when idle to save power, back up under load (to
        # what it trained to, a downtrained link)
        if self.utilization < 0.01:
            return 1
        return self.pcie_generation_trained or self.model.pcie_generation

    @property
    def pcie_width_current(self) -> int:
        return self.pcie_width_trained or self.model.pcie_width

    @property
    def pcie_bytes_per_second(self) -> float:
        """The link's payload rate each way as trained now (generation at load)."""
        generation = self.pcie_generation_trained or self.model.pcie_generation
        return PCIE_LANE_BYTES_PER_S[generation] * self.pcie_width_current

    def activity(self) -> Activity:
        return Activity(
            self.time,
            sm_active=self._activity[0],
            sm_occupancy=self._activity[1],
            tensor_active=self._activity[2],
            dram_active=self._activity[3],
            graphics_active=self._activity[4],
            pcie_tx_bytes=self.pcie_tx_bytes,
            pcie_rx_bytes=self.pcie_rx_bytes,
            nvlink_tx_bytes=sum(link.tx_bytes for link in self.links),
            nvlink_rx_bytes=sum(link.rx_bytes for link in self.links),
        )
