"""Simulated Slurm jobs on a fleet: the --job syntax, its checks, and what each node's
simulated Slurm writes for the agent (the dcgm-exporter mapping files, the workers' /proc)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvwatch.agent.config import AgentConfig
from nvwatch.agent.sources.attribution.mapping_dir import read_mapping_dir
from nvwatch.agent.sources.attribution.model import GpuRef, Owner
from nvwatch.agent.sources.attribution.procfs import ProcFS
from nvwatch.agent.sources.attribution.slurm import SlurmResolver
from nvwatch.sim.fleet.jobs import FIRST_JOB_ID, FleetJob, NodeJobs, check_jobs, parse_job
from nvwatch.sim.fleet.plan import FleetError


@pytest.mark.parametrize(
    ("text", "number", "expected"),
    [
        ("0:0-3,user=alice,account=ml", 0, FleetJob(0, (0, 1, 2, 3), "1001", "alice", "ml")),
        ("12:5", 2, FleetJob(12, (5,), str(FIRST_JOB_ID + 2), "user2", "")),
        (" 3 : all , id=77 ", 0, FleetJob(3, None, "77", "user0", "")),
    ],
)
def test_job_specs_parse(text: str, number: int, expected: FleetJob) -> None:
    assert parse_job(text, number) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "invalid fleet job '0': use NODE:GPUS"),
        ("a:0", "use NODE:GPUS"),
        ("0:3-1", "GPU range 3-1 runs backwards"),
        ("0:0,usr=x", "unknown option 'usr=x'"),
        ("0:0,user=a b", "user='a b' is not a plain name"),
        ("0:0,user=", "user='' is not a plain name"),
    ],
)
def test_bad_job_specs_are_one_line(text: str, message: str) -> None:
    with pytest.raises(FleetError, match=message.replace("(", r"\(")) as err:
        parse_job(text, 0)
    assert "\n" not in str(err.value)


def test_jobs_are_checked_against_the_fleet() -> None:
    gpus = [8, 4]
    check_jobs([FleetJob(1, (3,), "1", "a"), FleetJob(0, None, "2", "b")], gpus)
    with pytest.raises(FleetError, match=r"node 2: the fleet has nodes 0\.\.1"):
        check_jobs([FleetJob(2, (0,), "1", "a")], gpus)
    with pytest.raises(FleetError, match=r"no GPU 4 \(the node has GPUs 0\.\.3\)"):
        check_jobs([FleetJob(1, (3, 4), "1", "a")], gpus)
    with pytest.raises(FleetError, match="job id 1 is given to two jobs"):
        check_jobs([FleetJob(0, (0,), "1", "a"), FleetJob(1, (0,), "1", "b")], gpus)


def test_a_nodes_jobs_read_back_as_the_slurm_resolver_sees_them(tmp_path: Path) -> None:
    """Two jobs share GPU 1; job 7 also holds GPU 0, whose worker is its only process the
    resolver gets to see; job 8's GPU 1 worker belongs to job 7 (the first), so job 8 is
    known from the mapping file only."""
    jobs = NodeJobs(
        tmp_path,
        [FleetJob(0, (0, 1), "7", "alice", "ml"), FleetJob(0, (1,), "8", "bob")],
        gpu_count=2,
        worker_pid=lambda gpu: 4000 + gpu,
    )
    jobs.write()
    files = {(m.gpu, m.job_ids) for m in read_mapping_dir(jobs.mapping_dir)}
    assert files == {(0, ("7",)), (1, ("7", "8"))}
    found = SlurmResolver(ProcFS(jobs.proc_root), jobs.mapping_dir).resolve(
        [GpuRef(0, "GPU-0", (4000,)), GpuRef(1, "GPU-1")]
    )
    alice = Owner("slurm", "7", "alice", "ml")
    assert [(a.gpu, a.owner) for a in found.allocations] == [
        (0, alice),
        (1, alice),
        (1, Owner("slurm", "8")),
    ]
    config = jobs.agent_config(AgentConfig(interval=2.0))
    assert config.attribution == ("slurm",)
    assert (config.hpc_job_mapping_dir, config.proc_root) == (jobs.mapping_dir, jobs.proc_root)
    assert config.attribution_interval == 2.0


def test_simulate_fleet_bad_jobs_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from nvwatch.agent.cli import main

    for job, message in (
        ("0:9", "job 1001 on node 0: no GPU 9 (the node has GPUs 0..7)"),
        ("5:0", "job 1001 on node 5: the fleet has nodes 0..1"),
        ("0", "invalid fleet job '0'"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["simulate", "fleet", "--profile", "dgx1-v100:2", "--job", job])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err
