"""Series of two jobs written by hand, as the agents and a BMC probe would export them,
for `nvwatch job` against a real Prometheus (promtool backfills them).

Two 8-GPU nodes, samples every STEP_S. Job 4711 (alice, ml) holds every GPU of n1 and
GPUs 0-3 of n2 for an hour; job 4712 (bob, cv) holds n2's GPUs 4-7 for half an hour
inside it. Every figure below is a constant or a simple pattern, so the tests' expected
values are arithmetic on these constants, not the code's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STEP_S = 15
GIB = 2**30
MEMORY_TOTAL = 80 * GIB
POWER_LIMIT_W = 400.0
NODE_WATTS = {"n1": 5000.0, "n2": 4000.0}
GPU_NAME = "NVIDIA H100 80GB HBM3"


@dataclass(frozen=True)
class Job:
    job_id: str
    user: str
    account: str
    gpus: tuple[tuple[str, int], ...]
    start: int  # seconds after the history's first sample
    end: int


@dataclass(frozen=True)
class GpuPlan:
    """What one GPU does while its job runs (and idles at 0 % / 60 W outside it)."""

    util: float
    watts: float
    memory_gib: float
    memory_peak_gib: float  # once, in the middle of the job
    power_cap_share: float = 0.0  # sw_power_cap active over this first share of the job
    counter_reset: bool = False  # the energy counter restarts from 0 mid-job


A_GPUS = tuple(("n1", g) for g in range(8)) + tuple(("n2", g) for g in range(4))
JOB_A = Job("4711", "alice", "ml", A_GPUS, 600, 4200)
JOB_B = Job("4712", "bob", "cv", tuple(("n2", g) for g in range(4, 8)), 1200, 3000)
JOBS = (JOB_A, JOB_B)
SPAN_S = 4800

PLANS: dict[tuple[str, int], GpuPlan] = {
    **{("n1", g): GpuPlan(0.9, 300.0, 20.0, 40.0) for g in range(7)},
    ("n1", 7): GpuPlan(0.0, 60.0, 0.5, 0.5),  # held, never used
    ("n2", 0): GpuPlan(0.8, 280.0, 20.0, 30.0, counter_reset=True),
    ("n2", 1): GpuPlan(0.8, 280.0, 20.0, 30.0, power_cap_share=0.3),
    **{("n2", g): GpuPlan(0.8, 280.0, 20.0, 30.0) for g in (2, 3)},
    **{("n2", g): GpuPlan(0.1, 90.0, 2.0, 4.0) for g in range(4, 8)},
}
IDLE = GpuPlan(0.0, 60.0, 0.5, 0.5)
# the rules found n2/1 (capped) holding job 4711 back for a while, as Prometheus records
# a firing alert; job 4712 had none
STRAGGLER_ALERT = {
    "alertname": "NvwatchJobStraggler",
    "alertstate": "firing",
    "severity": "warning",
    "job_id": "4711",
    "instance": "n2",
    "gpu": "1",
    "cause": "power-capped",
}
STRAGGLER_FROM, STRAGGLER_UNTIL = 300, 900


def job_of(node: str, gpu: int, t: int) -> Job | None:
    for job in JOBS:
        # a sample stands for the interval before it: the job's are those in (start, end]
        if (node, gpu) in job.gpus and job.start < t <= job.end:
            return job
    return None


COUNTERS = (
    "nvwatch_gpu_energy_joules",
    "nvwatch_ib_port_transmit_bytes",
    "nvwatch_ib_port_receive_bytes",
)


class SeriesWriter:
    """Samples grouped as OpenMetrics wants them: by family, then by series, in time."""

    def __init__(self) -> None:
        self.families: dict[str, dict[str, list[str]]] = {}

    def add(self, family: str, labels: dict[str, str], value: float, at: float) -> None:
        name = family + "_total" if family in COUNTERS else family
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        series = self.families.setdefault(family, {}).setdefault(text, [])
        series.append(f"{name}{{{text}}} {value!r} {at:.3f}")

    def write(self, path: Path) -> None:
        with path.open("w", encoding="utf-8") as out:
            for family, series in self.families.items():
                out.write(f"# TYPE {family} {'counter' if family in COUNTERS else 'gauge'}\n")
                for lines in series.values():
                    out.write("\n".join(lines) + "\n")
            out.write("# EOF\n")


def write_openmetrics(path: Path, first: float) -> None:
    """Every series over SPAN_S from `first`, in OpenMetrics for promtool."""
    w = SeriesWriter()
    energy: dict[tuple[str, int], float] = {key: 1.0e6 for key in PLANS}
    for t in range(0, SPAN_S + 1, STEP_S):
        at = first + t
        for (node, gpu), plan in PLANS.items():
            job = job_of(node, gpu, t)
            running = plan if job is not None else IDLE
            labels = {"job": "nvwatch", "cluster": "c1", "instance": node, "gpu": str(gpu)}
            middle = job is not None and t == (job.start + job.end) // 2 // STEP_S * STEP_S
            memory = running.memory_peak_gib if middle else running.memory_gib
            if t > 0:
                energy[node, gpu] += running.watts * STEP_S
            if job is not None and running.counter_reset and t == job.start + 1800:
                energy[node, gpu] = running.watts * STEP_S  # a driver reload: from zero
            capped = job is not None and t - job.start < running.power_cap_share * (
                job.end - job.start
            )
            w.add("nvwatch_gpu_utilization_ratio", labels, running.util, at)
            w.add("nvwatch_gpu_memory_used_bytes", labels, memory * GIB, at)
            w.add("nvwatch_gpu_memory_total_bytes", labels, float(MEMORY_TOTAL), at)
            w.add("nvwatch_gpu_power_watts", labels, running.watts, at)
            w.add("nvwatch_gpu_power_limit_watts", labels, POWER_LIMIT_W, at)
            w.add("nvwatch_gpu_energy_joules", labels, energy[node, gpu], at)
            reason = {**labels, "reason": "sw_power_cap"}
            w.add("nvwatch_gpu_clock_event_active", reason, 1.0 if capped else 0.0, at)
            w.add("nvwatch_gpu_info", {**labels, "name": GPU_NAME}, 1.0, at)
            if job is not None:
                owner = {"scheduler": "slurm", "job_id": job.job_id, "user": job.user}
                owner = {**labels, **owner, "account": job.account}
                w.add("nvwatch_gpu_allocation_info", owner, 1.0, at)
        if STRAGGLER_FROM <= t - JOB_A.start <= STRAGGLER_UNTIL:
            w.add("ALERTS", STRAGGLER_ALERT, 1.0, at)
        for node, watts in NODE_WATTS.items():
            bmc = {"job": "nvwatch-bmc", "instance": node, "sensor": "dcmi", "method": "dcmi"}
            w.add("nvwatch_bmc_power_watts", bmc, watts, at)
            port = {"job": "nvwatch", "cluster": "c1", "instance": node}
            port = {**port, "device": "mlx5_0", "port": "1"}
            for way in ("transmit", "receive"):
                w.add(f"nvwatch_ib_port_{way}_bytes", port, 5.0e9, at)  # flat: the fabric idle
    w.write(path)
