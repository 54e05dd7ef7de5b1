"""A real Slurm job on a simulated GPU, attributed by each way this machine supports.

Debian's slurm-wlm and munge run a one-node cluster on 127.0.0.1 (cluster.py); a job
submitted with `sbatch --gres=gpu:1` as user nobody runs `sleep`, the simulated NVML is
told (NVWATCH_SIM_PROCESS_FILE's format) that this real pid uses the GPU Slurm gave the
job, and the agent, reading the real /proc, must name the job and its user:

- cgroup: with proctrack/cgroup the job's processes sit in
  `/slurm_<host>/uid_<uid>/job_<id>/...` (cgroup v1; this machine has no usable v2);
- mapping directory: written by deploy/slurm's prolog, which slurmd runs for the job;
- environment: with proctrack/linuxproc no cgroup names the job, its environment does.

When the job ends its process exits and the epilog removes its mapping file: the
allocation series goes away.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from nvwatch.agent.config import AgentConfig
from nvwatch.agent.sources.scheduler.fairshare import read_fairshare
from tests.attribution.test_agent import Series, poll_until, running_agent
from tests.conftest import require_tool
from tests.slurm.cluster import Cluster, slurm_cluster

pytestmark = pytest.mark.timeout(300)


@dataclass(frozen=True)
class Job:
    id: str
    pid: int  # the job's `sleep`
    gpu: int  # the node GPU index Slurm allocated (SLURM_JOB_GPUS)


def _need_slurm() -> None:
    for tool in ("munged", "slurmctld", "slurmd", "sbatch"):
        require_tool(tool)
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the real-Slurm test runs slurmd as root")
        pytest.skip("the real-Slurm test runs slurmd as root")


def submit(cluster: Cluster) -> Job:
    """sbatch a GPU job as nobody; its shell records its pid and GPU, then becomes sleep."""
    out = cluster.out_dir
    script = (
        f'echo "$SLURM_JOB_GPUS" > {out}/gpu.$SLURM_JOB_ID; '
        f"echo $$ > {out}/pid.$SLURM_JOB_ID; exec sleep 300"
    )
    job = cluster.run(
        "sbatch",
        "--parsable",
        "--gres=gpu:1",
        "--uid=nobody",
        "--gid=nogroup",
        "--chdir=/tmp",
        "--output=/dev/null",
        f"--wrap={script}",
    ).split(";")[0]
    pid_file = out / f"pid.{job}"
    cluster.wait_for(f"job {job} running", lambda: pid_file.exists() and pid_file.read_text())
    pid = int(pid_file.read_text())
    gpu_file = out / f"gpu.{job}"
    cluster.wait_for("the job's GPU", lambda: gpu_file.exists() and gpu_file.read_text())
    cluster.wait_for(f"pid {pid} exec'd sleep", lambda: _comm(pid) == "sleep")
    return Job(job, pid, int(gpu_file.read_text().strip()))


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _allocations(series: Series) -> list[tuple[str, str, str]]:
    return [
        (x["gpu"], x["job_id"], x["user"]) for x, _ in series.get("nvwatch_gpu_allocation_info", [])
    ]


def _owned(job: Job) -> list[tuple[str, str, str]]:
    """The allocation series the job should have: its GPU, its id, user nobody."""
    return [(str(job.gpu), job.id, "nobody")]


def _job_of_pid(series: Series, pid: int) -> str | None:
    rows = series.get("nvwatch_gpu_process_memory_bytes", [])
    return next((x["job"] for x, _ in rows if x["pid"] == str(pid)), None)


def _config(tmp_path: Path, job: Job, **extra: object) -> AgentConfig:
    processes = tmp_path / "gpu-processes"
    processes.write_text(f"{job.gpu} {job.pid} 2048\n")
    return replace(
        AgentConfig(
            simulate="dgx-h100",
            sources=("nvml",),
            sim_process_file=processes,
            attribution=("slurm",),
            attribution_interval=1.0,
        ),
        **extra,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def cgroup_cluster() -> Iterator[Cluster]:
    _need_slurm()
    with slurm_cluster("cgroup") as cluster:
        yield cluster


def test_cgroup_path_names_the_job_and_user(cgroup_cluster: Cluster, tmp_path: Path) -> None:
    job = submit(cgroup_cluster)
    try:
        cgroup = Path(f"/proc/{job.pid}/cgroup").read_text()
        assert f"/slurm_{cgroup_cluster.host}/uid_65534/job_{job.id}/" in cgroup
        # only the cgroup way: no mapping directory; the real /proc
        with running_agent(_config(tmp_path, job)) as agent:
            series = poll_until(
                agent,
                lambda s: _job_of_pid(s, job.pid) == job.id and _allocations(s) == _owned(job),
            )
        assert _allocations(series) == [(str(job.gpu), job.id, "nobody")]
        assert _job_of_pid(series, job.pid) == job.id
    finally:
        cgroup_cluster.run("scancel", job.id)
        cgroup_cluster.wait_for(f"job {job.id} gone", lambda: not _comm(job.pid))


def test_the_real_prolog_mapping_directory_names_the_job_until_it_ends(
    cgroup_cluster: Cluster, tmp_path: Path
) -> None:
    job = submit(cgroup_cluster)
    map_file = cgroup_cluster.map_dir / str(job.gpu)
    assert map_file.read_text().split() == [job.id]  # written by deploy/slurm's prolog
    # only the mapping way: a /proc root that knows no process
    empty_proc = tmp_path / "no-proc"
    empty_proc.mkdir()
    config = _config(
        tmp_path, job, proc_root=empty_proc, hpc_job_mapping_dir=cgroup_cluster.map_dir
    )
    with running_agent(config) as agent:
        series = poll_until(agent, lambda s: bool(_allocations(s)))
        assert _allocations(series) == [(str(job.gpu), job.id, "")]
        cgroup_cluster.run("scancel", job.id)
        cgroup_cluster.wait_for("the epilog", lambda: not map_file.exists())
        series = poll_until(agent, lambda s: not _allocations(s))
    assert _allocations(series) == []


def test_all_ways_together_and_the_series_ends_with_the_job(
    cgroup_cluster: Cluster, tmp_path: Path
) -> None:
    job = submit(cgroup_cluster)
    config = _config(tmp_path, job, hpc_job_mapping_dir=cgroup_cluster.map_dir)
    with running_agent(config) as agent:
        series = poll_until(
            agent, lambda s: _job_of_pid(s, job.pid) == job.id and _allocations(s) == _owned(job)
        )
        # seen by the cgroup and the mapping file: one owner, the user from the cgroup
        assert _allocations(series) == [(str(job.gpu), job.id, "nobody")]
        cgroup_cluster.run("scancel", job.id)
        series = poll_until(agent, lambda s: not _allocations(s), limit=30)
    assert _allocations(series) == []
    assert "nvwatch_gpu_up" in series  # the GPU stays; only its owner went


@pytest.fixture(scope="module")
def linuxproc_cluster() -> Iterator[Cluster]:
    _need_slurm()
    with slurm_cluster("linuxproc") as cluster:
        yield cluster


def test_environment_names_the_job_where_no_cgroup_does(
    linuxproc_cluster: Cluster, tmp_path: Path
) -> None:
    job = submit(linuxproc_cluster)
    try:
        assert "job_" not in Path(f"/proc/{job.pid}/cgroup").read_text()
        with running_agent(_config(tmp_path, job)) as agent:
            series = poll_until(
                agent,
                lambda s: _job_of_pid(s, job.pid) == job.id and _allocations(s) == _owned(job),
            )
        assert _allocations(series) == [(str(job.gpu), job.id, "nobody")]
    finally:
        linuxproc_cluster.run("scancel", job.id)
        linuxproc_cluster.wait_for(f"job {job.id} gone", lambda: not _comm(job.pid))


def test_without_accounting_there_is_no_fair_share(linuxproc_cluster: Cluster) -> None:
    """accounting_storage/none: sshare prints its header and no row; that is None, not an
    error, and not a table of zeros."""
    assert linuxproc_cluster.run("sshare", "--all", "--parsable2").splitlines()[1:] == []
    assert read_fairshare(10.0, linuxproc_cluster.env) is None
