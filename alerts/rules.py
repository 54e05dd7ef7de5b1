"""Every nvwatch alert, defined once: expression, severity, texts and runbook.

`render.py` turns these into Prometheus rule YAML and Grafana-managed alert rules, and
`docs.py` into docs/alerts.md; the runbook sections are the anchors of `runbook_url`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from alerts.recording import (
    EXPECTED_GPUS,
    EXPECTED_IB_PORTS,
    EXPECTED_IB_RATE,
    EXPECTED_NVLINKS,
)
from mixin.config import MixinConfig


class Severity(str, Enum):
    CRITICAL = "critical"  # page: a node or GPU is broken or about to be
    WARNING = "warning"  # ticket: degraded, needs attention within the working day
    INFO = "info"  # capacity/efficiency signal for dashboards and reviews


@dataclass(frozen=True)
class Runbook:
    meaning: str
    confirm: str
    action: str


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str
    runbook: Runbook


@dataclass(frozen=True)
class AlertGroup:
    name: str
    title: str
    alerts: tuple[Alert, ...]


def _where_gpu(cfg: MixinConfig) -> str:
    return (
        "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on "
        f"{{{{ $labels.{cfg.instance_label} }}}}"
    )


def _where_node(cfg: MixinConfig) -> str:
    return (
        f"{{{{ $labels.{cfg.instance_label} }}}} in cluster {{{{ $labels.{cfg.cluster_label} }}}}"
    )


def _where_port(cfg: MixinConfig) -> str:
    return (
        "IB port {{ $labels.device }}/{{ $labels.port }} on "
        f"{{{{ $labels.{cfg.instance_label} }}}}"
    )


def _where_link(cfg: MixinConfig) -> str:
    return f"NVLink {{{{ $labels.link }}}} of {_where_gpu(cfg)}"


def thermal_power(cfg: MixinConfig) -> AlertGroup:
    s = cfg.sel
    w = cfg.rate_window
    gpu = _where_gpu(cfg)
    return AlertGroup(
        "nvwatch-thermal-power",
        "Thermal and power",
        (
            Alert(
                "NvwatchGpuTemperatureNearSlowdown",
                f"nvwatch_gpu_temperature_celsius{s('sensor=' + _q('gpu'))}\n"
                f"  > ignoring (sensor, threshold)\n"
                f"  (nvwatch_gpu_temperature_threshold_celsius{s('threshold=' + _q('slowdown'))}"
                f" - {cfg.gpu_temp_margin_celsius:g})",
                cfg.for_default,
                Severity.WARNING,
                "GPU temperature is close to its slowdown threshold.",
                f"{gpu} is at {{{{ $value }}}} °C, within {cfg.gpu_temp_margin_celsius:g} °C of "
                "the temperature where the driver slows its clocks.",
                Runbook(
                    "The die temperature is within the configured margin of the GPU's own "
                    "slowdown threshold (read from NVML per board). Above the threshold the "
                    "driver halves clocks and jobs slow down.",
                    "Node dashboard, *GPU and HBM temperature* panel: is only this GPU hot "
                    "(airflow, a failed fan in its tray, thermal paste) or every GPU in the "
                    "node or rack (inlet temperature, CDU/CRAC)? `nvidia-smi -q -d "
                    "TEMPERATURE` on the node shows the same thresholds.",
                    "Check the inlet temperature and chassis fans (IPMI/BMC) of the node; "
                    "for one hot GPU among cool neighbours, drain the node and have the "
                    "tray inspected. For a whole rack, call facilities.",
                ),
            ),
            Alert(
                "NvwatchGpuMemoryTemperatureNearMax",
                f"nvwatch_gpu_temperature_celsius{s('sensor=' + _q('memory'))}\n"
                f"  > ignoring (sensor, threshold)\n"
                f"  (nvwatch_gpu_temperature_threshold_celsius{s('threshold=' + _q('memory_max'))}"
                f" - {cfg.hbm_temp_margin_celsius:g})",
                cfg.for_default,
                Severity.WARNING,
                "GPU memory (HBM) temperature is close to its maximum.",
                f"HBM of {gpu} is at {{{{ $value }}}} °C, within "
                f"{cfg.hbm_temp_margin_celsius:g} °C of its memory_max threshold.",
                Runbook(
                    "The HBM stacks are near the highest temperature the board allows "
                    "them. Hot HBM raises the rate of ECC errors and, at the limit, "
                    "throttles memory clocks.",
                    "Node dashboard, *GPU and HBM temperature*: HBM temperature against "
                    "memory_max; look for rising ECC corrected counts on the same GPU.",
                    "Same as for the die: inlet temperature and airflow first; a "
                    "memory-bound job can drive HBM hot while the die stays cool, so "
                    "check the workload before draining.",
                ),
            ),
            Alert(
                "NvwatchGpuThermalSlowdown",
                f"nvwatch_gpu_clock_event_active"
                f"{s('reason=~' + _q('hw_thermal_slowdown|sw_thermal_slowdown'))} == 1",
                cfg.thermal_slowdown_for,
                Severity.WARNING,
                "GPU clocks are held down by thermal slowdown.",
                f"{gpu} has had {{{{ $labels.reason }}}} active for more than "
                f"{cfg.thermal_slowdown_for}; its clocks are reduced.",
                Runbook(
                    "The driver (sw_thermal_slowdown) or the board itself "
                    "(hw_thermal_slowdown) is lowering clocks because the GPU is too hot. "
                    "Every kernel on that GPU runs slower, and in a multi-GPU job the "
                    "slowest GPU sets the pace of all of them.",
                    "Node dashboard, *Throttle reasons* state timeline and *SM clock*: "
                    "clocks below max while the reason is active. `nvidia-smi -q -d "
                    "PERFORMANCE` lists the active clock event reasons.",
                    "Treat as a cooling fault: check inlet air, fans/CDU, then the GPU's "
                    "neighbours. A GPU that slows down alone while its neighbours are "
                    "cool needs a hardware ticket.",
                ),
            ),
            Alert(
                "NvwatchGpuTemperatureRisingFast",
                # A job starting on a cold GPU warms it by 10+ °C a minute: normal. Only a
                # fast rise that is already near slowdown is worth telling anyone about.
                f"deriv(nvwatch_gpu_temperature_celsius{s('sensor=' + _q('gpu'))}[{w}]) * 60"
                f" > {cfg.temp_rise_celsius_per_minute:g}\n"
                "and ignoring(sensor)\n"
                f"(nvwatch_gpu_temperature_threshold_celsius{s('threshold=' + _q('slowdown'))}"
                "\n  - ignoring(threshold, sensor)\n"
                f"  nvwatch_gpu_temperature_celsius{s('sensor=' + _q('gpu'))})"
                f" < {cfg.temp_rise_headroom_celsius:g}",
                cfg.for_fast,
                Severity.INFO,
                "GPU temperature is rising fast.",
                f"{gpu} warms by {{{{ $value | humanize }}}} °C per minute.",
                Runbook(
                    "The die temperature climbs faster than the configured rate, averaged "
                    f"over {w}, while already within {cfg.temp_rise_headroom_celsius:g} °C "
                    "of its slowdown threshold. A cold GPU warming up at a job's start "
                    "does not fire; a hot one still climbing means cooling is losing "
                    "ground and slowdown is minutes away.",
                    "Thermal & power dashboard: do neighbouring GPUs and nodes rise "
                    "together (facility) or only this one (local airflow)?",
                    "Watch for NvwatchGpuTemperatureNearSlowdown next; if several nodes "
                    "rise at once, alert facilities before they reach slowdown.",
                ),
            ),
            Alert(
                "NvwatchGpuPowerCapped",
                f"nvwatch_gpu_clock_event_active{s('reason=' + _q('sw_power_cap'))} == 1",
                cfg.power_cap_for,
                Severity.WARNING,
                "GPU has been pinned at its power cap for a long time.",
                f"{gpu} has held its clocks down at the software power cap for more than "
                f"{cfg.power_cap_for}.",
                Runbook(
                    "The GPU draws as much power as its enforced limit allows and the "
                    "driver lowers clocks to stay under it. At TDP this is normal for "
                    "dense jobs; below TDP someone lowered the limit.",
                    "Node dashboard, *Power vs limit vs TDP*: is the enforced limit below "
                    "the TDP (`nvidia-smi -q -d POWER`, `Requested/Enforced Power "
                    "Limit`)?",
                    "If the limit is below TDP and that was not planned, restore it "
                    "(`nvidia-smi -pl`). At TDP, it is a capacity signal for the review, "
                    "not a fault.",
                ),
            ),
            Alert(
                "NvwatchGpuHwPowerBrake",
                f"nvwatch_gpu_clock_event_active{s('reason=' + _q('hw_power_brake'))} == 1",
                cfg.hw_power_brake_for,
                Severity.CRITICAL,
                "GPU hardware power brake is engaged.",
                f"{gpu} has been slowed by the external power brake signal for more than "
                f"{cfg.hw_power_brake_for}.",
                Runbook(
                    "The board's power brake input is asserted: the chassis or power "
                    "supply told the GPU to drop to minimum clocks, usually because a PSU "
                    "failed or the node exceeds what its supplies can deliver.",
                    "Are all GPUs of the node braked at once (chassis) or one (board)? "
                    "Check PSU status in the BMC (`ipmitool sdr type 'Power Supply'`).",
                    "Drain the node and replace the failed PSU; a brake on a single GPU "
                    "with healthy PSUs is a hardware ticket for the board.",
                ),
            ),
            Alert(
                "NvwatchNodePowerNearBudget",
                # NVML power is an instantaneous sample that swings between the compute
                # and communication phases of every training step: judge the average.
                f"avg_over_time(instance:nvwatch_gpu_power_watts:sum[{w}])\n"
                "  / instance:nvwatch_gpu_power_tdp_watts:sum\n"
                f"  > {cfg.node_power_budget_fraction:g}",
                cfg.for_default,
                Severity.WARNING,
                "Node GPU power is close to the node's GPU power budget.",
                f"{_where_node(cfg)} draws {{{{ $value | humanizePercentage }}}} of the "
                "summed TDP of its GPUs.",
                Runbook(
                    "The GPUs of the node together draw, on average over "
                    f"{w}, more than the configured fraction of their summed TDP. "
                    "nvwatch only sees GPU board power; the node's "
                    "budget for rack planning is approximated by the sum of its GPUs' "
                    "TDP.",
                    "Thermal & power dashboard, *Power headroom per node* and *per rack*: "
                    "is the rack near its PDU limit?",
                    "Nothing is broken; if several nodes of a rack are here, tell the "
                    "capacity owner before the PDU trips, or lower power limits.",
                ),
            ),
        ),
    )


def _q(value: str) -> str:
    return '"' + value + '"'


def fabric(cfg: MixinConfig) -> AlertGroup:
    s = cfg.sel
    ib = cfg.ib_sel
    w = cfg.rate_window
    nc = cfg.node_class_label
    node = f"{cfg.cluster_label}, {cfg.instance_label}, {nc}"
    gpu = _where_gpu(cfg)
    port = _where_port(cfg)
    link = _where_link(cfg)
    return AlertGroup(
        "nvwatch-fabric",
        "Bottlenecks: NVLink, InfiniBand, PCIe, starvation",
        (
            Alert(
                "NvwatchNvlinkDown",
                f"nvwatch_nvlink_up{s()} == 0",
                cfg.for_fast,
                Severity.WARNING,
                "NVLink link is down.",
                f"{link} is not active.",
                Runbook(
                    "NVML reports the link inactive. Traffic between the GPUs it joined "
                    "now takes fewer links, NVSwitch detours or PCIe, and collective "
                    "operations slow down for the whole job.",
                    "NVLink fabric dashboard, *Links down*; on the node `nvidia-smi "
                    "nvlink -s` shows the link inactive, `nvidia-smi nvlink -e` its error "
                    "counters; look for XID 74 on the GPU.",
                    "Drain the node and reset the GPUs (`nvidia-smi -r`) or reboot; a link "
                    "that stays down after a reset needs a hardware ticket "
                    "(baseboard/NVSwitch).",
                ),
            ),
            Alert(
                "NvwatchNvlinkLinksMissing",
                f"sum by ({node}, gpu, uuid) (nvwatch_nvlink_up{s()})\n"
                f"  < on ({nc}) group_left () {EXPECTED_NVLINKS}",
                cfg.for_fast,
                Severity.WARNING,
                "GPU has fewer active NVLink links than its node class expects.",
                f"{gpu} has {{{{ $value }}}} active NVLink links, fewer than a "
                f"{{{{ $labels.{nc} }}}} GPU should have.",
                Runbook(
                    "The count of active links of the GPU is below the expectation of its "
                    "node class (mixin config `node_classes`). Covers links that vanished "
                    "from NVML entirely, which NvwatchNvlinkDown cannot see.",
                    "NVLink fabric dashboard, *Active links per GPU*; `nvidia-smi nvlink "
                    "-s` on the node; check the node's `node_class` target label is right.",
                    "As for NvwatchNvlinkDown: drain, reset, then hardware ticket.",
                ),
            ),
            Alert(
                "NvwatchNvlinkErrors",
                f"rate(nvwatch_nvlink_errors_total{s()}[{w}])"
                f" > {cfg.nvlink_error_rate_per_second:g}",
                cfg.for_default,
                Severity.WARNING,
                "NVLink link is logging data-link errors.",
                f"{link} logs {{{{ $value | humanize }}}} {{{{ $labels.type }}}} errors per "
                "second.",
                Runbook(
                    "CRC errors make the link replay flits; replays and recoveries cost "
                    "bandwidth and latency; a steady rate predicts the link going down.",
                    "NVLink fabric dashboard, *Error rates by type*: one link (cable, "
                    "connector) or all links of a GPU (the GPU) or of a switch?",
                    "Note the GPU/link in the hardware log; if the rate keeps rising or "
                    "XID 74 appears, drain the node for an NVLink/baseboard check.",
                ),
            ),
            Alert(
                "NvwatchIbPortDown",
                f"(nvwatch_ib_port_state{ib()} != bool 4)\n"
                f"  + (nvwatch_ib_port_physical_state{ib()} != bool 5)\n  > 0",
                cfg.for_fast,
                Severity.CRITICAL,
                "InfiniBand port is not active.",
                f"{port} is not ACTIVE/LinkUp ({{{{ $value }}}} of logical and physical "
                "state wrong).",
                Runbook(
                    "The port's logical state is not ACTIVE (4) or its physical state is "
                    "not LinkUp (5). A down port removes that rail from the fabric; GPUs "
                    "nearest to it (see `nearest_gpus`) lose their GPUDirect path.",
                    "InfiniBand fabric dashboard, *Link state*; on the node `ibstat "
                    "<device>` shows State and Physical state; INIT/ARMED with LinkUp "
                    "means the subnet manager has not configured the port.",
                    "Physical state not LinkUp: reseat or replace the cable/transceiver, "
                    "check the switch port. LinkUp but not ACTIVE: check the subnet "
                    "manager (`sminfo`). Uncabled ports belong in `ib_port_selector`.",
                ),
            ),
            Alert(
                "NvwatchIbPortsMissing",
                f"count by ({node}) (nvwatch_ib_port_state{ib()})\n"
                f"  < on ({nc}) group_left () {EXPECTED_IB_PORTS}",
                cfg.for_fast,
                Severity.WARNING,
                "Node has fewer InfiniBand ports than its node class expects.",
                f"{_where_node(cfg)} shows {{{{ $value }}}} RDMA ports, fewer than a "
                f"{{{{ $labels.{nc} }}}} node should have.",
                Runbook(
                    "Fewer ports appear under /sys/class/infiniband than the node class "
                    "expects: an HCA is not enumerated (PCIe, firmware) or its driver did "
                    "not load.",
                    "`ibv_devinfo -l` and `lspci | grep Mellanox` on the node; `dmesg` "
                    "for mlx5_core errors.",
                    "Reload mlx5_core or reboot; an HCA missing from lspci needs a "
                    "hardware ticket.",
                ),
            ),
            Alert(
                "NvwatchIbPortRateDegraded",
                f"(nvwatch_ib_port_rate_bytes_per_second{ib()}\n"
                f"  < on ({nc}) group_left () {EXPECTED_IB_RATE})\n"
                f"and nvwatch_ib_port_state{ib()} == 4",
                cfg.for_default,
                Severity.WARNING,
                "InfiniBand port runs below the rate its node class expects.",
                f"{port} is ACTIVE at {{{{ $value | humanize }}}}B/s, below the expected "
                f"rate for {{{{ $labels.{nc} }}}}.",
                Runbook(
                    "The port trained to a lower speed or fewer lanes than the fabric's "
                    "nominal rate (e.g. HDR port at EDR, or 4X at 1X).",
                    "InfiniBand fabric dashboard, *Rate per port*; `ibstat` shows Rate; "
                    "`iblinkinfo` shows the peer switch port's width and speed.",
                    "Reseat/replace the cable or transceiver; check the switch port's "
                    "configuration.",
                ),
            ),
            Alert(
                "NvwatchIbPortErrors",
                f"rate(nvwatch_ib_port_errors_total{ib('type!=' + _q('link_downed'))}[{w}])"
                f" > {cfg.ib_error_rate_per_second:g}",
                cfg.for_default,
                Severity.WARNING,
                "InfiniBand port is logging errors.",
                f"{port} logs {{{{ $value | humanize }}}} {{{{ $labels.type }}}} errors per "
                "second.",
                Runbook(
                    "Symbol errors and link error recoveries point at the physical link "
                    "(cable, transceiver, dirty connector); receive/discard errors at "
                    "congestion or a misbehaving peer.",
                    "InfiniBand fabric dashboard, *Errors by type*; `perfquery -x` on the "
                    "port; compare with the switch side (`ibqueryerrors`).",
                    "Physical error types: clean/replace the cable. Discards: look at "
                    "congestion (NvwatchIbPortCongested) and the subnet's routing.",
                ),
            ),
            Alert(
                "NvwatchIbLinkDowned",
                f"increase(nvwatch_ib_port_errors_total{ib('type=' + _q('link_downed'))}[{w}]) > 0",
                "0s",
                Severity.WARNING,
                "InfiniBand link went down and came back.",
                f"{port} lost its link {{{{ $value | humanize }}}} times in the last {w}.",
                Runbook(
                    "link_downed counts how often the port failed its link recovery and "
                    "went down. Each event kills in-flight RDMA traffic; jobs using it may "
                    "have crashed or retried.",
                    "InfiniBand fabric dashboard, *Errors by type* (link_downed) and "
                    "*Link state*; the switch log for the same port.",
                    "A single flap: note it. Repeated flaps: replace the cable or transceiver.",
                ),
            ),
            Alert(
                "NvwatchIbPortCongested",
                f"rate(nvwatch_ib_port_transmit_wait_total{ib()}[{w}])"
                f" * {cfg.ib_transmit_wait_tick_seconds:g} > {cfg.ib_transmit_wait_ratio:g}",
                # short on purpose: the legacy 32-bit port_xmit_wait holds only ~17 s of
                # waiting at ~4 ns ticks, so a congested port saturates within minutes and
                # its rate falls to 0; a long `for:` would never see it
                cfg.for_fast,
                Severity.INFO,
                "InfiniBand port spends much of its time waiting for credits.",
                f"{port} waited for credits about {{{{ $value | humanizePercentage }}}} of "
                "the time.",
                Runbook(
                    "port_xmit_wait counts ticks in which the port had data but no credits "
                    "from its peer. The ratio is an approximation: the tick length is "
                    "device-specific, and the mixin config's "
                    "`ib_transmit_wait_tick_seconds` converts ticks to seconds. The "
                    "counter is the legacy 32-bit one: under congestion it saturates "
                    "within minutes (`nvwatch_ib_port_reading_saturated` shows it) and "
                    "this alert resolves although nothing improved; reset the port "
                    "counters to measure again.",
                    "InfiniBand fabric dashboard, *Transmit wait ratio*: one port "
                    "(slow receiver) or many ports towards the same switch (fabric "
                    "hot spot)?",
                    "Congestion is a capacity or routing problem: check the job placement "
                    "and the fat-tree's adaptive routing; no hardware action.",
                ),
            ),
            Alert(
                "NvwatchIbCounterSaturated",
                # port_xmit_wait is left out: at ~4 ns ticks it fills up on healthy ports
                # too within hours, and congestion has its own alert
                f"nvwatch_ib_port_reading_saturated{ib('counter!=' + _q('port_xmit_wait'))} == 1",
                cfg.for_default,
                Severity.WARNING,
                "InfiniBand error counter is pinned at its maximum and no longer counts.",
                f"Counter {{{{ $labels.counter }}}} of {port} has reached its maximum; its "
                "rate now reads 0 whatever happens on the link.",
                Runbook(
                    "IB error counters are narrow (4 to 16 bits) and stop at their "
                    "maximum instead of wrapping. A saturated error counter means the "
                    "link logged at least that many errors, and from now on the error "
                    "alerts for this port are blind.",
                    "InfiniBand fabric dashboard, *Saturated counters*; on the node, "
                    "`perfquery -x <lid> <port>` shows the same values.",
                    "Read the counters, then reset them (`perfquery -x -R -C <device> "
                    "-P <port>`) so errors are measured again; if they climb back "
                    "quickly, treat it like NvwatchIbPortErrors.",
                ),
            ),
            Alert(
                "NvwatchGpuPcieLinkDegraded",
                "(\n"
                f"    (nvwatch_gpu_pcie_link_generation{s('kind=' + _q('current'))}"
                f" < bool ignoring (kind)"
                f" nvwatch_gpu_pcie_link_generation{s('kind=' + _q('max'))})\n"
                f"  + (nvwatch_gpu_pcie_link_width{s('kind=' + _q('current'))}"
                f" < bool ignoring (kind)"
                f" nvwatch_gpu_pcie_link_width{s('kind=' + _q('max'))})\n"
                ") > 0\n"
                f"and ignoring (kind) nvwatch_gpu_utilization_ratio{s()}"
                f" > {cfg.pcie_busy_utilization:g}",
                cfg.for_default,
                Severity.WARNING,
                "Busy GPU runs its PCIe link below maximum generation or width.",
                f"{gpu} is busy but its PCIe link runs below its maximum "
                "({{ $value }} of generation and width degraded).",
                Runbook(
                    "Idle GPUs train PCIe down to save power; a busy GPU whose link stays "
                    "below its maximum generation or width has a bad slot, riser or "
                    "retimer and host<->GPU copies are slower.",
                    "Node dashboard, *PCIe throughput and replays*; `nvidia-smi -q -d "
                    "PCIE` (Link Gen/Width current vs max) or `lspci -vv` LnkSta vs LnkCap "
                    "while the GPU is loaded.",
                    "Reboot to retrain; persistent: hardware ticket for the slot/riser.",
                ),
            ),
            Alert(
                "NvwatchGpuPcieReplays",
                f"rate(nvwatch_gpu_pcie_replays_total{s()}[{w}])"
                f" > {cfg.pcie_replay_rate_per_second:g}",
                cfg.for_default,
                Severity.WARNING,
                "GPU PCIe link is replaying packets.",
                f"{gpu} replays {{{{ $value | humanize }}}} PCIe packets per second.",
                Runbook(
                    "PCIe replays are link-level retransmissions after CRC errors; a "
                    "healthy link almost never replays.",
                    "Node dashboard, *PCIe throughput and replays*; `nvidia-smi -q -d "
                    "PCIE` (Replays); AER messages in `dmesg`.",
                    "Reseat the GPU/riser at the next maintenance; with XID 79 (fallen "
                    "off the bus) drain now.",
                ),
            ),
            Alert(
                "NvwatchGpuStarved",
                f"nvwatch_gpu_utilization_ratio{s()} < {cfg.starvation_utilization:g}\n"
                f"and (nvwatch_gpu_memory_used_bytes{s()} / nvwatch_gpu_memory_total_bytes{s()})"
                f" > {cfg.starvation_memory_used_ratio:g}\n"
                f"and on ({cfg.cluster_label}, {cfg.instance_label})\n"
                f"  (\n"
                f"    nvwatch_host_cpu_iowait_ratio{s()} > {cfg.starvation_host_iowait:g}\n"
                f"    or nvwatch_host_cpu_utilization_ratio{s()}"
                f" > {cfg.starvation_host_cpu:g}\n"
                f"  )",
                cfg.for_slow,
                Severity.INFO,
                "GPU holds a job but is starved by its host.",
                f"{gpu} is only {{{{ $value | humanizePercentage }}}} busy while a process "
                "holds its memory and the host is busy with I/O wait or CPU.",
                Runbook(
                    "A job has memory on the GPU but keeps it mostly idle while the host "
                    "waits on I/O or has no CPU left: the input pipeline (data loading, "
                    "storage, preprocessing), not the GPU, limits the job.",
                    "Node dashboard: GPU utilization against host iowait/CPU; "
                    "`nvwatch_gpu_process_memory_bytes` names the process and user.",
                    "Tell the job's owner (more data-loader workers, local cache, "
                    "faster storage); nothing is broken on the node.",
                ),
            ),
        ),
    )


def health(cfg: MixinConfig) -> AlertGroup:
    s = cfg.sel
    w = cfg.rate_window
    nc = cfg.node_class_label
    node = f"{cfg.cluster_label}, {cfg.instance_label}, {nc}"
    gpu = _where_gpu(cfg)
    xids = s("xid=~" + _q("|".join(cfg.critical_xids)))
    return AlertGroup(
        "nvwatch-health",
        "Health: XID, ECC, GPUs and the agent",
        (
            Alert(
                "NvwatchGpuXidCritical",
                f"increase(nvwatch_gpu_xid_errors_total{xids}[{w}]) > 0\n"
                # the counter is born at 1 with the first event; increase() cannot see
                # that step, so a series that did not exist one window ago counts too
                f"or (nvwatch_gpu_xid_errors_total{xids}"
                f" unless nvwatch_gpu_xid_errors_total{xids} offset {w})",
                "0s",
                Severity.CRITICAL,
                "GPU reported a critical XID error.",
                f"{gpu} reported XID {{{{ $labels.xid }}}} ({{{{ $value | humanize }}}} "
                f"events in {w}).",
                Runbook(
                    "The driver logged an XID that means a hardware or driver fault (see "
                    "the table below): ECC, NVLink, the GPU falling off the bus, GSP. The "
                    "job on that GPU has most likely crashed.",
                    "`dmesg | grep -i xid` on the node shows the event and its details; "
                    "node dashboard, *XID events*.",
                    "Drain the node; follow the XID table: reset the GPU for 48/63/94, "
                    "reboot for 79/119/120, hardware ticket if it repeats or for 64/95.",
                ),
            ),
            Alert(
                "NvwatchGpuEccUncorrectable",
                f"increase(nvwatch_gpu_ecc_errors_total"
                f"{s('type=' + _q('uncorrected'), 'scope=' + _q('volatile'))}[{w}]) > 0",
                "0s",
                Severity.CRITICAL,
                "GPU had uncorrectable ECC errors.",
                f"{gpu} had {{{{ $value | humanize }}}} uncorrectable ECC errors in {w}.",
                Runbook(
                    "A double-bit (uncorrectable) ECC error corrupted data in GPU memory; "
                    "the job on the GPU received an error or wrong data.",
                    "`nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`; node dashboard, "
                    "*ECC errors*.",
                    "Drain the node and reset the GPU so the bad page is retired or the "
                    "row remapped; RMA if it recurs or remapping fails.",
                ),
            ),
            Alert(
                "NvwatchGpuMemoryRepairPending",
                f"nvwatch_gpu_retired_pages_pending{s()} == 1\n"
                f"or nvwatch_gpu_remapped_rows{s('kind=' + _q('pending'))} == 1",
                cfg.for_default,
                Severity.WARNING,
                "GPU has a page retirement or row remap pending a reset.",
                f"{gpu} has a memory page retirement or row remap waiting for the next GPU reset.",
                Runbook(
                    "The driver marked memory for retirement (pre-Ampere) or row "
                    "remapping (Ampere+) but applies it only on the next GPU reset; until "
                    "then the bad memory can still be used.",
                    "`nvidia-smi -q -d PAGE_RETIREMENT,ROW_REMAPPER` shows Pending: Yes.",
                    "Drain the node and reset the GPU (`nvidia-smi -r`) or reboot.",
                ),
            ),
            Alert(
                "NvwatchGpuRowRemapFailure",
                f"nvwatch_gpu_remapped_rows{s('kind=' + _q('failure'))} == 1",
                "0s",
                Severity.CRITICAL,
                "GPU failed to remap a memory row.",
                f"{gpu} ran out of spare rows or failed a row remap.",
                Runbook(
                    "The HBM row remapper could not remap a failing row (no spare rows "
                    "left in the bank). The GPU can no longer hide its bad memory.",
                    "`nvidia-smi -q -d ROW_REMAPPER` shows Remapping Failure Occurred: "
                    "Yes; XID 64 in `dmesg`.",
                    "Take the GPU out of service and open an RMA.",
                ),
            ),
            Alert(
                "NvwatchGpuDown",
                f"nvwatch_gpu_up{s()} == 0",
                cfg.for_fast,
                Severity.CRITICAL,
                "GPU stopped answering NVML.",
                f"{gpu} does not answer NVML.",
                Runbook(
                    "The agent knew the GPU but NVML now reports it lost or failing (GPU "
                    "is lost, fallen off the bus). Its other series are gone.",
                    "`nvidia-smi` on the node; `dmesg` for XID 79 or PCIe AER errors.",
                    "Drain the node and reboot; a GPU that stays lost needs a hardware ticket.",
                ),
            ),
            Alert(
                "NvwatchGpuMissing",
                f"sum by ({node}) (nvwatch_gpu_up{s()})\n"
                f"  < on ({nc}) group_left () {EXPECTED_GPUS}",
                cfg.for_fast,
                Severity.CRITICAL,
                "Node has fewer working GPUs than its node class expects.",
                f"{_where_node(cfg)} has {{{{ $value }}}} working GPUs, fewer than a "
                f"{{{{ $labels.{nc} }}}} node should have.",
                Runbook(
                    "The node's count of GPUs answering NVML is below its node class "
                    "(mixin config `node_classes`). A GPU that was never enumerated after "
                    "a reboot is only visible this way.",
                    "`nvidia-smi -L` and `lspci | grep -i nvidia` on the node; cluster "
                    "overview, *GPUs up / expected*.",
                    "Drain the node and reboot; a GPU missing from lspci needs a hardware "
                    "ticket. Check the node's `node_class` label if the count is right.",
                ),
            ),
            Alert(
                "NvwatchAgentDown",
                f"up{s()} == 0",
                cfg.for_fast,
                Severity.CRITICAL,
                "The nvwatch agent cannot be scraped.",
                f"Prometheus cannot scrape the nvwatch agent on {_where_node(cfg)}.",
                Runbook(
                    "Prometheus' scrape of the agent fails: the node is down, the agent "
                    "is not running, or the network/TLS/auth between them is broken. No "
                    "GPU alert can fire for this node meanwhile.",
                    "Prometheus' *Targets* page shows the scrape error; `systemctl status "
                    "nvwatch` and `curl -s localhost:9477/healthz` on the node.",
                    "Restart the agent; if the node is down, handle it as a node outage.",
                ),
            ),
            Alert(
                "NvwatchAgentStale",
                f"time() - nvwatch_agent_last_poll_timestamp_seconds{s()}"
                f" > {cfg.agent_stale_seconds:g}",
                cfg.for_fast,
                Severity.WARNING,
                "The nvwatch agent serves stale data.",
                f"The agent on {_where_node(cfg)} last completed a poll "
                "{{ $value | humanizeDuration }} ago.",
                Runbook(
                    "The agent still answers /metrics from its cache but its poll loop "
                    "stopped: a source call (usually NVML on a wedged GPU) hangs.",
                    "`curl -s localhost:9477/healthz`; `nvidia-smi` hanging on the node "
                    "confirms a stuck driver.",
                    "Restart the agent; if NVML itself hangs, drain and reboot the node.",
                ),
            ),
            Alert(
                "NvwatchAgentSourceDown",
                f"nvwatch_agent_source_up{s()} == 0",
                cfg.for_default,
                Severity.WARNING,
                "An nvwatch source is failing.",
                f"Source {{{{ $labels.source }}}} of the agent on {_where_node(cfg)} fails "
                "its polls.",
                Runbook(
                    "One of the agent's sources (nvml, infiniband, host) fails or times "
                    "out; its metrics are missing while the others still arrive.",
                    "`nvwatch doctor` on the node says what is missing and why; "
                    "`nvwatch_agent_source_errors_total` counts the failures.",
                    "nvml: driver/library mismatch after an upgrade (reboot). infiniband: "
                    "sysfs not readable (permissions, container mounts). host: psutil.",
                ),
            ),
        ),
    )


def alert_groups(cfg: MixinConfig) -> tuple[AlertGroup, ...]:
    return (thermal_power(cfg), fabric(cfg), health(cfg))


def all_alerts(cfg: MixinConfig) -> tuple[Alert, ...]:
    return tuple(a for g in alert_groups(cfg) for a in g.alerts)
