"""The simulated Slurm's client output is a real slurmctld's: the same queue asked of both
(a running GPU job, one pending for resources, one held; then the node drained),
`squeue --json` and `sinfo --json` have the same document, the same keys with the same
JSON types on every record the simulation writes, and the same values where the request
fixes them (state, reason, GPU request, GPUs held, the node's GRES, state and reason);
`sshare` of a cluster without accounting prints the same header and nothing else."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

import pytest

from nvwatch.sim.queue.jobs import DRAINED, Account, JobRequest, Partition, SlurmNode
from nvwatch.sim.queue.model import QueueModel
from nvwatch.sim.queue.slurm_out import sinfo_json, squeue_json, sshare_text
from tests.conftest import require_tool
from tests.slurm.cluster import slurm_cluster

pytestmark = pytest.mark.timeout(300)
REASON = "ECC DBE on GPU 1"
SSHARE = (
    "sshare",
    "--all",
    "--parsable2",
    "--format=Account,User,NormShares,EffectvUsage,FairShare",
)

Printed = dict[str, Any]


@pytest.fixture(scope="module")
def real() -> Iterator[Printed]:
    for tool in ("munged", "slurmctld", "slurmd", "sbatch"):
        require_tool(tool)
    if os.geteuid() != 0:
        pytest.skip("the real-Slurm test runs slurmd as root")
    with slurm_cluster("linuxproc") as cluster:
        common = ("--parsable", "--time=10", "--uid=nobody", "--gid=nogroup")
        where = f"--chdir={cluster.out_dir}"
        running = cluster.run("sbatch", *common, where, "--gres=gpu:1", "--wrap", "sleep 120")
        cluster.run("sbatch", *common, where, "--gres=gpu:2", "--wrap", "sleep 120")
        cluster.run("sbatch", *common, where, "--hold", "--gres=gpu:1", "--wrap", "sleep 120")
        cluster.wait_for("a job running", lambda: cluster.job_state(running) == "RUNNING", 60)
        queue = json.loads(cluster.run("squeue", "--json"))  # before the drain moves reasons
        cluster.run(
            "scontrol", "update", f"nodename={cluster.host}", "state=drain", f"reason={REASON}"
        )
        yield {
            "squeue": queue,
            "sinfo": json.loads(cluster.run("sinfo", "--json")),
            "sshare": cluster.run(*SSHARE),
            "host": cluster.host,
        }


@pytest.fixture(scope="module")
def simulated(real: Printed) -> Printed:
    """The same queue in the model: its one node, named as the real one, with 2 GPUs."""
    host = real["host"]
    model = QueueModel(
        [SlurmNode(host, 2)], [Partition("debug", (host,))], [Account("")], start=0.0,
        accounting=False,
    )  # fmt: skip
    fields = {"account": "", "user": "nobody", "partition": "debug", "nodes": 1, "run_s": 120.0,
              "time_limit_s": 600.0}  # fmt: skip
    model.submit(JobRequest(1, gpus_per_node=1, submit=0.0, **fields))  # type: ignore[arg-type]
    model.submit(JobRequest(2, gpus_per_node=2, submit=0.0, **fields))  # type: ignore[arg-type]
    held = JobRequest(3, gpus_per_node=1, submit=0.0, hold_until=math.inf, **fields)  # type: ignore[arg-type]
    model.submit(held)
    model.advance(5.0)
    queue = json.loads(squeue_json(model, time_offset=1.7e9))
    model.set_node(5.0, host, DRAINED, REASON)
    model.advance(10.0)
    return {
        "squeue": queue,
        "sinfo": json.loads(sinfo_json(model)),
        "sshare": sshare_text(model).strip(),
    }


def _same_shape(sim: dict[str, Any], real: dict[str, Any], what: str) -> None:
    missing = set(sim) - set(real)
    assert not missing, f"{what}: keys a real 22.05 does not print: {sorted(missing)}"
    for key, value in sim.items():
        assert type(value) is type(real[key]), f"{what}.{key}: {value!r} vs real {real[key]!r}"


def test_the_documents_are_the_same(real: Printed, simulated: Printed) -> None:
    for command, records in (("squeue", "jobs"), ("sinfo", "nodes")):
        assert set(simulated[command]) == set(real[command]) == {"meta", "errors", records}
        assert simulated[command]["meta"] == real[command]["meta"]
        assert simulated[command]["errors"] == real[command]["errors"] == []


def test_each_job_record_reads_as_a_real_one(real: Printed, simulated: Printed) -> None:
    by_id = {job["job_id"]: job for job in real["squeue"]["jobs"]}
    assert len(by_id) == 3
    for job in simulated["squeue"]["jobs"]:
        twin = by_id[job["job_id"]]  # submitted in the same order: the same ids
        _same_shape(job, twin, f"job {job['job_id']}")
        for key in ("job_state", "state_reason", "tres_per_node", "tres_per_job", "gres_detail",
                    "node_count", "tasks", "partition", "user_name", "time_limit", "nodes",
                    "array_task_string"):  # fmt: skip
            assert job[key] == twin[key], (job["job_id"], key)
        # set or not set alike (a held job is not eligible: 0)
        for key in ("eligible_time", "start_time", "end_time", "submit_time"):
            assert bool(job[key]) == bool(twin[key]), (job["job_id"], key)
    states = [(j["job_state"], j["state_reason"]) for j in simulated["squeue"]["jobs"]]
    assert states == [("PENDING", "Resources"), ("PENDING", "JobHeldUser"), ("RUNNING", "None")]


def test_the_node_record_reads_as_a_real_one(real: Printed, simulated: Printed) -> None:
    (node,), (twin,) = simulated["sinfo"]["nodes"], real["sinfo"]["nodes"]
    _same_shape(node, twin, "node")
    for key in ("name", "state", "state_flags", "gres", "gres_used", "reason", "partitions"):
        assert node[key] == twin[key], key
    assert (node["state"], node["state_flags"]) == ("mixed", ["DRAIN"])


def test_sshare_without_accounting_is_its_header_alone(real: Printed, simulated: Printed) -> None:
    assert simulated["sshare"] == real["sshare"] == "Account|User|NormShares|EffectvUsage|FairShare"
