"""The records a simulated GPU keeps and hands out: link and ECC state, events, activity.

Plain data, split from `nvwatch.sim.gpu.model` (which integrates them) so that the
simulated NVML can read a GPU's state without reading its dynamics. The bit values are
NVML's own, because the simulated library passes them through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nvwatch.sim.profiles import LinkEnd

# Clock-event / throttle reason bits (NVML header, nvmlClocksEventReason*).
REASON_GPU_IDLE = 0x1
REASON_APPLICATIONS_CLOCKS = 0x2
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SYNC_BOOST = 0x10
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40
REASON_HW_POWER_BRAKE = 0x80
REASON_DISPLAY_CLOCKS = 0x100

EVENT_DOUBLE_BIT_ECC = 0x2  # nvmlEventTypeDoubleBitEccError
EVENT_XID = 0x8  # nvmlEventTypeXidCriticalError

NVLINK_ERROR_KINDS = ("replay", "recovery", "crc_flit", "crc_data", "ecc")


@dataclass
class LinkState:
    """One NVLink link of this GPU."""

    end: LinkEnd
    up: bool = True
    tx_bytes: float = 0.0
    rx_bytes: float = 0.0
    # expected error counts (floats; NVML reports the integer part)
    errors: dict[str, float] = field(default_factory=lambda: dict.fromkeys(NVLINK_ERROR_KINDS, 0.0))
    error_rates: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(NVLINK_ERROR_KINDS, 0.0)
    )


@dataclass
class EccState:
    corrected_volatile: int = 0
    uncorrected_volatile: int = 0
    corrected_aggregate: int = 0
    uncorrected_aggregate: int = 0
    corrected_rate_per_s: float = 0.0  # single-bit errors trickling in
    _corrected_carry: float = 0.0
    retired_sbe: list[tuple[int, float]] = field(default_factory=list)  # (address, time)
    retired_dbe: list[tuple[int, float]] = field(default_factory=list)
    retired_pending: bool = False
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False

    def add_errors(self, *, corrected: int = 0, uncorrected: int = 0) -> None:
        self.corrected_volatile += corrected
        self.corrected_aggregate += corrected
        self.uncorrected_volatile += uncorrected
        self.uncorrected_aggregate += uncorrected

    def trickle(self, dt: float) -> None:
        """Add the corrected errors due over `dt` seconds: whole errors only, the rest
        carried, so the count depends on elapsed time and not on the sub-step length."""
        if not self.corrected_rate_per_s:
            return
        self._corrected_carry += self.corrected_rate_per_s * dt
        whole = int(self._corrected_carry)
        if whole:
            self._corrected_carry -= whole
            self.add_errors(corrected=whole)


@dataclass(frozen=True)
class GpuEvent:
    """Something NVML delivers through nvmlEventSetWait: type bit and its data (the XID)."""

    gpu: int
    event_type: int
    data: int
    time: float


@dataclass(frozen=True)
class Activity:
    """Cumulative activity integrals (fraction x seconds), for GPM sample deltas."""

    time: float
    sm_active: float
    sm_occupancy: float
    tensor_active: float
    dram_active: float
    graphics_active: float
    pcie_tx_bytes: float
    pcie_rx_bytes: float
    nvlink_tx_bytes: float
    nvlink_rx_bytes: float
