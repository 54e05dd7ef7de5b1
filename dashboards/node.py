"""The node dashboard: every GPU of one node, its NVLink links and IB ports, its host, and
the node around them from its BMC (dashboards/node_bmc.py)."""

from __future__ import annotations

from grafanalib import core as g

from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.builder import Grid, PanelRow, Q, dashboard, node_matchers, rate, variable
from nvwatch.dashboards.links import (
    INFINIBAND,
    NODE,
    NVLINK,
    DataLink,
    carry,
    from_label,
    label_value,
)
from nvwatch.dashboards.node_bmc import bmc_row
from nvwatch.mixin.config import MixinConfig

_ACTIVE = [
    {
        "type": "value",
        "options": {
            "0": {"text": "off", "color": "transparent"},
            "1": {"text": "active", "color": "red"},
        },
    }
]


def _m(cfg: MixinConfig, name: str, *matchers: str) -> str:
    """`name` on the chosen node's chosen GPUs, with extra matchers."""
    return name + cfg.sel(*node_matchers(cfg), 'gpu=~"$gpu"', *matchers)


def _host(cfg: MixinConfig, name: str) -> str:
    """`name` of the chosen node as a whole (host and IB series have no gpu label)."""
    return name + cfg.sel(*node_matchers(cfg))


def _to_nvlink_of_gpu() -> DataLink:
    return DataLink(
        NVLINK,
        f"NVLink links of GPU {label_value('gpu')}",
        (carry("cluster"), carry("instance"), from_label("gpu", "gpu")),
    )


def _utilization_memory_power(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "timeseries",
        "GPU utilization",
        "Share of time a kernel ran, per GPU. One GPU lower than the rest in a multi-GPU "
        "job is waiting on the others or throttled. NVML reports none for a GPU in MIG "
        "mode: see the MIG instances row.",
        "percentunit",
        [Q(_m(cfg, "nvwatch_gpu_utilization_ratio"), "GPU {{gpu}}")],
        min_=0,
        max_=1,
    )
    grid.add(
        "timeseries",
        "HBM used / total",
        "Device memory in use against the GPU's total. Near total, jobs fail to allocate "
        "or fall back to smaller batches.",
        "bytes",
        [
            Q(_m(cfg, "nvwatch_gpu_memory_used_bytes"), "GPU {{gpu}} used"),
            Q(_m(cfg, "nvwatch_gpu_memory_total_bytes"), "GPU {{gpu}} total"),
        ],
        min_=0,
    )
    grid.add(
        "timeseries",
        "Power vs limit vs TDP",
        "Board power against the enforced limit and the default limit (TDP). Power flat at "
        "the limit is sw_power_cap throttling; a limit below TDP was set by someone.",
        "watt",
        [
            Q(_m(cfg, "nvwatch_gpu_power_watts"), "GPU {{gpu}} power"),
            Q(_m(cfg, "nvwatch_gpu_power_limit_watts"), "GPU {{gpu}} limit"),
            Q(_m(cfg, "nvwatch_gpu_power_tdp_watts"), "GPU {{gpu}} TDP"),
        ],
        min_=0,
    )


def _temperature_and_clocks(grid: Grid, cfg: MixinConfig) -> None:
    thresholds = 'threshold=~"slowdown|memory_max"'
    grid.add(
        "timeseries",
        "GPU and HBM temperature vs thresholds",
        "Die and HBM temperature with the GPU's own slowdown and memory_max thresholds. "
        f"Within {cfg.gpu_temp_margin_celsius:g} °C of slowdown an alert fires; above it "
        "the clocks drop.",
        "celsius",
        [
            Q(_m(cfg, "nvwatch_gpu_temperature_celsius"), "GPU {{gpu}} {{sensor}}"),
            Q(
                _m(cfg, "nvwatch_gpu_temperature_threshold_celsius", thresholds),
                "GPU {{gpu}} {{threshold}}",
            ),
        ],
        steps=t.temperature(cfg),
    )
    grid.add(
        "timeseries",
        "SM and memory clocks",
        "Current SM and memory clocks per GPU. SM clock far below its maximum under load "
        "means throttling: see the reasons below.",
        "hertz",
        [Q(_m(cfg, "nvwatch_gpu_clock_hertz", 'clock=~"sm|memory"'), "GPU {{gpu}} {{clock}}")],
    )


