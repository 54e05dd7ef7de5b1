"""The health group: XID and ECC faults, memory repair, GPUs gone, the agent itself."""

from __future__ import annotations

from collections.abc import Callable

from alerts.recording import EXPECTED_GPUS
from alerts.rules.base import (
    Alert,
    AlertGroup,
    Runbook,
    Severity,
    node_labels_with_class,
    q,
    where_gpu,
    where_node,
)
from mixin.config import MixinConfig


def xid_critical(cfg: MixinConfig) -> Alert:
    w = cfg.rate_window
    xids = cfg.sel("xid=~" + q("|".join(cfg.critical_xids)))
    return Alert(
        "NvwatchGpuXidCritical",
        f"increase(nvwatch_gpu_xid_errors_total{xids}[{w}]) > 0\n"
        # the counter is born at 1 with the first event; increase() cannot see
        # that step, so a series that did not exist one window ago counts too
        f"or (nvwatch_gpu_xid_errors_total{xids}"
        f" unless nvwatch_gpu_xid_errors_total{xids} offset {w})",
        "0s",
        Severity.CRITICAL,
        "GPU reported a critical XID error.",
        f"{where_gpu(cfg)} reported XID {{{{ $labels.xid }}}} ({{{{ $value | humanize }}}} "
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
    )


def ecc_uncorrectable(cfg: MixinConfig) -> Alert:
    w = cfg.rate_window
    return Alert(
        "NvwatchGpuEccUncorrectable",
        f"increase(nvwatch_gpu_ecc_errors_total"
        f"{cfg.sel('type=' + q('uncorrected'), 'scope=' + q('volatile'))}[{w}]) > 0",
        "0s",
        Severity.CRITICAL,
        "GPU had uncorrectable ECC errors.",
        f"{where_gpu(cfg)} had {{{{ $value | humanize }}}} uncorrectable ECC errors in {w}.",
        Runbook(
            "A double-bit (uncorrectable) ECC error corrupted data in GPU memory; "
            "the job on the GPU received an error or wrong data.",
            "`nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`; node dashboard, *ECC errors*.",
            "Drain the node and reset the GPU so the bad page is retired or the "
            "row remapped; RMA if it recurs or remapping fails.",
        ),
    )


def memory_repair_pending(cfg: MixinConfig) -> Alert:
    s = cfg.sel
    return Alert(
        "NvwatchGpuMemoryRepairPending",
        f"nvwatch_gpu_retired_pages_pending{s()} == 1\n"
        f"or nvwatch_gpu_remapped_rows{s('kind=' + q('pending'))} == 1",
        cfg.for_default,
        Severity.WARNING,
        "GPU has a page retirement or row remap pending a reset.",
        f"{where_gpu(cfg)} has a memory page retirement or row remap waiting for the next "
        "GPU reset.",
        Runbook(
            "The driver marked memory for retirement (pre-Ampere) or row "
            "remapping (Ampere+) but applies it only on the next GPU reset; until "
            "then the bad memory can still be used.",
            "`nvidia-smi -q -d PAGE_RETIREMENT,ROW_REMAPPER` shows Pending: Yes.",
            "Drain the node and reset the GPU (`nvidia-smi -r`) or reboot.",
        ),
    )


def row_remap_failure(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchGpuRowRemapFailure",
        f"nvwatch_gpu_remapped_rows{cfg.sel('kind=' + q('failure'))} == 1",
        "0s",
        Severity.CRITICAL,
        "GPU failed to remap a memory row.",
        f"{where_gpu(cfg)} ran out of spare rows or failed a row remap.",
        Runbook(
            "The HBM row remapper could not remap a failing row (no spare rows "
            "left in the bank). The GPU can no longer hide its bad memory.",
            "`nvidia-smi -q -d ROW_REMAPPER` shows Remapping Failure Occurred: "
            "Yes; XID 64 in `dmesg`.",
            "Take the GPU out of service and open an RMA.",
        ),
    )


