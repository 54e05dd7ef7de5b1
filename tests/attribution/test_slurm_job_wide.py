"""A job's user and account reach every GPU the job holds on the node, also a GPU only the
mapping file names (nothing of the job runs on it: the idle GPU the jobs dashboard and
NvwatchGpuAllocatedIdle are about)."""

from __future__ import annotations

from pathlib import Path

from nvwatch.agent.sources.attribution.model import GpuRef, Owner
from nvwatch.agent.sources.attribution.procfs import ProcFS
from nvwatch.agent.sources.attribution.slurm import SlurmResolver
from tests.attribution.conftest import ProcTree, Spawn


def test_a_mapped_gpu_without_processes_gets_the_jobs_user(
    tmp_path: Path, proc_tree: ProcTree, spawn: Spawn
) -> None:
    mapping = tmp_path / "map"
    mapping.mkdir()
    # job 51 holds GPUs 0 and 1 and runs only on 0; job 52 holds GPU 2 and runs nowhere
    for gpu, job in (("0", "51"), ("1", "51"), ("2", "52")):
        (mapping / gpu).write_text(job + "\n")
    pid = spawn().pid
    env = {"SLURM_JOB_ID": "51", "SLURM_JOB_USER": "alice", "SLURM_JOB_ACCOUNT": "physics"}
    proc_tree.add(pid, "0::/user.slice", environ=env)
    gpus = [GpuRef(0, "GPU-0", (pid,)), GpuRef(1, "GPU-1"), GpuRef(2, "GPU-2")]
    found = SlurmResolver(ProcFS(proc_tree.root), mapping).resolve(gpus)
    assert found.error is None
    alice = Owner("slurm", "51", "alice", "physics")
    assert [(a.uuid, a.owner) for a in found.allocations] == [
        ("GPU-0", alice),
        ("GPU-1", alice),
        # nothing of job 52 ran anywhere on the node: the mapping file's job id only
        ("GPU-2", Owner("slurm", "52")),
    ]
    assert dict(found.pid_owners) == {pid: alice}