def _throttling(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "state-timeline",
        "Throttle reasons",
        "When each clock-event reason was active, per GPU. Thermal and hw_power_brake "
        "reasons are faults; sw_power_cap is a job at its power limit.",
        "none",
        [
            Q(
                _m(cfg, "nvwatch_gpu_clock_event_active", 'reason!~"idle|display_clocks"'),
                "GPU {{gpu}} {{reason}}",
            )
        ],
        steps=t.FLAG_ACTIVE,
        mappings=_ACTIVE,
    )
    grid.add(
        "timeseries",
        "Time throttled by policy",
        "Share of time each GPU's clocks were held down, by NVML violation policy.",
        "percentunit",
        [Q(rate(_m(cfg, "nvwatch_gpu_throttle_seconds_total")), "GPU {{gpu}} {{reason}}")],
        steps=t.load(cfg),
        min_=0,
    )


def _pcie(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "timeseries",
        "PCIe throughput",
        "Host<->GPU PCIe traffic per direction (NVML samples a 20 ms window).",
        "Bps",
        [Q(_m(cfg, "nvwatch_gpu_pcie_throughput_bytes_per_second"), "GPU {{gpu}} {{direction}}")],
    )
    grid.add(
        "timeseries",
        "PCIe replays",
        "PCIe link-level retransmissions per second; a healthy link stays at zero.",
        "cps",
        [Q(rate(_m(cfg, "nvwatch_gpu_pcie_replays_total")), "GPU {{gpu}}")],
        steps=t.above(cfg.pcie_replay_rate_per_second),
    )
    grid.add(
        "table",
        "PCIe link generation and width",
        "Current against maximum PCIe generation and width. Idle GPUs train down to save "
        "power; under load current should equal max.",
        "none",
        [
            Q(_m(cfg, "nvwatch_gpu_pcie_link_generation"), instant=True, table=True),
            Q(_m(cfg, "nvwatch_gpu_pcie_link_width"), instant=True, table=True),
        ],
    )


def _memory_health(grid: Grid, cfg: MixinConfig) -> None:
    xids = _m(cfg, "nvwatch_gpu_xid_errors_total")
    grid.add(
        "timeseries",
        "ECC errors",
        "Corrected and uncorrected ECC errors per second (volatile counters). Any "
        "uncorrected error pages: NvwatchGpuEccUncorrectable.",
        "cps",
        [
            Q(
                rate(_m(cfg, "nvwatch_gpu_ecc_errors_total", 'scope="volatile"')),
                "GPU {{gpu}} {{type}}",
            )
        ],
        steps=t.ANY_BAD,
    )
    grid.add(
        "table",
        "Retired pages, remapped rows, XIDs",
        "Memory repair state and XID events seen in the time range. Pending or failure "
        "rows need a reset or an RMA; see docs/alerts.md for the XID table.",
        "none",
        [
            Q(_m(cfg, "nvwatch_gpu_retired_pages"), instant=True, table=True),
            Q(_m(cfg, "nvwatch_gpu_remapped_rows"), instant=True, table=True),
            Q(
                # a counter is born at 1 with its first event, a step increase() cannot
                # see: series that did not exist at the start of the range count as well
                f"increase({xids}[$__range]) > 0 or ({xids} unless {xids} offset $__range)",
                instant=True,
                table=True,
            ),
        ],
        steps=t.ANY_BAD,
    )


def _nvlink(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "timeseries",
        "NVLink throughput per link",
        "Bytes per second sent on each NVLink link of each GPU. Links of one GPU should "
        "carry similar traffic in collective operations.",
        "Bps",
        [Q(rate(_m(cfg, "nvwatch_nvlink_transmit_bytes_total")), "GPU {{gpu}} link {{link}}")],
        links=[_to_nvlink_of_gpu()],
    )
    grid.add(
        "timeseries",
        "NVLink errors and links down",
        "NVLink data-link errors per second by type, and inactive links (value 1).",
        "cps",
        [
            Q(
                f"{rate(_m(cfg, 'nvwatch_nvlink_errors_total'))} > 0",
                "GPU {{gpu}} link {{link}} {{type}}",
            ),
            Q(f"{_m(cfg, 'nvwatch_nvlink_up')} == 0", "GPU {{gpu}} link {{link}} down"),
        ],
        steps=t.above(cfg.nvlink_error_rate_per_second),
        links=[_to_nvlink_of_gpu()],
    )


