"""The node dashboard: every GPU of one node, its NVLink links and IB ports, its host."""

from __future__ import annotations

from grafanalib import core as g

from dashboards.builder import ANY_BAD, HIGH_BAD, Grid, Q, dashboard, variable
from mixin.config import MixinConfig

_ACTIVE = [
    {
        "type": "value",
        "options": {
            "0": {"text": "off", "color": "transparent"},
            "1": {"text": "active", "color": "red"},
        },
    }
]


def node(cfg: MixinConfig) -> g.Dashboard:
    sel = cfg.sel(
        f'{cfg.cluster_label}=~"$cluster"', f'{cfg.instance_label}=~"$instance"', 'gpu=~"$gpu"'
    )
    host = cfg.sel(f'{cfg.cluster_label}=~"$cluster"', f'{cfg.instance_label}=~"$instance"')

    def m(name: str, *matchers: str) -> str:
        return f"{name}{sel[:-1]}{''.join(', ' + x for x in matchers)}}}"

    ecc = m("nvwatch_gpu_ecc_errors_total", 'scope="volatile"')
    grid = Grid()
    grid.add(
        "timeseries",
        "GPU utilization",
        "Share of time a kernel ran, per GPU. One GPU lower than the rest in a multi-GPU "
        "job is waiting on the others or throttled.",
        "percentunit",
        [Q(m("nvwatch_gpu_utilization_ratio"), "GPU {{gpu}}")],
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
            Q(m("nvwatch_gpu_memory_used_bytes"), "GPU {{gpu}} used"),
            Q(m("nvwatch_gpu_memory_total_bytes"), "GPU {{gpu}} total"),
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
            Q(m("nvwatch_gpu_power_watts"), "GPU {{gpu}} power"),
            Q(m("nvwatch_gpu_power_limit_watts"), "GPU {{gpu}} limit"),
            Q(m("nvwatch_gpu_power_tdp_watts"), "GPU {{gpu}} TDP"),
        ],
        min_=0,
    )
    grid.add(
        "timeseries",
        "GPU and HBM temperature vs thresholds",
        "Die and HBM temperature with the GPU's own slowdown and memory_max thresholds. "
        f"Within {cfg.gpu_temp_margin_celsius:g} °C of slowdown an alert fires; above it "
        "the clocks drop.",
        "celsius",
        [
            Q(m("nvwatch_gpu_temperature_celsius"), "GPU {{gpu}} {{sensor}}"),
            Q(
                m("nvwatch_gpu_temperature_threshold_celsius", 'threshold=~"slowdown|memory_max"'),
                "GPU {{gpu}} {{threshold}}",
            ),
        ],
        steps=((None, "green"), (80, "orange"), (87, "red")),
    )
    grid.add(
        "timeseries",
        "SM and memory clocks",
        "Current SM and memory clocks per GPU. SM clock far below its maximum under load "
        "means throttling: see the reasons below.",
        "hertz",
        [Q(m("nvwatch_gpu_clock_hertz", 'clock=~"sm|memory"'), "GPU {{gpu}} {{clock}}")],
    )
    grid.add(
        "state-timeline",
        "Throttle reasons",
        "When each clock-event reason was active, per GPU. Thermal and hw_power_brake "
        "reasons are faults; sw_power_cap is a job at its power limit.",
        "none",
        [
            Q(
                m("nvwatch_gpu_clock_event_active", 'reason!~"idle|display_clocks"'),
                "GPU {{gpu}} {{reason}}",
            )
        ],
        steps=((None, "transparent"), (1, "red")),
        mappings=_ACTIVE,
    )
    grid.add(
        "timeseries",
        "Time throttled by policy",
        "Share of time each GPU's clocks were held down, by NVML violation policy.",
        "percentunit",
        [
            Q(
                f"rate({m('nvwatch_gpu_throttle_seconds_total')}[$__rate_interval])",
                "GPU {{gpu}} {{reason}}",
            )
        ],
        steps=HIGH_BAD,
        min_=0,
    )
    grid.add(
        "timeseries",
        "PCIe throughput",
        "Host<->GPU PCIe traffic per direction (NVML samples a 20 ms window).",
        "Bps",
        [
            Q(
                m("nvwatch_gpu_pcie_throughput_bytes_per_second"),
                "GPU {{gpu}} {{direction}}",
            )
        ],
    )
    grid.add(
        "timeseries",
        "PCIe replays",
        "PCIe link-level retransmissions per second; a healthy link stays at zero.",
        "cps",
        [Q(f"rate({m('nvwatch_gpu_pcie_replays_total')}[$__rate_interval])", "GPU {{gpu}}")],
        steps=((None, "green"), (cfg.pcie_replay_rate_per_second, "red")),
    )
    grid.add(
        "table",
        "PCIe link generation and width",
        "Current against maximum PCIe generation and width. Idle GPUs train down to save "
        "power; under load current should equal max.",
        "none",
        [
            Q(m("nvwatch_gpu_pcie_link_generation"), instant=True, table=True),
            Q(m("nvwatch_gpu_pcie_link_width"), instant=True, table=True),
        ],
    )
    grid.add(
        "timeseries",
        "ECC errors",
        "Corrected and uncorrected ECC errors per second (volatile counters). Any "
        "uncorrected error pages: NvwatchGpuEccUncorrectable.",
        "cps",
        [
            Q(
                f"rate({ecc}[$__rate_interval])",
                "GPU {{gpu}} {{type}}",
            )
        ],
        steps=ANY_BAD,
    )
    grid.add(
        "table",
        "Retired pages, remapped rows, XIDs",
        "Memory repair state and XID events seen in the time range. Pending or failure "
        "rows need a reset or an RMA; see docs/alerts.md for the XID table.",
        "none",
        [
            Q(m("nvwatch_gpu_retired_pages"), instant=True, table=True),
            Q(m("nvwatch_gpu_remapped_rows"), instant=True, table=True),
            Q(
                # a counter is born at 1 with its first event, a step increase() cannot
                # see: series that did not exist at the start of the range count as well
                f"increase({m('nvwatch_gpu_xid_errors_total')}[$__range]) > 0"
                f" or ({m('nvwatch_gpu_xid_errors_total')}"
                f" unless {m('nvwatch_gpu_xid_errors_total')} offset $__range)",
                instant=True,
                table=True,
            ),
        ],
        steps=ANY_BAD,
    )
    grid.add(
        "timeseries",
        "NVLink throughput per link",
        "Bytes per second sent on each NVLink link of each GPU. Links of one GPU should "
        "carry similar traffic in collective operations.",
        "Bps",
        [
            Q(
                f"rate({m('nvwatch_nvlink_transmit_bytes_total')}[$__rate_interval])",
                "GPU {{gpu}} link {{link}}",
            )
        ],
    )
    grid.add(
        "timeseries",
        "NVLink errors and links down",
        "NVLink data-link errors per second by type, and inactive links (value 1).",
        "cps",
        [
            Q(
                f"rate({m('nvwatch_nvlink_errors_total')}[$__rate_interval]) > 0",
                "GPU {{gpu}} link {{link}} {{type}}",
            ),
            Q(f"{m('nvwatch_nvlink_up')} == 0", "GPU {{gpu}} link {{link}} down"),
        ],
        steps=((None, "green"), (cfg.nvlink_error_rate_per_second, "red")),
    )
    grid.add(
        "timeseries",
        "InfiniBand ports of the node",
        "Bytes per second sent and received by each IB port of the node.",
        "Bps",
        [
            Q(
                f"rate(nvwatch_ib_port_transmit_bytes_total{host}[$__rate_interval])",
                "{{device}}/{{port}} tx",
            ),
            Q(
                f"rate(nvwatch_ib_port_receive_bytes_total{host}[$__rate_interval])",
                "{{device}}/{{port}} rx",
            ),
        ],
    )
    grid.add(
        "timeseries",
        "Host CPU and I/O wait",
        "Host CPU utilization and I/O wait. High while GPUs idle with a job on them means "
        "the input pipeline starves the GPUs (NvwatchGpuStarved).",
        "percentunit",
        [
            Q(f"nvwatch_host_cpu_utilization_ratio{host}", "CPU"),
            Q(f"nvwatch_host_cpu_iowait_ratio{host}", "iowait"),
        ],
        steps=((None, "green"), (cfg.starvation_host_iowait, "orange")),
        min_=0,
        max_=1,
    )
    return dashboard(
        cfg,
        "nvwatch-node",
        "nvwatch / Node",
        "Every GPU of one node: utilization, memory, power, temperature, clocks, throttling, "
        "PCIe, ECC and XIDs, NVLink links and InfiniBand ports.",
        grid,
        [
            variable(cfg, cfg.cluster_label, "Cluster", multi=False),
            variable(cfg, cfg.instance_label, "Node", multi=False),
            variable(cfg, "gpu", "GPU"),
        ],
        time_from="now-3h",
    )
