"""The bottleneck group: NVLink links, InfiniBand ports, PCIe links and starved GPUs."""

from __future__ import annotations

from collections.abc import Callable

from nvwatch.alerts.recording import (
    EXPECTED_IB_PORTS,
    EXPECTED_IB_RATE,
    EXPECTED_NVLINKS,
    LINKS_WITH_ERRORS,
)
from nvwatch.alerts.rules.base import (
    Alert,
    AlertGroup,
    Kind,
    Runbook,
    Severity,
    count_or_zero,
    new_events,
    node_labels_with_class,
    q,
    where_gpu,
    where_link,
    where_node,
    where_port,
)
from nvwatch.mixin.config import MixinConfig

# --- NVLink -----------------------------------------------------------------------


def nvlink_down(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchNvlinkDown",
        f"nvwatch_nvlink_up{cfg.sel()} == 0",
        cfg.for_fast,
        Severity.WARNING,
        "NVLink link is down.",
        f"{where_link(cfg)} is not active.",
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
            "Repaired means NVML reports the link active again (after the reset or "
            "reboot): `nvwatch_nvlink_up` 1, and the alert resolves at the next "
            "evaluation. It holds across agent and Prometheus restarts, since the agent "
            "reports a down link as 0 from its first poll.",
        ),
        Kind.CONDITION,
    )


def nvlink_links_missing(cfg: MixinConfig) -> Alert:
    nc = cfg.node_class_label
    by = f"{node_labels_with_class(cfg)}, gpu, uuid"
    active = count_or_zero(
        by, f"sum by ({by}) (nvwatch_nvlink_up{cfg.sel()})", f"nvwatch_gpu_up{cfg.sel()} == 1"
    )
    return Alert(
        "NvwatchNvlinkLinksMissing",
        f"{active}\n< on ({nc}) group_left () {EXPECTED_NVLINKS}",
        cfg.for_fast,
        Severity.WARNING,
        "GPU has fewer active NVLink links than its node class expects.",
        f"{where_gpu(cfg)} has {{{{ $value }}}} active NVLink links, fewer than a "
        f"{{{{ $labels.{nc} }}}} GPU should have.",
        Runbook(
            "The count of active links of a working GPU is below the expectation of "
            "its node class (mixin config `node_classes`). Covers links that vanished "
            "from NVML, down to all of them, which NvwatchNvlinkDown cannot see.",
            "NVLink fabric dashboard, *Active links per GPU*; `nvidia-smi nvlink "
            "-s` on the node; check the node's `node_class` target label is right.",
            "As for NvwatchNvlinkDown: drain, reset, then hardware ticket.",
            "Repaired means the GPU again has as many active links as its class "
            "expects; the alert resolves at the next evaluation. A GPU that stops "
            "answering NVML leaves this alert to NvwatchGpuDown.",
        ),
        Kind.CONDITION,
    )


def nvlink_errors(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchNvlinkErrors",
        # the links' rates recorded once (only links with errors), not computed again
        f"{LINKS_WITH_ERRORS} > {cfg.nvlink_error_rate_per_second:g}",
        cfg.for_default,
        Severity.WARNING,
        "NVLink link is logging data-link errors.",
        f"{where_link(cfg)} logs {{{{ $value | humanize }}}} {{{{ $labels.type }}}} errors "
        "per second.",
        Runbook(
            "CRC errors make the link replay flits; replays and recoveries cost "
            "bandwidth and latency; a steady rate predicts the link going down.",
            "NVLink fabric dashboard, *Error rates by type*: one link (cable, "
            "connector) or all links of a GPU (the GPU) or of a switch?",
            "Note the GPU/link in the hardware log; if the rate keeps rising or "
            "XID 74 appears, drain the node for an NVLink/baseboard check.",
            f"An error rate: it resolves once the rate over the last {cfg.rate_window} "
            "falls below the threshold, at most that long after the errors stop. "
            "`rate()` reads a counter reset (driver reload) as a restart from 0, and a "
            "count already high at the first scrape is no error rate.",
        ),
        Kind.EVENT,
    )


# --- InfiniBand -------------------------------------------------------------------


def ib_port_down(cfg: MixinConfig) -> Alert:
    ib = cfg.ib_sel()
    return Alert(
        "NvwatchIbPortDown",
        f"(nvwatch_ib_port_state{ib} != bool 4)\n"
        f"  + (nvwatch_ib_port_physical_state{ib} != bool 5)\n  > 0",
        cfg.for_fast,
        Severity.CRITICAL,
        "InfiniBand port is not active.",
        f"{where_port(cfg)} is not ACTIVE/LinkUp ({{{{ $value }}}} of logical and physical "
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
            "Repaired means the port is ACTIVE and LinkUp again (`ibstat`); the alert "
            "resolves at the next evaluation. A port that is down at the first scrape, "
            "or after an agent restart, fires the same way.",
        ),
        Kind.CONDITION,
    )