def _by_instance(cfg: MixinConfig, expr: str) -> str:
    """`expr` per MIG device with the instance's profile joined in from nvwatch_mig_info."""
    on = "on(gpu, gpu_instance_id, compute_instance_id)"
    return f"{expr} * {on} group_left(profile) {_m(cfg, 'nvwatch_mig_info')}"


_INSTANCE = "GPU {{gpu}} GI {{gpu_instance_id}} {{profile}}"


def _mig(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "table",
        "MIG instances",
        "MIG mode of each GPU that has MIG, and each MIG device: GPU instance, compute "
        "instance, profile and the MIG UUID jobs and pods are given. Empty on GPUs "
        "without MIG or with MIG off; `nvwatch topology` shows the memory slices.",
        "none",
        [
            Q(_m(cfg, "nvwatch_gpu_mig_mode"), instant=True, table=True),
            Q(_m(cfg, "nvwatch_mig_info"), instant=True, table=True),
        ],
        w=8,
    )
    used = _m(cfg, "nvwatch_mig_memory_used_bytes")
    total = _m(cfg, "nvwatch_mig_memory_total_bytes")
    grid.add(
        "timeseries",
        "MIG instance memory used",
        "Memory in use in each MIG instance over its own total. An instance near 1 fails "
        "to allocate however empty the rest of the GPU is: memory is carved per instance.",
        "percentunit",
        [Q(_by_instance(cfg, f"{used} / {total}"), _INSTANCE)],
        min_=0,
        max_=1,
        w=8,
    )
    grid.add(
        "timeseries",
        "MIG instance SM and DRAM activity",
        "GPM activity of each MIG instance, as a share of its own SMs and memory bandwidth "
        "(Hopper; absent on the A100). The GPU-wide utilization is not reported under MIG.",
        "percentunit",
        [
            Q(_by_instance(cfg, _m(cfg, "nvwatch_mig_sm_active_ratio")), f"{_INSTANCE} SM"),
            Q(_by_instance(cfg, _m(cfg, "nvwatch_mig_dram_active_ratio")), f"{_INSTANCE} DRAM"),
        ],
        min_=0,
        max_=1,
        w=8,
    )


def _infiniband_and_host(grid: Grid, cfg: MixinConfig) -> None:
    grid.add(
        "timeseries",
        "InfiniBand ports of the node",
        "Bytes per second sent and received by each IB port of the node.",
        "Bps",
        [
            Q(rate(_host(cfg, "nvwatch_ib_port_transmit_bytes_total")), "{{device}}/{{port}} tx"),
            Q(rate(_host(cfg, "nvwatch_ib_port_receive_bytes_total")), "{{device}}/{{port}} rx"),
        ],
        links=[DataLink(INFINIBAND, "IB ports of the node", (carry("cluster"), carry("instance")))],
    )
    grid.add(
        "timeseries",
        "Host CPU and I/O wait",
        "Host CPU utilization and I/O wait. High while GPUs idle with a job on them means "
        "the input pipeline starves the GPUs (NvwatchGpuStarved).",
        "percentunit",
        [
            Q(_host(cfg, "nvwatch_host_cpu_utilization_ratio"), "CPU"),
            Q(_host(cfg, "nvwatch_host_cpu_iowait_ratio"), "iowait"),
        ],
        steps=t.above(cfg.starvation_host_iowait, "orange"),
        min_=0,
        max_=1,
    )


# Top to bottom, as the grid lays them out.
_PANELS: tuple[PanelRow, ...] = (
    _utilization_memory_power,
    _mig,
    _temperature_and_clocks,
    _throttling,
    _pcie,
    _memory_health,
    _nvlink,
    _infiniband_and_host,
    bmc_row,
)


def node(cfg: MixinConfig) -> g.Dashboard:
    return dashboard(
        cfg,
        NODE,
        "nvwatch / Node",
        "Every GPU of one node: utilization, memory, power, MIG instances, temperature, "
        "clocks, throttling, PCIe, ECC and XIDs, NVLink links, InfiniBand ports, and the "
        "node's power, temperatures, fans and supplies from its BMC.",
        _PANELS,
        [
            variable(cfg, cfg.cluster_label, "Cluster", multi=False),
            variable(cfg, cfg.instance_label, "Node", multi=False),
            variable(cfg, "gpu", "GPU"),
        ],
        time_from="now-3h",
    )
