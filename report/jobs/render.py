"""`nvwatch job`'s terminal text: who, where, how long, the totals, a row per GPU, the
energy split with its method, the notes, and which source answered."""

from __future__ import annotations

import datetime

from nvwatch.mixin.job_verdicts import words
from nvwatch.report.jobs.model import EXCLUSIVE, J_PER_KWH, GpuUse, JobSummary

METHODS = {
    EXCLUSIVE: "no other job held a GPU of the node meanwhile: the whole node's energy",
    "gpu-share": "other jobs held GPUs of the node meanwhile: its energy x the GPUs held",
}


def render_text(summary: JobSummary, source: str) -> str:
    s = summary
    owner = f"{s.user or '?'}" + (f", account {s.account}" if s.account else "")
    where = f" on cluster {s.cluster}" if s.cluster else ""
    nodes = sorted({n.instance for n in s.nodes} | {g.instance for g in s.gpus})
    lines = [
        f"job {s.job_id} ({owner}){where}",
        f"ran {_when(s.start)} .. {_when(s.end)} ({_duration(s.duration_s)}"
        + (f", the last of {s.runs} runs: requeued" if s.runs > 1 else "")
        + "), "
        f"{s.gpu_count} GPUs on {len(nodes)} node(s): {s.gpu_hours:.1f} GPU-hours"
        + (
            f", after {_duration(s.queue_wait_s)} in the queue"
            if s.queue_wait_s is not None
            else ""
        ),
        f"GPU utilization {_pct(s.utilization)} (mean of its GPUs), "
        f"GPU energy {_kwh(s.gpu_energy_joules)}, node energy {_kwh(s.node_energy_joules)}"
        + (f", {s.carbon_kg:.1f} kg CO2" if s.carbon_kg is not None else ""),
    ]
    if s.gpus:
        lines += ["", *_gpu_table(s.gpus)]
    if s.truncated:
        lines += ["", "(per-GPU rows were dropped to fit the store; the totals are the job's)"]
    if s.ports:
        lines += ["", "InfiniBand port      transmitted  received"]
        lines += [
            f"{p.instance}/{p.device}/{p.port:<6} {_gb(p.transmit_bytes):>12} "
            f"{_gb(p.receive_bytes):>9}"
            for p in s.ports
        ]
    if s.nodes:
        lines += ["", "node energy (BMC input power over the job's life):"]
        lines += [
            f"  {n.instance}: {n.gpus_held}/{n.gpus_total} GPUs, {_kwh(n.node_energy_joules)} "
            f"x {n.share:.2f} = {_kwh(n.energy_joules)} ({METHODS.get(n.method, n.method)})"
            for n in s.nodes
        ]
    lines += ["", "notes:" if s.notes else "notes: none (no threshold was crossed)"]
    for note in s.notes:
        lines.append(f"  - {words(note.code)}: {note.text}")
        lines.append(f"    [{note.code}: {note.threshold}; {note.gpu_hours:.1f} GPU-hours]")
    lines += ["", f"source: {source}"]
    return "\n".join(lines) + "\n"


def _gpu_table(gpus: tuple[GpuUse, ...]) -> list[str]:
    header = "node/gpu         util    sm tensor  memory peak     power/limit  energy  throttled"
    rows = [header]
    for g in gpus:
        memory = (
            f"{_gib(g.memory_peak_bytes)}/{_gib(g.memory_total_bytes)}"
            if g.memory_peak_bytes is not None
            else "-"
        )
        power = (
            f"{g.power_mean_watts:.0f}/{g.power_limit_watts:.0f} W"
            if g.power_mean_watts is not None and g.power_limit_watts is not None
            else "-"
        )
        throttled = ", ".join(f"{r} {v:.0%}" for r, v in sorted(g.clock_events.items())) or "-"
        rows.append(
            f"{g.instance + '/' + g.gpu:<15} {_pct(g.utilization):>5} {_pct(g.sm_active):>5} "
            f"{_pct(g.tensor_active):>6} {memory:>12} {power:>15} {_kwh(g.energy_joules):>7}  "
            f"{throttled}"
        )
    return rows


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{seconds:.0f} s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _kwh(joules: float | None) -> str:
    return "-" if joules is None else f"{joules / J_PER_KWH:.3g} kWh"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**30:.1f}G"


def _gb(value: float) -> str:
    return f"{value / 1e9:.2f} GB"


def render_list(summaries: list[JobSummary]) -> str:
    """One line per job, oldest end first, as reportseff prints them: its GPU-hours, how
    busy its GPUs were, its energy, and the note that cost most GPU-hours."""
    header = (
        f"{'JOBID':<12} {'USER':<10} {'ACCOUNT':<10} {'PARTITION':<10} {'GPUS':>4} "
        f"{'GPU-H':>7} {'UTIL':>5} {'ENERGY':>10}  NOTE"
    )
    lines = [header]
    for s in sorted(summaries, key=lambda s: (s.end, s.job_id)):
        worst = s.notes[0] if s.notes else None
        note = f"{words(worst.code)}: {worst.text}" if worst else "-"
        lines.append(
            f"{s.job_id:<12} {s.user[:10]:<10} {s.account[:10]:<10} {s.partition[:10]:<10} "
            f"{s.gpu_count:>4} {s.gpu_hours:>7.1f} {_pct(s.utilization):>5} "
            f"{_kwh(s.energy_joules):>10}  {note[:80]}"
        )
    return "\n".join(lines) + "\n"
