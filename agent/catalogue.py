"""The metric catalogue: every family nvwatch exports, defined once.

Names, types and label sets here are a contract with dashboards, alerts and users
(see DESIGN.md). Exposition refuses to emit a family that is not listed here, the
mixin checks its PromQL against it, and docs/metrics.md is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class MetricType(str, Enum):
    GAUGE = "gauge"
    COUNTER = "counter"


# Base units recognised from a name's suffix (before `_total` on counters).
_UNIT_SUFFIXES = (
    "bytes_per_second",
    "bytes",
    "seconds",
    "watts",
    "joules",
    "celsius",
    "hertz",
    "ratio",
)


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...]
    source: str

    @property
    def unit(self) -> str:
        """The base unit named by the metric's suffix, or "" for unitless values."""
        stem = self.name.removesuffix("_total")
        for suffix in _UNIT_SUFFIXES:
            if stem.endswith("_" + suffix):
                return suffix
        return ""


GPU = ("gpu", "uuid")
LINK = (*GPU, "link")
PORT = ("device", "port")

_G = MetricType.GAUGE
_C = MetricType.COUNTER


def _spec(
    name: str, type_: MetricType, labels: tuple[str, ...], source: str, help_: str
) -> MetricSpec:
    return MetricSpec(name=name, type=type_, help=help_, labels=labels, source=source)