def ib_ports_missing(cfg: MixinConfig) -> Alert:
    nc = cfg.node_class_label
    by = node_labels_with_class(cfg)
    ports = count_or_zero(
        by, f"count by ({by}) (nvwatch_ib_port_state{cfg.ib_sel()})", f"up{cfg.sel()} == 1"
    )
    return Alert(
        "NvwatchIbPortsMissing",
        f"{ports}\n< on ({nc}) group_left () {EXPECTED_IB_PORTS}",
        cfg.for_fast,
        # as critical as a port that is down: a missing port removes its rail too
        Severity.CRITICAL,
        "Node has fewer InfiniBand ports than its node class expects.",
        f"{where_node(cfg)} shows {{{{ $value }}}} RDMA ports, fewer than a "
        f"{{{{ $labels.{nc} }}}} node should have.",
        Runbook(
            "Fewer ports appear under /sys/class/infiniband than the node class "
            "expects: an HCA is not enumerated (PCIe, firmware), its driver did not "
            "load, or the HCAs vanished (0 ports; NvwatchAgentSourceDown for "
            "`infiniband` then says why). A node without HCAs belongs in a class "
            "with `ib_ports: 0`, where nothing is expected and nothing fires.",
            "`ibv_devinfo -l` and `lspci | grep Mellanox` on the node; `dmesg` "
            "for mlx5_core errors; `nvwatch doctor`.",
            "Reload mlx5_core or reboot; an HCA missing from lspci needs a hardware ticket.",
            "Repaired means the node again shows as many ports as its class expects; "
            "the alert resolves at the next evaluation. It holds across agent "
            "restarts (a restarted agent that finds no HCA reports the source absent, "
            "and the class still expects the ports).",
        ),
        Kind.CONDITION,
    )


def ib_port_rate_degraded(cfg: MixinConfig) -> Alert:
    ib = cfg.ib_sel()
    nc = cfg.node_class_label
    return Alert(
        "NvwatchIbPortRateDegraded",
        f"(nvwatch_ib_port_rate_bytes_per_second{ib}\n"
        f"  < on ({nc}) group_left () {EXPECTED_IB_RATE})\n"
        f"and nvwatch_ib_port_state{ib} == 4",
        cfg.for_default,
        Severity.WARNING,
        "InfiniBand port runs below the rate its node class expects.",
        f"{where_port(cfg)} is ACTIVE at {{{{ $value | humanize }}}}B/s, below the expected "
        f"rate for {{{{ $labels.{nc} }}}}.",
        Runbook(
            "The port trained to a lower speed or fewer lanes than the fabric's "
            "nominal rate (e.g. HDR port at EDR, or 4X at 1X).",
            "InfiniBand fabric dashboard, *Rate per port*; `ibstat` shows Rate; "
            "`iblinkinfo` shows the peer switch port's width and speed.",
            "Reseat/replace the cable or transceiver; check the switch port's configuration.",
            "Repaired means the port trained back to at least its class's rate "
            "(`ibstat` Rate); the alert resolves at the next evaluation.",
        ),
        Kind.CONDITION,
    )


def ib_port_errors(cfg: MixinConfig) -> Alert:
    errors = cfg.ib_sel("type!=" + q("link_downed"))
    return Alert(
        "NvwatchIbPortErrors",
        f"rate(nvwatch_ib_port_errors_total{errors}[{cfg.rate_window}])"
        f" > {cfg.ib_error_rate_per_second:g}",
        cfg.for_default,
        Severity.WARNING,
        "InfiniBand port is logging errors.",
        f"{where_port(cfg)} logs {{{{ $value | humanize }}}} {{{{ $labels.type }}}} errors "
        "per second.",
        Runbook(
            "Symbol errors and link error recoveries point at the physical link "
            "(cable, transceiver, dirty connector); receive/discard errors at "
            "congestion or a misbehaving peer.",
            "InfiniBand fabric dashboard, *Errors by type*; `perfquery -x` on the "
            "port; compare with the switch side (`ibqueryerrors`).",
            "Physical error types: clean/replace the cable. Discards: look at "
            "congestion (NvwatchIbPortCongested) and the subnet's routing.",
            f"An error rate: it resolves once the rate over the last {cfg.rate_window} "
            "falls below the threshold, at most that long after the errors stop. The "
            "counters are the HCA's own: an agent restart does not reset them, a "
            "`perfquery -R` reset reads as a restart from 0.",
        ),
        Kind.EVENT,
    )


