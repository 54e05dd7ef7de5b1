"""The health group: XID and ECC faults, memory repair, GPUs gone, the agent itself."""

from __future__ import annotations

from collections.abc import Callable

from nvwatch.alerts.recording import EXPECTED_GPUS
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
    where_node,
)
from nvwatch.alerts.rules.scheduler import source_matcher
from nvwatch.mixin.config import MixinConfig


def _xid_clears(cfg: MixinConfig) -> str:
    w = cfg.rate_window
    lookback = cfg.counter_gap_lookback
    return (
        f"An event: it fires for {w} after the last new XID, then resolves by itself "
        "whatever the GPU's state (the state pages as a condition: "
        "NvwatchGpuEccUncorrectable, NvwatchGpuMemoryRepairPending, NvwatchGpuDown, "
        "NvwatchGpuMissing). New XIDs are seen two ways: the count grew since the last "
        f"scrape before the window, also across a gap of up to {lookback} (XIDs logged "
        "while the agent or Prometheus was down page once when scraping resumes); or "
        "the GPU's counter for that code appeared while the GPU answered NVML (the agent "
        "exports it from the first XID on, so this is also how the first XID after a "
        "counter reset shows). The agent counts the kernel log's Xid lines since boot, "
        "so a restarted agent serves the same counts and nothing pages again; a count "
        "that drops (the kernel's ring buffer overwrote old lines) pages nothing either. "
        "Where the kernel log is unreadable (`nvwatch doctor` says so) the counts start "
        "with the agent, and the first XID after a restart still pages. **A counter first seen "
        "above 0** at the first scrape of a node Prometheus has never seen (a new node, "
        f"a new Prometheus, a gap longer than {lookback}) does not page: those XIDs are "
        "older than the monitoring and of unknown age; the node dashboard shows them, "
        "and what they left broken pages as a condition. For the same reason an XID "
        f"logged during a reboot longer than {w}, which brings the count back to where "
        "it stood before the reboot, is not seen here."
    )


def xid_critical(cfg: MixinConfig) -> Alert:
    w = cfg.rate_window
    xids = f"nvwatch_gpu_xid_errors_total{cfg.sel('xid=~' + q('|'.join(cfg.critical_xids)))}"
    return Alert(
        "NvwatchGpuXidCritical",
        # the counter exists only from a GPU's first XID of a code on, so a series
        # that appears is an event too (new_events explains the branches)
        new_events(cfg, xids, read_when=f"nvwatch_gpu_up{cfg.sel()}", own_labels="xid"),
        "0s",
        Severity.CRITICAL,
        "GPU reported a critical XID error.",
        f"{where_gpu(cfg)} reported XID {{{{ $labels.xid }}}} ({{{{ $value | humanize }}}} "
        f"new in the last {w} or since the agent was last scraped).",
        Runbook(
            "The driver logged an XID that means a hardware or driver fault (see "
            "the table below): ECC, NVLink, the GPU falling off the bus, GSP. The "
            "job on that GPU has most likely crashed.",
            "`dmesg | grep -i xid` on the node shows the event and its details; "
            "node dashboard, *XID events*.",
            "Drain the node; follow the XID table: reset the GPU for 48/63/94, "
            "reboot for 79/119/120, hardware ticket if it repeats or for 64/95.",
            _xid_clears(cfg),
        ),
        Kind.EVENT,
    )


def ecc_uncorrectable(cfg: MixinConfig) -> Alert:
    volatile = cfg.sel("type=" + q("uncorrected"), "scope=" + q("volatile"))
    return Alert(
        "NvwatchGpuEccUncorrectable",
        # volatile counts since the last driver load or GPU reset: above 0 is a GPU
        # that still needs its reset, however long ago the error happened
        f"nvwatch_gpu_ecc_errors_total{volatile} > 0",
        "0s",
        Severity.CRITICAL,
        "GPU has uncorrectable ECC errors and needs a reset.",
        f"{where_gpu(cfg)} has {{{{ $value | humanize }}}} uncorrectable ECC errors since its "
        "last reset; it must be drained and reset.",
        Runbook(
            "A double-bit (uncorrectable) ECC error corrupted data in GPU memory; "
            "the job on the GPU received an error or wrong data. The volatile count "
            "stays above 0 until the GPU is reset, and so does the alert: it pages "
            "for an error older than the first scrape too.",
            "`nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`; node dashboard, *ECC errors*.",
            "Drain the node and reset the GPU so the bad page is retired or the "
            "row remapped; RMA if it recurs or remapping fails.",
            "Repaired means reset: the volatile count returns to 0 after `nvidia-smi -r` "
            "(with the GPU drained), a driver reload or a reboot, and the alert "
            "resolves at the next evaluation. Restarting the agent or Prometheus does "
            "not clear it. The aggregate (lifetime) count keeps the history.",
        ),
        Kind.CONDITION,
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
            "Repaired means the GPU was reset: the retirement or remap is applied, NVML "
            "reports nothing pending (0) and the alert resolves at the next evaluation.",
        ),
        Kind.CONDITION,
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
            "A reset does not repair it: NVIDIA treats a remapping failure as an RMA "
            "condition. The alert resolves when NVML no longer reports the failure, "
            "normally when the board is replaced (its series leave with its UUID).",
        ),
        Kind.CONDITION,
    )


