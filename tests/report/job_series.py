"""Series of two jobs written by hand, as the agents and a BMC probe would export them,
for `nvwatch job` against a real Prometheus (promtool backfills them).

Two 8-GPU nodes of cluster c1, samples every STEP_S. Job 4711 (alice, ml) holds every
GPU of n1 and GPUs 0-3 of n2 for an hour; job 4712 (bob, cv) holds n2's GPUs 4-7 for half
an hour inside it, and job 4800 (carol) the same four GPUs later. The same Prometheus
holds cluster c2 (a global view, as Thanos or federation gives one): its one 4-GPU node is
also named n1, and its Slurm numbers jobs on its own, so it ran a job 4800 too (dave);
its agent stopped answering for a while inside that job (C2_OUTAGE). Job 4900 (erin) ran
twice under its id, as Slurm runs a requeued job: on n2's GPUs 4-7 first, then on n1's
GPUs 0-1 after 4711 had ended.
Every figure below is a constant or a simple pattern, so the tests' expected values are
arithmetic on these constants, not the code's.
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
    cluster: str = "c1"


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
JOB_C1 = Job("4800", "carol", "ml", tuple(("n2", g) for g in range(4, 8)), 3300, 4200)
JOB_C2 = Job("4800", "dave", "bio", tuple(("n1", g) for g in range(4)), 2400, 4200, "c2")
JOB_R1 = Job("4900", "erin", "ml", tuple(("n2", g) for g in range(4, 8)), 0, 600)
JOB_R2 = Job("4900", "erin", "ml", (("n1", 0), ("n1", 1)), 4200, 4800)
JOBS = (JOB_A, JOB_B, JOB_C1, JOB_C2, JOB_R1, JOB_R2)
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
# cluster c2: one 4-GPU node named like one of c1's, 30 % busy, its own BMC reading, and
# InfiniBand that moves C2_IB_BYTES_PER_S each way while its job runs
C2_PLANS = {("n1", g): GpuPlan(0.3, 200.0, 50.0, 60.0) for g in range(4)}
C2_NODE_WATTS = {"n1": 7000.0}
C2_GPU_NAME = "NVIDIA A100-SXM4-80GB"
C2_IB_BYTES_PER_S = 1.0e8
# c2's agent reported nothing in (from, until]: no GPU series, no port; its BMC answered
C2_OUTAGE = (3600, 4000)
CLUSTERS = {
    "c1": (PLANS, NODE_WATTS, GPU_NAME),
    "c2": (C2_PLANS, C2_NODE_WATTS, C2_GPU_NAME),
}
# the rules found n2/1 (capped) holding job 4711 back for a while, as Prometheus records
# a firing alert; job 4712 had none
STRAGGLER_ALERT = {
    "alertname": "NvwatchJobStraggler",
    "alertstate": "firing",
    "severity": "warning",
    "cluster": "c1",
    "job_id": "4711",
    "instance": "n2",
    "gpu": "1",
    "cause": "power-capped",
}
STRAGGLER_FROM, STRAGGLER_UNTIL = 300, 900
# c2's job 4800 had one, while c1's job 4800 ran: c1's must not take it for its own
C2_STRAGGLER_ALERT = {
    **STRAGGLER_ALERT,
    "cluster": "c2",
    "job_id": "4800",
    "instance": "n1",
    "gpu": "2",
    "cause": "thermal",
}
C2_STRAGGLER_FROM, C2_STRAGGLER_UNTIL = 3400, 3800  # seconds after the first sample


def job_of(cluster: str, node: str, gpu: int, t: int) -> Job | None:
    for job in JOBS:
        # a sample stands for the interval before it: the job's are those in (start, end]
        if job.cluster == cluster and (node, gpu) in job.gpus and job.start < t <= job.end:
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
    energy = {(c, *key): 1.0e6 for c, (plans, _, _) in CLUSTERS.items() for key in plans}
    for t in range(0, SPAN_S + 1, STEP_S):
        for cluster in CLUSTERS:
            down = cluster == "c2" and C2_OUTAGE[0] < t <= C2_OUTAGE[1]
            _write_gpus(w, cluster, energy, first, t, down)
            _write_nodes(w, cluster, first, t, down)
        if STRAGGLER_FROM <= t - JOB_A.start <= STRAGGLER_UNTIL:
            w.add("ALERTS", STRAGGLER_ALERT, 1.0, first + t)
        if C2_STRAGGLER_FROM <= t <= C2_STRAGGLER_UNTIL:
            w.add("ALERTS", C2_STRAGGLER_ALERT, 1.0, first + t)
    w.write(path)


def _write_gpus(
    w: SeriesWriter,
    cluster: str,
    energy: dict[tuple[str, str, int], float],
    first: float,
    t: int,
    down: bool,
) -> None:
    plans, _, gpu_name = CLUSTERS[cluster]
    at = first + t
    for (node, gpu), plan in plans.items():
        job = job_of(cluster, node, gpu, t)
        running = plan if job is not None else IDLE
        labels = {"job": "nvwatch", "cluster": cluster, "instance": node, "gpu": str(gpu)}
        middle = job is not None and t == (job.start + job.end) // 2 // STEP_S * STEP_S
        memory = running.memory_peak_gib if middle else running.memory_gib
        key = (cluster, node, gpu)
        if t > 0:
            energy[key] += running.watts * STEP_S  # the GPU ran on while nobody asked
        if down:
            continue
        if job is not None and running.counter_reset and t == job.start + 1800:
            energy[key] = running.watts * STEP_S  # a driver reload: from zero
        capped = job is not None and t - job.start < running.power_cap_share * (job.end - job.start)
        w.add("nvwatch_gpu_utilization_ratio", labels, running.util, at)
        w.add("nvwatch_gpu_memory_used_bytes", labels, memory * GIB, at)
        w.add("nvwatch_gpu_memory_total_bytes", labels, float(MEMORY_TOTAL), at)
        w.add("nvwatch_gpu_power_watts", labels, running.watts, at)
        w.add("nvwatch_gpu_power_limit_watts", labels, POWER_LIMIT_W, at)
        w.add("nvwatch_gpu_energy_joules", labels, energy[key], at)
        reason = {**labels, "reason": "sw_power_cap"}
        w.add("nvwatch_gpu_clock_event_active", reason, 1.0 if capped else 0.0, at)
        w.add("nvwatch_gpu_info", {**labels, "name": gpu_name}, 1.0, at)
        if job is not None:
            owner = {"scheduler": "slurm", "job_id": job.job_id, "user": job.user}
            owner = {**labels, **owner, "account": job.account}
            w.add("nvwatch_gpu_allocation_info", owner, 1.0, at)


def _write_nodes(w: SeriesWriter, cluster: str, first: float, t: int, down: bool) -> None:
    """Each node's BMC input power and its one InfiniBand port: c1's fabric idle, c2's
    moving while its job runs (a port on either cluster is n1/mlx5_0/1)."""
    _, node_watts, _ = CLUSTERS[cluster]
    for node, watts in node_watts.items():
        bmc = {"job": "nvwatch-bmc", "cluster": cluster, "instance": node}
        bmc = {**bmc, "sensor": "dcmi", "method": "dcmi"}
        w.add("nvwatch_bmc_power_watts", bmc, watts, first + t)
        if down:
            continue
        port = {"job": "nvwatch", "cluster": cluster, "instance": node}
        port = {**port, "device": "mlx5_0", "port": "1"}
        moved = 0.0
        if cluster == "c2":
            busy = min(max(t, JOB_C2.start), JOB_C2.end) - JOB_C2.start
            moved = busy * C2_IB_BYTES_PER_S
        for way in ("transmit", "receive"):
            w.add(f"nvwatch_ib_port_{way}_bytes", port, 5.0e9 + moved, first + t)