def ib_link_downed(cfg: MixinConfig) -> Alert:
    w = cfg.rate_window
    downed = f"nvwatch_ib_port_errors_total{cfg.ib_sel('type=' + q('link_downed'))}"
    return Alert(
        "NvwatchIbLinkDowned",
        new_events(cfg, downed),
        "0s",
        Severity.WARNING,
        "InfiniBand link went down and came back.",
        f"{where_port(cfg)} lost its link {{{{ $value | humanize }}}} times in the last {w} "
        "or since the agent was last scraped.",
        Runbook(
            "link_downed counts how often the port failed its link recovery and "
            "went down. Each event kills in-flight RDMA traffic; jobs using it may "
            "have crashed or retried.",
            "InfiniBand fabric dashboard, *Errors by type* (link_downed) and "
            "*Link state*; the switch log for the same port.",
            "A single flap: note it. Repeated flaps: replace the cable or transceiver.",
            f"An event: it fires for {w} after the last flap, then resolves by itself; a "
            "port that stays down is NvwatchIbPortDown. The counter is the HCA's own, so "
            "an agent restart changes nothing; flaps while the agent or Prometheus was "
            f"down (up to {cfg.counter_gap_lookback}) fire once when scraping resumes; a "
            "count already above 0 at the first scrape of a node is history and does not "
            "fire.",
        ),
        Kind.EVENT,
    )


def ib_port_congested(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchIbPortCongested",
        f"rate(nvwatch_ib_port_transmit_wait_total{cfg.ib_sel()}[{cfg.rate_window}])"
        f" * {cfg.ib_transmit_wait_tick_seconds:g} > {cfg.ib_transmit_wait_ratio:g}",
        # short on purpose: the legacy 32-bit port_xmit_wait holds only ~17 s of
        # waiting at ~4 ns ticks, so a congested port saturates within minutes and
        # its rate falls to 0; a long `for:` would never see it
        cfg.for_fast,
        Severity.INFO,
        "InfiniBand port spends much of its time waiting for credits.",
        f"{where_port(cfg)} waited for credits about {{{{ $value | humanizePercentage }}}} "
        "of the time.",
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
            f"A rate: it resolves once the waiting over the last {cfg.rate_window} falls "
            "below the threshold, or when the counter saturates (see above).",
        ),
        Kind.EVENT,
    )


def ib_counter_saturated(cfg: MixinConfig) -> Alert:
    # port_xmit_wait is left out: at ~4 ns ticks it fills up on healthy ports
    # too within hours, and congestion has its own alert
    counters = cfg.ib_sel("counter!=" + q("port_xmit_wait"))
    return Alert(
        "NvwatchIbCounterSaturated",
        f"nvwatch_ib_port_reading_saturated{counters} == 1",
        cfg.for_default,
        Severity.WARNING,
        "InfiniBand error counter is pinned at its maximum and no longer counts.",
        f"Counter {{{{ $labels.counter }}}} of {where_port(cfg)} has reached its maximum; "
        "its rate now reads 0 whatever happens on the link.",
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
            "Repaired means the counter was reset (or the HCA's driver reloaded) and "
            "reads below its maximum; the alert resolves at the next evaluation.",
        ),
        Kind.CONDITION,
    )


# --- PCIe and the host ------------------------------------------------------------


def _never_at_max(cfg: MixinConfig, metric: str) -> str:
    """1 where the link stayed below its maximum for the whole window, else 0."""
    return (
        f"(max_over_time({metric}{cfg.sel('kind=' + q('current'))}[{cfg.pcie_degraded_window}])"
        f" < bool ignoring (kind) {metric}{cfg.sel('kind=' + q('max'))})"
    )