def gpu_down(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchGpuDown",
        # uuid aggregated away: a restarted agent reports the lost GPU it can no longer
        # read with uuid="", and the alert must stay the same alert (no resolve, no new page)
        f"max without (uuid) (nvwatch_gpu_up{cfg.sel()}) == 0",
        cfg.for_fast,
        Severity.CRITICAL,
        "GPU stopped answering NVML.",
        f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.{cfg.instance_label} }}}} does not answer "
        "NVML.",
        Runbook(
            "The agent knew the GPU but NVML now reports it lost or failing (GPU "
            "is lost, fallen off the bus). Its other series are gone.",
            "`nvidia-smi` on the node; `dmesg` for XID 79 or PCIe AER errors.",
            "Drain the node and reboot; a GPU that stays lost needs a hardware ticket.",
            "Repaired means NVML answers for the GPU again (after a reset or reboot): "
            "`nvwatch_gpu_up` returns to 1. If a restarted agent no longer finds the GPU "
            "at all, its series ends and this alert resolves, but "
            "NvwatchGpuMissing keeps paging for the node.",
        ),
        Kind.CONDITION,
    )


def gpu_missing(cfg: MixinConfig) -> Alert:
    nc = cfg.node_class_label
    by = node_labels_with_class(cfg)
    gpus_up = count_or_zero(by, f"sum by ({by}) (nvwatch_gpu_up{cfg.sel()})", f"up{cfg.sel()} == 1")
    return Alert(
        "NvwatchGpuMissing",
        f"{gpus_up}\n< on ({nc}) group_left () {EXPECTED_GPUS}",
        cfg.for_fast,
        Severity.CRITICAL,
        "Node has fewer working GPUs than its node class expects.",
        f"{where_node(cfg)} has {{{{ $value }}}} working GPUs, fewer than a "
        f"{{{{ $labels.{nc} }}}} node should have.",
        Runbook(
            "The node's count of GPUs answering NVML is below its node class "
            "(mixin config `node_classes`). A GPU that was never enumerated after "
            "a reboot is only visible this way, and so is a node whose NVML fails "
            "altogether (0 working GPUs; NvwatchAgentSourceDown for `nvml` says why) "
            "or whose GPUs left the PCI bus.",
            "`nvidia-smi -L` and `lspci | grep -i nvidia` on the node; `nvwatch doctor`; "
            "cluster overview, *GPUs up / expected*.",
            "Drain the node and reboot; a GPU missing from lspci needs a hardware "
            "ticket. Check the node's `node_class` label if the count is right.",
            "Repaired means the node again has as many GPUs answering NVML as its class "
            "expects; the alert resolves at the next evaluation after that. It holds "
            "across agent restarts (a lost GPU that a new agent no longer enumerates "
            "still counts as missing) and does not fire while the agent itself cannot be "
            "scraped (NvwatchAgentDown).",
        ),
        Kind.CONDITION,
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
            "Resolves at the first successful scrape (`up` 1).",
        ),
        Kind.CONDITION,
    )


def agent_unscraped(cfg: MixinConfig) -> Alert:
    up = f"up{cfg.sel()}"
    return Alert(
        "NvwatchAgentUnscraped",
        # `up` exists only while something scrapes the target: a target it had a sample
        # for in the window, and has none for now, left every scraper
        f"count_over_time({up}[{cfg.unscraped_memory}]) unless {up}",
        cfg.for_fast,
        Severity.CRITICAL,
        "No scraper scrapes the nvwatch agent any more.",
        f"The nvwatch agent on {where_node(cfg)} was scraped {{{{ $value }}}} times in the "
        f"last {cfg.unscraped_memory} and is no longer: its scrape shard (vmagent) is down, "
        "or its target left service discovery.",
        Runbook(
            "The node's `up` series stopped: nothing scrapes the agent, so neither "
            "NvwatchAgentDown (which needs a failed scrape) nor any GPU alert can fire "
            "for it. With sharded scraping (deploy/scale) one dead vmagent shard pages "
            "this for exactly the nodes of its half; with one Prometheus it means the "
            "node's target left service discovery (a file_sd file deleted or broken, "
            "a relabelling mistake).",
            "The scrape shards' `/targets` pages (vmagent) or Prometheus' *Service "
            "discovery* page; `systemctl status vmagent@N` on the shard host; the "
            "file_sd files `nvwatch inventory` writes.",
            "Restart the shard or repair the file_sd file. Retiring a node on purpose "
            "also fires this: silence it for the retired node for "
            f"{cfg.unscraped_memory}.",
            "Resolves at the node's next scrape, or "
            f"{cfg.unscraped_memory} after its last sample (the rule cannot remember "
            "it longer: a shard still down by then is paged by its own liveness "
            "check).",
        ),
        Kind.CONDITION,
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
            "Resolves as soon as the agent completes a poll again (its timestamp is "
            f"younger than {cfg.agent_stale_seconds:g} s).",
        ),
        Kind.CONDITION,
    )


