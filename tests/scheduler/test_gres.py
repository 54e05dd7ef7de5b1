"""GPU counts in the GRES and TRES strings Slurm writes, in the forms each release uses.

The 22.05 forms are what the real Slurm of tests/slurm printed (node gres and gres_used,
a running job's gres_detail, a job's tres_per_* fields); the `gres/` and `=` forms and
the object-valued numbers are those of later releases' JSON.
"""

from __future__ import annotations

import json

import pytest

from nvwatch.agent.sources.scheduler.gres import GpuRequest, array_tasks, gpus_in
from nvwatch.agent.sources.scheduler.slurm_commands import SchedulerError
from nvwatch.agent.sources.scheduler.slurm_json import parse_jobs, parse_nodes


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("gpu:2", 2),
        ("gpu:fake:4", 4),
        ("gpu:fake:4(IDX:0-3)", 4),
        ("gpu:fake:0(IDX:N/A)", 0),
        ("gpu:fake(CNT:2)", 2),  # a job's GPUs on a node whose indices Slurm does not know
        ("gpu:a100:4(S:0-1),gpu:v100:2(S:1)", 6),
        ("gpu:a100:1(IDX:0,2),mps:100", 1),  # the comma inside IDX is no new entry
        ("gres:gpu:1", 1),
        ("gres:gpu:fake:3", 3),
        ("gres/gpu:2", 2),
        ("gres/gpu=2", 2),
        ("gres/gpu:a100=3", 3),
        ("gres:gpu", 1),
        ("gres:shard:4,gres:mps:50", 0),
        ("", 0),
        ("N/A", 0),
    ],
)
def test_gpus_in_every_form(text: str, gpus: int) -> None:
    assert gpus_in(text) == gpus


def test_a_request_is_per_node_times_nodes_per_task_times_tasks_and_per_job_as_is() -> None:
    assert GpuRequest(per_node="gres:gpu:2").total(nodes=3, tasks=1, sockets_per_node=0) == 6
    assert GpuRequest(per_task="gres:gpu:1").total(nodes=1, tasks=4, sockets_per_node=0) == 4
    assert GpuRequest(per_job="gres:gpu:5").total(nodes=2, tasks=8, sockets_per_node=0) == 5
    assert GpuRequest(per_socket="gres:gpu:1").total(nodes=2, tasks=1, sockets_per_node=2) == 4
    assert GpuRequest().total(nodes=4, tasks=4, sockets_per_node=2) == 0


@pytest.mark.parametrize(
    ("spec", "tasks"),
    [("1-10%2", 10), ("0-3", 4), ("1,3,5-9:2", 5), ("7", 1), ("", 1), ("x-y", 1), ("9-1", 1)],
)
def test_array_tasks(spec: str, tasks: int) -> None:
    assert array_tasks(spec) == tasks


def test_later_releases_numbers_and_states_read_as_22_05s() -> None:
    later = {
        "jobs": [
            {
                "job_id": 7,
                "job_state": ["RUNNING"],
                "partition": "gpu",
                "account": "a",
                "user_name": "u",
                "state_reason": "None",
                "gres_detail": ["gpu:a100:2(IDX:0-1)"],
                "tres_per_node": "gres/gpu:2",
                "node_count": {"set": True, "infinite": False, "number": 1},
                "submit_time": {"set": True, "infinite": False, "number": 100},
                "eligible_time": {"set": True, "infinite": False, "number": 110},
                "start_time": {"set": True, "infinite": False, "number": 150},
                "end_time": {"set": True, "infinite": False, "number": 9999},
                "nodes": "n1",
            }
        ]
    }
    (job,) = parse_jobs(json.dumps(later))
    assert (job.gpus, job.eligible_time, job.start_time, job.end_time) == (2, 110, 150, None)
    (node,) = parse_nodes(
        json.dumps(
            {"nodes": [{"name": "n1", "state": ["MIXED", "DRAIN"], "gres": "gpu:a100:4",
                        "gres_used": "gpu:a100:2(IDX:0-1)", "partitions": ["gpu"]}]}
        )
    )  # fmt: skip
    assert node.states == {"MIXED", "DRAIN"} and (node.gpus, node.gpus_allocated) == (4, 2)


def test_a_job_cancelled_while_pending_never_started() -> None:
    cancelled = {"job_id": 3, "job_state": "CANCELLED", "start_time": 200, "end_time": 200,
                 "nodes": "", "batch_host": "", "tres_per_job": "gres:gpu:1"}  # fmt: skip
    (job,) = parse_jobs(json.dumps({"jobs": [cancelled]}))
    assert job.start_time is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[]", "squeue --json printed no object"),
        ('{"jobs": {}}', "squeue --json printed no 'jobs' list"),
        ('{"jobs": [3]}', "squeue --json: jobs entry 0 is unreadable"),
        ('{"jobs": [{"job_id": "x", "job_state": "RUNNING"}]}', "squeue --json: jobs entry 0"),
        ("[" * 100_000, "squeue --json printed something that is not JSON"),
    ],
)
def test_json_of_another_shape_is_one_line(text: str, reason: str) -> None:
    with pytest.raises(SchedulerError) as failed:
        parse_jobs(text)
    assert str(failed.value).startswith(reason)
    assert "\n" not in str(failed.value)