def pcie_link_degraded(cfg: MixinConfig) -> Alert:
    window = cfg.pcie_degraded_window
    return Alert(
        "NvwatchGpuPcieLinkDegraded",
        # judged over a window, not per sample: a healthy link reaches its maximum
        # whenever the GPU is busy, and an idle spell between jobs (when the link
        # trains down by design) must not resolve the alert only to re-fire later
        "(\n"
        f"    {_never_at_max(cfg, 'nvwatch_gpu_pcie_link_generation')}\n"
        f"  + {_never_at_max(cfg, 'nvwatch_gpu_pcie_link_width')}\n"
        ") > 0\n"
        f"and ignoring (kind) max_over_time(nvwatch_gpu_utilization_ratio{cfg.sel()}"
        f"[{window}]) > {cfg.pcie_busy_utilization:g}",
        cfg.for_default,
        Severity.WARNING,
        "Busy GPU runs its PCIe link below maximum generation or width.",
        f"{where_gpu(cfg)} was busy in the last {window} but its PCIe link never reached its "
        "maximum ({{ $value }} of generation and width degraded).",
        Runbook(
            "Idle GPUs train PCIe down to save power; a GPU whose link stayed below "
            f"its maximum generation or width for {window} although the GPU was busy "
            "in that time has a bad slot, riser or retimer and host<->GPU copies are "
            "slower.",
            "Node dashboard, *PCIe throughput and replays*; `nvidia-smi -q -d "
            "PCIE` (Link Gen/Width current vs max) or `lspci -vv` LnkSta vs LnkCap "
            "while the GPU is loaded.",
            "Reboot to retrain; persistent: hardware ticket for the slot/riser.",
            "Repaired means the link reaches its maximum generation and width again "
            "(after a reboot or reseat): the alert resolves with the first sample at "
            f"the maximum. It also resolves after {window} without a busy sample, since "
            "an idle link cannot be judged; it does not resolve in shorter idle spells.",
        ),
        Kind.CONDITION,
    )


def pcie_replays(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchGpuPcieReplays",
        f"rate(nvwatch_gpu_pcie_replays_total{cfg.sel()}[{cfg.rate_window}])"
        f" > {cfg.pcie_replay_rate_per_second:g}",
        cfg.for_default,
        Severity.WARNING,
        "GPU PCIe link is replaying packets.",
        f"{where_gpu(cfg)} replays {{{{ $value | humanize }}}} PCIe packets per second.",
        Runbook(
            "PCIe replays are link-level retransmissions after CRC errors; a "
            "healthy link almost never replays.",
            "Node dashboard, *PCIe throughput and replays*; `nvidia-smi -q -d "
            "PCIE` (Replays); AER messages in `dmesg`.",
            "Reseat the GPU/riser at the next maintenance; with XID 79 (fallen "
            "off the bus) drain now.",
            f"An error rate: it resolves once the rate over the last {cfg.rate_window} "
            "falls below the threshold, at most that long after the replays stop; a "
            "counter reset (driver reload) reads as a restart from 0.",
        ),
        Kind.EVENT,
    )


def gpu_starved(cfg: MixinConfig) -> Alert:
    s = cfg.sel
    return Alert(
        "NvwatchGpuStarved",
        f"nvwatch_gpu_utilization_ratio{s()} < {cfg.starvation_utilization:g}\n"
        f"and (nvwatch_gpu_memory_used_bytes{s()} / nvwatch_gpu_memory_total_bytes{s()})"
        f" > {cfg.starvation_memory_used_ratio:g}\n"
        f"and on ({cfg.node_labels})\n"
        f"  (\n"
        f"    nvwatch_host_cpu_iowait_ratio{s()} > {cfg.starvation_host_iowait:g}\n"
        f"    or nvwatch_host_cpu_utilization_ratio{s()}"
        f" > {cfg.starvation_host_cpu:g}\n"
        f"  )",
        cfg.for_slow,
        Severity.INFO,
        "GPU holds a job but is starved by its host.",
        f"{where_gpu(cfg)} is only {{{{ $value | humanizePercentage }}}} busy while a "
        "process holds its memory and the host is busy with I/O wait or CPU.",
        Runbook(
            "A job has memory on the GPU but keeps it mostly idle while the host "
            "waits on I/O or has no CPU left: the input pipeline (data loading, "
            "storage, preprocessing), not the GPU, limits the job.",
            "Node dashboard: GPU utilization against host iowait/CPU; "
            "`nvwatch_gpu_process_memory_bytes` names the process and user.",
            "Tell the job's owner (more data-loader workers, local cache, "
            "faster storage); nothing is broken on the node.",
            "Nothing to repair: the alert resolves when the GPU is busy again, the "
            "host is no longer waiting, or the job ends and frees the GPU's memory.",
        ),
        Kind.CONDITION,
    )


# In this order in the rule file and in docs/alerts.md.
ALERTS: tuple[Callable[[MixinConfig], Alert], ...] = (
    nvlink_down,
    nvlink_links_missing,
    nvlink_errors,
    ib_port_down,
    ib_ports_missing,
    ib_port_rate_degraded,
    ib_port_errors,
    ib_link_downed,
    ib_port_congested,
    ib_counter_saturated,
    pcie_link_degraded,
    pcie_replays,
    gpu_starved,
)


def group(cfg: MixinConfig) -> AlertGroup:
    return AlertGroup(
        "nvwatch-fabric",
        "Bottlenecks: NVLink, InfiniBand, PCIe, starvation",
        tuple(make(cfg) for make in ALERTS),
    )
