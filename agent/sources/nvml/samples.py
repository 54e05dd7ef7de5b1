"""Plain samples the NVML source returns: no Prometheus, no pynvml types.

Every optional reading is `X | None`: None means the GPU does not support it, the call
failed this poll, or the GPU is down; the exposition skips it (absent, never 0). Units are
base units (bytes, seconds, watts, joules, celsius, hertz, ratios 0..1), converted from
NVML's milli/kilo units by the source, so the exposition only renames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

#: Clock-event (throttle) reason names, in the order of their NVML bits (0x1 .. 0x100);
#: these are the `reason` label values of nvwatch_gpu_clock_event_active.
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("idle", 0x1),
    ("applications_clocks", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake", 0x80),
    ("display_clocks", 0x100),
)

#: NVML violation policies (NVML_PERF_POLICY_*) by the `reason` label of
#: nvwatch_gpu_throttle_seconds_total.
THROTTLE_POLICIES: tuple[tuple[str, int], ...] = (
    ("power", 0),
    ("thermal", 1),
    ("sync_boost", 2),
    ("board_limit", 3),
    ("low_utilization", 4),
    ("reliability", 5),
)

#: NVLink data-link error counters (NVML_NVLINK_ERROR_DL_*) by `type` label.
NVLINK_ERROR_TYPES: tuple[tuple[str, int], ...] = (
    ("replay", 0),
    ("recovery", 1),
    ("crc_flit", 2),
    ("crc_data", 3),
    ("ecc", 4),
)

NVLINK_DETAIL_CHOICES = ("link", "gpu")


@dataclass(frozen=True)
class GpuInfo:
    """Descriptive fields of one GPU (labels of nvwatch_gpu_info); "" when unreadable."""

    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""  # NVML form, 8-hex-digit domain: "00000000:12:00.0"
    serial: str = ""
    vbios: str = ""
    driver_version: str = ""
    cuda_version: str = ""  # "12.8", from nvmlSystemGetCudaDriverVersion


@dataclass(frozen=True)
class NvLinkSample:
    """One NVLink link of one GPU."""

    link: int
    up: bool | None = None
    transmit_bytes: int | None = None  # cumulative data bytes (NVML counts KiB)
    receive_bytes: int | None = None
    # cumulative error counters by type name (NVLINK_ERROR_TYPES); absent types missing
    errors: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    speed_bytes_per_second: float | None = None  # line rate per direction
    remote_type: str | None = None  # "gpu" | "switch" | "cpu"
    remote_gpu: int | None = None  # local index of the GPU at the far end
    remote_pci_bus_id: str | None = None


@dataclass(frozen=True)
class ProcessSample:
    """A compute process holding device memory."""

    pid: int
    memory_bytes: int | None
    name: str = ""  # psutil name when readable, else ""
    user: str = ""
    # the owner attribution placed the pid with (agent/sources/attribution); "" unknown
    job: str = ""  # the Slurm job id
    pod: str = ""  # the Kubernetes pod and its namespace
    namespace: str = ""
    # the MIG instance the process runs in (None outside MIG): NVML's process info ids
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    # the pid's SM and frame-buffer utilization in the poll's window (processes.py);
    # None where NVML gives no per-process utilization (MIG mode, older boards)
    sm_utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None


@dataclass(frozen=True)
class ProcessOwnerLabels:
    """What attribution knows of a pid, for its process series: job, or pod/namespace."""

    job: str = ""
    pod: str = ""
    namespace: str = ""


class ProcessAttribution(Protocol):
    """What the NVML source needs from attribution: a cached lookup per pid (a dict
    read, on the poll path) and a look at each poll's GPUs (new pids wake the refresher,
    which resolves them on its own thread)."""

    def labels_of(self, pid: int) -> ProcessOwnerLabels | None: ...

    def observe(self, gpus: tuple[GpuSample, ...]) -> None: ...


@dataclass(frozen=True)
class MigDeviceSample:
    """One MIG device of a GPU in MIG mode: a GPU instance and one of its compute
    instances, what `nvidia-smi -L` lists as "MIG 3g.40gb Device 0 (UUID: MIG-...)".

    Memory and GPM activity are the GPU instance's (NVML reports them per GPU instance;
    compute instances of one GPU instance share them). None: not read this poll, or not
    supported (GPM before Hopper, or on the first poll).
    """

    gpu_instance_id: int
    compute_instance_id: int
    mig_uuid: str  # "MIG-<uuid>", the device id CUDA_VISIBLE_DEVICES and Kubernetes use
    profile: str  # "3g.40gb", the GPU instance's profile
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    sm_active_ratio: float | None = None
    sm_occupancy_ratio: float | None = None
    tensor_active_ratio: float | None = None
    dram_active_ratio: float | None = None
    # every compute process NVML lists in this instance (not capped like `processes`)
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class GpuSample:
    """Everything read from one GPU in one poll.

    `up` False means the GPU stopped answering (GpuIsLost, Unknown, ...): then every
    other reading is None and only the identity (index, uuid, info) is kept.
    """

    index: int
    uuid: str
    info: GpuInfo
    up: bool
    utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    power_tdp_watts: float | None = None
    energy_joules: float | None = None
    temperature_gpu_celsius: float | None = None
    temperature_memory_celsius: float | None = None
    threshold_slowdown_celsius: float | None = None
    threshold_shutdown_celsius: float | None = None
    threshold_gpu_max_celsius: float | None = None
    threshold_memory_max_celsius: float | None = None
    clock_sm_hertz: float | None = None
    clock_memory_hertz: float | None = None
    clock_graphics_hertz: float | None = None
    clock_sm_max_hertz: float | None = None
    clock_memory_max_hertz: float | None = None
    clock_graphics_max_hertz: float | None = None
    # reason name -> active, only for reasons in the GPU's supported mask
    clock_events: Mapping[str, bool] = field(default_factory=lambda: MappingProxyType({}))
    # policy name -> cumulative seconds clocks were held back
    throttle_seconds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    fan_speed_ratio: float | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    pcie_replays: int | None = None
    pcie_link_generation_current: int | None = None
    pcie_link_generation_max: int | None = None
    pcie_link_width_current: int | None = None
    pcie_link_width_max: int | None = None
    ecc_corrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    # XID code -> events the agent's listener has seen since it started
    xid_counts: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    sm_active_ratio: float | None = None
    sm_occupancy_ratio: float | None = None
    tensor_active_ratio: float | None = None
    dram_active_ratio: float | None = None
    processes: tuple[ProcessSample, ...] = ()
    nvlinks: tuple[NvLinkSample, ...] = ()
    # MIG mode now and after the next reset (None: the GPU has no MIG), and the MIG
    # devices of a GPU in MIG mode (agent/sources/nvml/mig.py)
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    mig_devices: tuple[MigDeviceSample, ...] = ()


@dataclass(frozen=True)
class NvmlSample:
    """One poll of every GPU on the node.

    `nvlink_detail` carries the source's option to the exposition: "link" renders one
    series per link, "gpu" one aggregate per GPU (see nvwatch.agent.exposition.gpu).
    """

    gpus: tuple[GpuSample, ...]
    driver_version: str = ""
    cuda_version: str = ""
    nvlink_detail: str = "link"
