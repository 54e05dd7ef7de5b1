"""The queue tests/slurm/test_scheduler_source.py runs the scheduler source against.

A node with 5 typed fake GPUs and 8 CPUs in partitions `gpu` and `shared`, a second node
in `shared` that never starts; jobs asking for GPUs every way Slurm takes, with the test's
own record of what each asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.slurm.cluster import Cluster, Layout

LAYOUT = Layout(
    gpus=5, gpu_type="fake", cpus=8, partitions=("gpu", "shared"), down_nodes=(("ghost", 2),)
)
ODD_ACCOUNT = 'od"d|acc\\t{x}é'


@dataclass(frozen=True)
class Asked:
    """What the test submitted: per array task (or job), its GPUs."""

    account: str
    gpus: int


@dataclass
class Queue:
    cluster: Cluster
    asked: dict[str, Asked]  # job id -> request
    names: dict[str, str]  # the test's name of a job -> its id


def _sbatch(cluster: Cluster, account: str, gpus: int, *flags: str) -> tuple[str, Asked]:
    job = cluster.run(
        "sbatch", "--parsable", "--output=/dev/null", f"--account={account}", *flags,
        "--wrap=sleep 600",
    ).split(";")[0]  # fmt: skip
    return job, Asked(account, gpus)


def submit_queue(cluster: Cluster) -> Queue:
    """Jobs in submission order (priority/basic: the earlier, the higher): the first four
    fill the node's 5 GPUs, the rest wait."""
    plan: list[tuple[str, str, int, tuple[str, ...]]] = [
        ("array", "alpha", 1, ("--array=0-5%1", "--gres=gpu:1", "--partition=shared")),
        ("typed", "alpha", 1, ("--gres=gpu:fake:1",)),
        ("per_node", "beta", 1, ("--gpus-per-node=1",)),
        ("per_task", "beta", 1, ("--gpus-per-task=1", "--ntasks=2")),
        ("cpu_only", "alpha", 0, ("--ntasks=1",)),
        ("per_job", "alpha", 2, ("--gpus=2",)),
        ("queued", "beta", 1, ("--gres=gpu:1",)),
        ("held", ODD_ACCOUNT, 1, ("--hold", "--gpus=1")),
        ("nobody", "alpha", 1, ("--hold", "--gpus=1", "--uid=nobody", "--gid=nogroup",
                                "--chdir=/tmp")),
        ("tasks", "gamma", 1, ("--array=0-3", "--gres=gpu:1")),
        ("either", "beta", 1, ("--partition=gpu,shared", "--gres=gpu:1")),
    ]  # fmt: skip
    asked: dict[str, Asked] = {}
    names: dict[str, str] = {}
    for name, account, gpus, flags in plan:
        per_task = 2 if name == "per_task" else gpus  # --gpus-per-task=1 times 2 tasks
        job, request = _sbatch(cluster, account, per_task, *flags)
        asked[job], names[name] = request, job
    job, asked[job] = _sbatch(
        cluster, "gamma", 2, f"--dependency=afterok:{names['typed']}", "--gpus-per-node=2"
    )
    names["after"] = job
    cluster.wait_for("the first four running", lambda: _running_count(cluster) == 5)
    cluster.wait_for("every pending reason set", lambda: "None" not in _pending_reasons(cluster))
    return Queue(cluster, asked, names)


def _running_count(cluster: Cluster) -> int:
    return len(cluster.run("squeue", "-h", "-t", "R", "-o", "%i").split())


def _pending_reasons(cluster: Cluster) -> list[str]:
    return cluster.run("squeue", "-h", "-t", "PD", "-o", "%r").splitlines()
