"""A job's notes: what its owner should change, in plain words, each with the threshold
(from the mixin config) that raised it and the GPU-hours it concerns."""

from __future__ import annotations

import dataclasses

from nvwatch.alerts.recording_straggler import POWER_REASONS as POWER_PATTERN
from nvwatch.alerts.recording_straggler import THERMAL_REASONS as THERMAL_PATTERN
from nvwatch.mixin import job_verdicts as v
from nvwatch.mixin.config import MixinConfig
from nvwatch.report.jobs.model import GpuUse, JobSummary, Note

# the clock-event reasons the straggler rules read as power and as heat
POWER_REASONS = tuple(POWER_PATTERN.split("|"))
THERMAL_REASONS = tuple(THERMAL_PATTERN.split("|"))
# MIG slices by their share of an A100/H100's memory (1g.10gb ... 4g.40gb of 80 GB)
MIG_SLICES = ((1 / 8, "1g"), (2 / 8, "2g"), (4 / 8, "4g"))


def notes_for(
    summary: JobSummary,
    cfg: MixinConfig,
    cluster_median: float | None,
    stragglers: list[dict[str, str]],
) -> JobSummary:
    """The summary with its notes, the costliest first."""
    hours = summary.duration_s / 3600.0
    found = [
        _idle(summary.gpus, cfg, hours),
        _low_utilization(summary, cfg, cluster_median, hours),
        _small_memory(summary.gpus, cfg, hours),
        _throttled(summary.gpus, cfg, hours, POWER_REASONS, v.POWER_CAPPED, "at its power cap"),
        _throttled(summary.gpus, cfg, hours, THERMAL_REASONS, v.THERMAL, "thermally throttled"),
        _straggler(stragglers, hours, summary.gpu_count, cfg),
        _idle_fabric(summary, cfg),
    ]
    notes = sorted((n for n in found if n is not None), key=lambda n: -n.gpu_hours)
    return dataclasses.replace(summary, notes=tuple(notes))


def _idle(gpus: tuple[GpuUse, ...], cfg: MixinConfig, hours: float) -> Note | None:
    floor = cfg.gpu_allocated_idle_utilization
    idle = [g for g in gpus if g.utilization is not None and g.utilization < floor]
    if not idle:
        return None
    names = ", ".join(f"{g.instance}/{g.gpu}" for g in idle[:8]) + ("..." if len(idle) > 8 else "")
    return Note(
        v.IDLE_GPUS,
        f"did not use {len(idle)} of its {len(gpus)} GPUs ({names}): ask for fewer",
        f"mean utilization below {floor:.0%} (gpu_allocated_idle_utilization)",
        len(idle) * hours,
    )


def _low_utilization(
    summary: JobSummary, cfg: MixinConfig, median: float | None, hours: float
) -> Note | None:
    util, fraction = summary.utilization, cfg.job_low_utilization_fraction
    if util is None or median is None or median <= 0 or util >= fraction * median:
        return None
    return Note(
        v.LOW_UTILIZATION,
        f"its GPUs were {util:.0%} busy against {median:.0%} for the GPUs other jobs held "
        "over the same time: look at its data loading and batch size",
        f"below {fraction:.0%} of the other jobs' median (job_low_utilization_fraction)",
        summary.gpu_count * hours * (1.0 - util / median),
    )


def _small_memory(gpus: tuple[GpuUse, ...], cfg: MixinConfig, hours: float) -> Note | None:
    ratios = [
        g.memory_peak_bytes / g.memory_total_bytes
        for g in gpus
        if g.memory_peak_bytes is not None and g.memory_total_bytes
    ]
    if not ratios or max(ratios) >= cfg.job_small_memory_ratio:
        return None
    peak = max(ratios)
    total = max(g.memory_total_bytes or 0.0 for g in gpus)
    fits = next((name for share, name in MIG_SLICES if peak <= share), None)
    where = f"a {fits} MIG slice ({peak * total / 2**30:.1f} GiB peak)" if fits else "a smaller GPU"
    return Note(
        v.SMALL_MEMORY,
        f"its busiest GPU used {peak:.0%} of its memory at most: it would fit {where}",
        f"memory peak below {cfg.job_small_memory_ratio:.0%} (job_small_memory_ratio)",
        len(gpus) * hours,
    )


def _throttled(
    gpus: tuple[GpuUse, ...],
    cfg: MixinConfig,
    hours: float,
    reasons: tuple[str, ...],
    code: str,
    words: str,
) -> Note | None:
    limit = cfg.job_throttled_ratio
    hit = [g for g in gpus if max((g.clock_events.get(r, 0.0) for r in reasons), default=0) > limit]
    if not hit:
        return None
    worst = max(max(g.clock_events.get(r, 0.0) for r in reasons) for g in hit)
    return Note(
        code,
        f"{len(hit)} of its GPUs ran {words} up to {worst:.0%} of the time: their clocks, "
        "and a synchronous job with them, were held back (ask the admins about the node)",
        f"above {limit:.0%} of its life (job_throttled_ratio)",
        len(hit) * hours,
    )


def _straggler(
    alerts: list[dict[str, str]], hours: float, gpu_count: int, cfg: MixinConfig
) -> Note | None:
    if not alerts:
        return None
    inst = cfg.instance_label
    named = ", ".join(
        f"{a.get(inst, '?')}/{a.get('gpu') or a.get('device', '?')} ({a.get('cause', 'unknown')})"
        for a in alerts[:4]
    )
    return Note(
        v.STRAGGLER,
        f"one rank held the whole job back: {named}; the other ranks waited for it",
        "NvwatchJobStraggler fired during its life",
        gpu_count * hours,
    )


def _idle_fabric(summary: JobSummary, cfg: MixinConfig) -> Note | None:
    nodes = {g.instance for g in summary.gpus} or {n.instance for n in summary.nodes}
    if len(nodes) < 2 or not summary.ports or summary.duration_s <= 0:
        return None
    moved = sum(p.transmit_bytes + p.receive_bytes for p in summary.ports)
    per_node = moved / len(nodes) / summary.duration_s
    if per_node >= cfg.job_ib_idle_bytes_per_s:
        return None
    return Note(
        v.IDLE_INFINIBAND,
        f"it ran on {len(nodes)} nodes but their InfiniBand moved {per_node / 1e6:.2f} MB/s "
        "per node: it could run on fewer nodes, or its ranks did not talk",
        f"below {cfg.job_ib_idle_bytes_per_s / 1e6:g} MB/s per node (job_ib_idle_bytes_per_s)",
        summary.gpu_hours,
    )