CATALOGUE: tuple[MetricSpec, ...] = (
    # --- GPU (source: nvml) -------------------------------------------------------------
    _spec(
        "nvwatch_gpu_info",
        _G,
        (
            *GPU,
            "name",
            "pci_bus_id",
            "serial",
            "driver_version",
            "cuda_version",
            "vbios",
        ),
        "nvml",
        "Descriptive fields of a GPU; value is always 1.",
    ),
    _spec(
        "nvwatch_gpu_up",
        _G,
        GPU,
        "nvml",
        "1 if the GPU answered NVML this poll, 0 if it is lost or failing.",
    ),
    _spec(
        "nvwatch_gpu_utilization_ratio",
        _G,
        GPU,
        "nvml",
        "Fraction of the last sample period a kernel was running (nvidia-smi utilization.gpu).",
    ),
    _spec(
        "nvwatch_gpu_memory_utilization_ratio",
        _G,
        GPU,
        "nvml",
        "Fraction of the last sample period device memory was read or written "
        "(nvidia-smi utilization.memory).",
    ),
    _spec("nvwatch_gpu_memory_total_bytes", _G, GPU, "nvml", "Total device (HBM) memory."),
    _spec("nvwatch_gpu_memory_used_bytes", _G, GPU, "nvml", "Device memory in use."),
    _spec("nvwatch_gpu_memory_free_bytes", _G, GPU, "nvml", "Device memory free."),
    _spec("nvwatch_gpu_power_watts", _G, GPU, "nvml", "Current board power draw."),
    _spec(
        "nvwatch_gpu_power_limit_watts",
        _G,
        GPU,
        "nvml",
        "Power limit the driver enforces now (nvidia-smi enforced.power.limit).",
    ),
    _spec(
        "nvwatch_gpu_power_tdp_watts",
        _G,
        GPU,
        "nvml",
        "Default power limit of the board, its TDP (nvidia-smi power.default_limit).",
    ),
    _spec(
        "nvwatch_gpu_energy_joules_total",
        _C,
        GPU,
        "nvml",
        "Energy consumed by the GPU since the driver was loaded.",
    ),
    _spec(
        "nvwatch_gpu_temperature_celsius",
        _G,
        (*GPU, "sensor"),
        "nvml",
        "Temperature by sensor: gpu (die) or memory (HBM).",
    ),
    _spec(
        "nvwatch_gpu_temperature_threshold_celsius",
        _G,
        (*GPU, "threshold"),
        "nvml",
        "Temperature thresholds: slowdown, shutdown, gpu_max, memory_max.",
    ),
    _spec(
        "nvwatch_gpu_clock_hertz",
        _G,
        (*GPU, "clock"),
        "nvml",
        "Current clock frequency by domain: sm, memory, graphics.",
    ),
    _spec(
        "nvwatch_gpu_clock_max_hertz",
        _G,
        (*GPU, "clock"),
        "nvml",
        "Maximum clock frequency by domain: sm, memory, graphics.",
    ),
    _spec(
        "nvwatch_gpu_clock_event_active",
        _G,
        (*GPU, "reason"),
        "nvml",
        "1 while a clock-event (throttle) reason is active: idle, applications_clocks, "
        "sw_power_cap, hw_slowdown, sync_boost, sw_thermal_slowdown, hw_thermal_slowdown, "
        "hw_power_brake, display_clocks.",
    ),
    _spec(
        "nvwatch_gpu_throttle_seconds_total",
        _C,
        (*GPU, "reason"),
        "nvml",
        "Time clocks were held below target, by NVML violation policy: power, thermal, "
        "sync_boost, board_limit, low_utilization, reliability.",
    ),
    _spec("nvwatch_gpu_fan_speed_ratio", _G, GPU, "nvml", "Fan speed as a fraction of maximum."),
    _spec(
        "nvwatch_gpu_pcie_throughput_bytes_per_second",
        _G,
        (*GPU, "direction"),
        "nvml",
        "PCIe throughput over NVML's last 20 ms window, by direction tx/rx.",
    ),
    _spec(
        "nvwatch_gpu_pcie_replays_total",
        _C,
        GPU,
        "nvml",
        "PCIe replay counter (link-level retransmissions).",
    ),
    _spec(
        "nvwatch_gpu_pcie_link_generation",
        _G,
        (*GPU, "kind"),
        "nvml",
        "PCIe link generation, kind current or max.",
    ),
    _spec(
        "nvwatch_gpu_pcie_link_width",
        _G,
        (*GPU, "kind"),
        "nvml",
        "PCIe link width in lanes, kind current or max.",
    ),
    _spec(
        "nvwatch_gpu_ecc_errors_total",
        _C,
        (*GPU, "type", "scope"),
        "nvml",
        "ECC errors by type (corrected/uncorrected) and scope (volatile since driver load, "
        "aggregate over the board's life).",
    ),
    _spec(
        "nvwatch_gpu_retired_pages",
        _G,
        (*GPU, "cause"),
        "nvml",
        "Memory pages retired, by cause: sbe (multiple single-bit) or dbe (double-bit).",
    ),
    _spec(
        "nvwatch_gpu_retired_pages_pending",
        _G,
        GPU,
        "nvml",
        "1 if a page retirement is pending until the next driver reload.",
    ),
    _spec(
        "nvwatch_gpu_remapped_rows",
        _G,
        (*GPU, "kind"),
        "nvml",
        "HBM row remapping (Ampere+): correctable, uncorrectable, pending (1/0), failure (1/0).",
    ),
    _spec(
        "nvwatch_gpu_xid_errors_total",
        _C,
        (*GPU, "xid"),
        "nvml",
        "XID critical error events seen by the agent since it started, by XID code.",
    ),
    _spec(
        "nvwatch_gpu_sm_active_ratio",
        _G,
        GPU,
        "nvml",
        "GPM: fraction of time SMs had at least one warp resident (Hopper+).",
    ),
    _spec(
        "nvwatch_gpu_sm_occupancy_ratio",
        _G,
        GPU,
        "nvml",
        "GPM: resident warps as a fraction of the maximum (Hopper+).",
    ),
    _spec(
        "nvwatch_gpu_tensor_active_ratio",
        _G,
        GPU,
        "nvml",
        "GPM: fraction of time any tensor pipe was active (Hopper+).",
    ),
    _spec(
        "nvwatch_gpu_dram_active_ratio",
        _G,
        GPU,
        "nvml",
        "GPM: fraction of peak DRAM bandwidth used (Hopper+).",
    ),
    _spec(
        "nvwatch_gpu_process_memory_bytes",
        _G,
        (*GPU, "pid", "process", "user", "job"),
        "nvml",
        "Device memory held by a compute process (the largest processes, capped per GPU).",
    ),
    _spec(
        "nvwatch_gpu_allocation_info",
        _G,
        (*GPU, "job", "user", "pod", "namespace"),
        "nvml",
        "Job, user or Kubernetes pod the GPU is allocated to; value is always 1.",
    ),
    # --- NVLink (source: nvml) ----------------------------------------------------------
    _spec("nvwatch_nvlink_up", _G, LINK, "nvml", "1 if the NVLink link is active, else 0."),
    _spec(
        "nvwatch_nvlink_transmit_bytes_total",
        _C,
        LINK,
        "nvml",
        "Data bytes transmitted on the NVLink link.",
    ),
    _spec(
        "nvwatch_nvlink_receive_bytes_total",
        _C,
        LINK,
        "nvml",
        "Data bytes received on the NVLink link.",
    ),
    _spec(
        "nvwatch_nvlink_errors_total",
        _C,
        (*LINK, "type"),
        "nvml",
        "NVLink data-link error counters by type: crc_flit, crc_data, replay, recovery, ecc.",
    ),
    _spec(
        "nvwatch_nvlink_speed_bytes_per_second",
        _G,
        LINK,
        "nvml",
        "NVLink line rate per direction.",
    ),
    _spec(
        "nvwatch_nvlink_remote_info",
        _G,
        (*LINK, "remote_type", "remote_gpu", "remote_pci_bus_id"),
        "nvml",
        "What the far end of the link is (gpu, switch or cpu); value is always 1.",
    ),
    # --- InfiniBand (source: infiniband) ------------------------------------------------
    _spec(
        "nvwatch_ib_info",
        _G,
        ("device", "board_id", "firmware_version", "hca_type", "node_guid"),
        "infiniband",
        "Descriptive fields of an InfiniBand/RoCE HCA; value is always 1.",
    ),
    _spec(
        "nvwatch_ib_port_info",
        _G,
        (*PORT, "link_layer", "nearest_gpus"),
        "infiniband",
        "Port link layer and the GPUs closest to it on PCIe; value is always 1.",
    ),
    _spec(
        "nvwatch_ib_port_state",
        _G,
        PORT,
        "infiniband",
        "Logical port state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.",
    ),
    _spec(
        "nvwatch_ib_port_physical_state",
        _G,
        PORT,
        "infiniband",
        "Physical port state: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, "
        "5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test.",
    ),
    _spec(
        "nvwatch_ib_port_rate_bytes_per_second",
        _G,
        PORT,
        "infiniband",
        "Nominal link rate of the port (sysfs rate, Gb/s x 125,000,000).",
    ),
    _spec(
        "nvwatch_ib_port_transmit_bytes_total",
        _C,
        PORT,
        "infiniband",
        "Data bytes transmitted (port_xmit_data x 4).",
    ),
    _spec(
        "nvwatch_ib_port_receive_bytes_total",
        _C,
        PORT,
        "infiniband",
        "Data bytes received (port_rcv_data x 4).",
    ),
    _spec(
        "nvwatch_ib_port_transmit_packets_total",
        _C,
        PORT,
        "infiniband",
        "Packets transmitted.",
    ),
    _spec(
        "nvwatch_ib_port_receive_packets_total",
        _C,
        PORT,
        "infiniband",
        "Packets received.",
    ),
    _spec(
        "nvwatch_ib_port_transmit_wait_total",
        _C,
        PORT,
        "infiniband",
        "Ticks the port had data to send but no credits (congestion), port_xmit_wait.",
    ),
    _spec(
        "nvwatch_ib_port_errors_total",
        _C,
        (*PORT, "type"),
        "infiniband",
        "Port error counters by type: symbol, link_error_recovery, link_downed, receive, "
        "receive_remote_physical, receive_switch_relay, transmit_discards, "
        "transmit_constraint, receive_constraint, local_link_integrity, "
        "excessive_buffer_overrun, vl15_dropped.",
    ),
    _spec(
        "nvwatch_ib_port_hw_events_total",
        _C,
        (*PORT, "counter"),
        "infiniband",
        "mlx5 hw_counters of the port, by file name.",
    ),
    _spec(
        "nvwatch_ib_port_reading_saturated",
        _G,
        (*PORT, "counter"),
        "infiniband",
        "1 if a narrow IB counter is pinned at its maximum and has stopped counting.",
    ),
    # --- Host (source: host) ------------------------------------------------------------
    _spec(
        "nvwatch_host_cpu_utilization_ratio",
        _G,
        (),
        "host",
        "Fraction of CPU time not idle since the previous poll, all cores.",
    ),
    _spec(
        "nvwatch_host_cpu_iowait_ratio",
        _G,
        (),
        "host",
        "Fraction of CPU time waiting on I/O since the previous poll, all cores.",
    ),
    _spec(
        "nvwatch_host_memory_used_bytes",
        _G,
        (),
        "host",
        "Host memory in use (total - available).",
    ),
    _spec("nvwatch_host_memory_total_bytes", _G, (), "host", "Host memory installed."),
    _spec("nvwatch_host_load1", _G, (), "host", "One-minute load average."),
    # --- Agent (the poller reports on every source) -------------------------------------
    _spec(
        "nvwatch_agent_build_info",
        _G,
        ("version",),
        "agent",
        "nvwatch build; value is always 1.",
    ),
    _spec(
        "nvwatch_agent_source_up",
        _G,
        ("source",),
        "agent",
        "1 if the source's last poll succeeded, 0 if it failed, timed out or is unavailable.",
    ),
    _spec(
        "nvwatch_agent_poll_duration_seconds",
        _G,
        ("source",),
        "agent",
        "Wall time of the source's last poll.",
    ),
    _spec(
        "nvwatch_agent_source_errors_total",
        _C,
        ("source",),
        "agent",
        "Failed polls of the source since the agent started.",
    ),
    _spec(
        "nvwatch_agent_last_poll_timestamp_seconds",
        _G,
        (),
        "agent",
        "Unix time the last poll cycle completed; the age of the data served.",
    ),
)

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in CATALOGUE}


def spec(name: str) -> MetricSpec:
    """The catalogue entry for `name`; KeyError for a family the contract does not know."""
    return BY_NAME[name]