def gpu_down(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchGpuDown",
        f"nvwatch_gpu_up{cfg.sel()} == 0",
        cfg.for_fast,
        Severity.CRITICAL,
        "GPU stopped answering NVML.",
        f"{where_gpu(cfg)} does not answer NVML.",
        Runbook(
            "The agent knew the GPU but NVML now reports it lost or failing (GPU "
            "is lost, fallen off the bus). Its other series are gone.",
            "`nvidia-smi` on the node; `dmesg` for XID 79 or PCIe AER errors.",
            "Drain the node and reboot; a GPU that stays lost needs a hardware ticket.",
        ),
    )


def gpu_missing(cfg: MixinConfig) -> Alert:
    nc = cfg.node_class_label
    return Alert(
        "NvwatchGpuMissing",
        f"sum by ({node_labels_with_class(cfg)}) (nvwatch_gpu_up{cfg.sel()})\n"
        f"  < on ({nc}) group_left () {EXPECTED_GPUS}",
        cfg.for_fast,
        Severity.CRITICAL,
        "Node has fewer working GPUs than its node class expects.",
        f"{where_node(cfg)} has {{{{ $value }}}} working GPUs, fewer than a "
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
    )


def agent_down(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchAgentDown",
        f"up{cfg.sel()} == 0",
        cfg.for_fast,
        Severity.CRITICAL,
        "The nvwatch agent cannot be scraped.",
        f"Prometheus cannot scrape the nvwatch agent on {where_node(cfg)}.",
        Runbook(
            "Prometheus' scrape of the agent fails: the node is down, the agent "
            "is not running, or the network/TLS/auth between them is broken. No "
            "GPU alert can fire for this node meanwhile.",
            "Prometheus' *Targets* page shows the scrape error; `systemctl status "
            "nvwatch` and `curl -s localhost:9477/healthz` on the node.",
            "Restart the agent; if the node is down, handle it as a node outage.",
        ),
    )


def agent_stale(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchAgentStale",
        f"time() - nvwatch_agent_last_poll_timestamp_seconds{cfg.sel()}"
        f" > {cfg.agent_stale_seconds:g}",
        cfg.for_fast,
        Severity.WARNING,
        "The nvwatch agent serves stale data.",
        f"The agent on {where_node(cfg)} last completed a poll "
        "{{ $value | humanizeDuration }} ago.",
        Runbook(
            "The agent still answers /metrics from its cache but its poll loop "
            "stopped: a source call (usually NVML on a wedged GPU) hangs.",
            "`curl -s localhost:9477/healthz`; `nvidia-smi` hanging on the node "
            "confirms a stuck driver.",
            "Restart the agent; if NVML itself hangs, drain and reboot the node.",
        ),
    )


def agent_source_down(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchAgentSourceDown",
        f"nvwatch_agent_source_up{cfg.sel()} == 0",
        cfg.for_default,
        Severity.WARNING,
        "An nvwatch source is failing.",
        f"Source {{{{ $labels.source }}}} of the agent on {where_node(cfg)} fails its polls.",
        Runbook(
            "One of the agent's sources (nvml, infiniband, host) fails or times "
            "out; its metrics are missing while the others still arrive.",
            "`nvwatch doctor` on the node says what is missing and why; "
            "`nvwatch_agent_source_errors_total` counts the failures.",
            "nvml: driver/library mismatch after an upgrade (reboot). infiniband: "
            "sysfs not readable (permissions, container mounts). host: psutil.",
        ),
    )


# In this order in the rule file and in docs/alerts.md.
ALERTS: tuple[Callable[[MixinConfig], Alert], ...] = (
    xid_critical,
    ecc_uncorrectable,
    memory_repair_pending,
    row_remap_failure,
    gpu_down,
    gpu_missing,
    agent_down,
    agent_stale,
    agent_source_down,
)


def group(cfg: MixinConfig) -> AlertGroup:
    return AlertGroup(
        "nvwatch-health",
        "Health: XID, ECC, GPUs and the agent",
        tuple(make(cfg) for make in ALERTS),
    )