def agent_source_down(cfg: MixinConfig) -> Alert:
    source = f"{cfg.node_labels}, source"
    return Alert(
        "NvwatchAgentSourceDown",
        # the scheduler source reads Slurm, not the node's hardware: its own alert
        # (NvwatchSchedulerSourceDown) says so
        f"nvwatch_agent_source_up{cfg.sel(source_matcher('!='))} == 0\n"
        # the agent reports an absent source as up; this keeps it quiet even if a
        # source ever reported both
        f"unless on ({source}) nvwatch_agent_source_absent{cfg.sel()} == 1",
        cfg.for_default,
        Severity.CRITICAL,
        "An nvwatch source cannot read hardware that is on the node.",
        f"Source {{{{ $labels.source }}}} of the agent on {where_node(cfg)} is down: its "
        "hardware is there but cannot be read. `nvwatch doctor` on the node, or the "
        "agent's landing page, gives the agent's reason.",
        Runbook(
            "One of the agent's sources (nvml, infiniband, host) fails or times out "
            "although its hardware exists; its metrics are missing while the others "
            "still arrive. nvml down with NVIDIA GPUs on the PCI bus: the driver is not "
            "loaded or broken (often a driver/library mismatch after an upgrade), or a "
            "GPU failed to initialise or fell off the bus. infiniband down: the node "
            "had HCAs and they are gone (driver unloaded, HCA lost), HCAs are on PCI "
            "but no RDMA device exists, or sysfs is not readable (permissions, "
            "container mounts). Hardware that does not exist on the node is absent "
            "(`nvwatch_agent_source_absent` 1, the source up), not down, and never "
            "fires this alert. The scheduler source reads Slurm, not the node's "
            "hardware: NvwatchSchedulerSourceDown is its alert.",
            "`nvwatch doctor` on the node (or the agent's landing page) says up, absent "
            "or down and why, e.g. `8 NVIDIA GPUs on PCI but NVML failed: …` or "
            "`InfiniBand devices gone: mlx5_0, … (driver unloaded or HCAs lost?)`; "
            "`nvwatch_agent_source_errors_total` counts the failed polls.",
            "nvml: `nvidia-smi`, `dmesg | grep NVRM`; reload the driver or reboot. "
            "infiniband: `lspci | grep Mellanox`, `dmesg | grep mlx5`; reload mlx5_core "
            "or reboot; fix the mounts/permissions of /sys in a container. host: the "
            "agent cannot read /proc (CPU, memory, load); fix its sandbox or container "
            "mounts and restart it.",
            "Repaired means the source's polls succeed again (`nvwatch_agent_source_up` "
            "1); the alert resolves at the next evaluation. Restarting the agent on a "
            "node whose hardware is really gone makes the source absent and resolves "
            "this alert, but NvwatchGpuMissing or NvwatchIbPortsMissing keeps paging "
            "while the node class expects that hardware.",
        ),
        Kind.CONDITION,
    )


def simulated_agent_in_production(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchSimulatedAgentInProduction",
        f"nvwatch_agent_simulated{cfg.sel()} == 1",
        "0s",
        Severity.CRITICAL,
        "A production Prometheus scrapes an nvwatch agent on simulated hardware.",
        f"The agent on {where_node(cfg)} serves a simulated {{{{ $labels.profile }}}} node, "
        "not the real one: its GPUs look healthy whatever the real GPUs do.",
        Runbook(
            "The agent was started with `--simulate` or from a shell or unit with "
            "`NVWATCH_SIMULATE` set (`nvwatch simulate exec` sets it for its command). "
            "Everything it serves is made up, with realistic serials and UUIDs, and no "
            "alert of the real node can fire. Only in rule files built with "
            "`production: true` in the mixin config.",
            "The agent's landing page has a red SIMULATED banner; its start-up log "
            "warns `SIMULATED node ...`; `nvwatch_agent_simulated` names the profile.",
            "Restart the agent without `--simulate` and with `NVWATCH_SIMULATE` unset "
            "(`systemctl show nvwatch -p Environment`); if it is a test agent, take it out "
            "of the production scrape config.",
            "Repaired means the agent runs on the real driver: `nvwatch_agent_simulated` is "
            "gone from its /metrics, and the alert resolves at the next evaluation.",
        ),
        Kind.CONDITION,
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
    agent_unscraped,
    agent_stale,
    agent_source_down,
)


def group(cfg: MixinConfig) -> AlertGroup:
    return AlertGroup(
        "nvwatch-health",
        "Health: XID, ECC, GPUs and the agent",
        tuple(make(cfg) for make in ALERTS)
        # a test or demo stack scrapes simulated agents on purpose
        + ((simulated_agent_in_production(cfg),) if cfg.production else ()),
    )
