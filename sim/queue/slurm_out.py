"""What a simulated Slurm's client commands print: `squeue --json`, `sinfo --json` and
`sshare --all --parsable2`, from a queue model (model.py).

As the simulated NVML sits below the real pynvml, these sit below the real scheduler
source: the fleet (sim/fleet/slurm.py) puts executables named squeue, sinfo and sshare on the
controller agent's PATH that print these texts, and the source runs, times and parses
them as it does Slurm's own. The JSON is Debian's 22.05 (OpenAPI v0.0.38): the same keys
and value types as a real slurmctld's answer (tests/slurm check them against one), with
the values of the model: times in Unix seconds (0: not set), a job's GPU request as
`--gres=gpu:N` writes it (`tres_per_node` "gres:gpu:N"), a running job's GPUs per node in
`gres_detail` ("gpu:N(IDX:...)"), a node's GRES and those in use, its state and flags (a
drained node: DRAIN; a reserved one: RESERVED), its reason. squeue lists jobs that ended
within MinJobAge, as Slurm does.

`time_offset` turns the model's clock into Unix time (0 when it already is).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from nvwatch.sim.queue.jobs import DOWN, DRAINED, RESERVED, SLURM_REASONS, Job, SlurmNode
from nvwatch.sim.queue.model import QueueModel

META = {
    "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"},
}
SSHARE_HEADER = "Account|User|NormShares|EffectvUsage|FairShare"


def squeue_json(model: QueueModel, time_offset: float = 0.0) -> str:
    """`squeue --json`: pending and running jobs, and those ended within MinJobAge."""
    jobs = [
        *(_pending(job, time_offset) for job in _by_id(model.pending.values())),
        *(_started(job, time_offset, "RUNNING") for job in _by_id(model.running.values())),
        *(_started(job, time_offset, "COMPLETED") for job in model.recently_ended()),
    ]
    return _document({"jobs": jobs})


def sinfo_json(model: QueueModel) -> str:
    """`sinfo --json`: every node with its partitions, GRES, state and reason."""
    member: dict[str, list[str]] = {}
    for partition in model.partitions.values():
        for node in partition.nodes:
            member.setdefault(node, []).append(partition.name)
    nodes = [_node(node, member.get(node.name, [])) for node in model.nodes.values()]
    return _document({"nodes": nodes})


def sshare_text(model: QueueModel) -> str:
    """`sshare --all --parsable2 --format=Account,User,NormShares,EffectvUsage,FairShare`
    of classic multifactor priority: the root association, then one row per account (one
    space deeper); only the header on a cluster without accounting."""
    if not model.accounting:
        return SSHARE_HEADER + "\n"
    rows = [SSHARE_HEADER, "root||1.000000|1.000000|1.000000"]
    for share in model.fair_shares().values():
        rows.append(
            f" {share.account}||{share.shares_norm:.6f}|{share.usage_effective:.6f}|"
            f"{share.factor:.6f}"
        )
    return "\n".join(rows) + "\n"


def _document(body: dict[str, Any]) -> str:
    return json.dumps({"meta": META, "errors": [], **body}, indent=2)


def _by_id(jobs: Iterable[Job]) -> list[Job]:
    return sorted(jobs, key=lambda job: job.job_id)


def _unix(t: float | None, offset: float) -> int:
    return 0 if t is None else int(t + offset)


def _common(job: Job, offset: float, state: str, reason: str) -> dict[str, Any]:
    request = job.request
    return {
        "account": request.account,
        "array_task_string": "",
        "job_id": request.job_id,
        "job_state": state,
        "name": f"train-{request.job_id}",
        "node_count": request.nodes,
        "partition": request.partition,
        "state_reason": reason,
        "submit_time": _unix(request.submit, offset),
        "tasks": request.nodes,
        "time_limit": int(request.time_limit_s // 60) if request.time_limit_s < 1e12 else 0,
        "tres_per_job": "",
        "tres_per_node": f"gres:gpu:{request.gpus_per_node}",
        "tres_per_socket": "",
        "tres_per_task": "",
        "user_name": request.user,
    }


def _pending(job: Job, offset: float) -> dict[str, Any]:
    return {
        **_common(job, offset, "PENDING", SLURM_REASONS[job.reason]),
        "batch_host": "",
        "eligible_time": _unix(job.eligible, offset),
        "end_time": 0,
        "gres_detail": [],
        "nodes": "",
        "start_time": 0,
    }


def _started(job: Job, offset: float, state: str) -> dict[str, Any]:
    nodes = list(job.allocation)
    ended = job.end if state != "RUNNING" else None
    return {
        **_common(job, offset, state, "None"),
        "batch_host": nodes[0],
        "eligible_time": _unix(job.eligible, offset),
        # a running job's end_time is when its time limit runs out
        "end_time": _unix(ended, offset) if ended is not None else _planned_end(job, offset),
        "gres_detail": [_gres(len(gpus), gpus) for gpus in job.allocation.values()],
        "nodes": ",".join(nodes),
        "start_time": _unix(job.start, offset),
    }


def _planned_end(job: Job, offset: float) -> int:
    planned = job.planned_end()
    return _unix(planned, offset) if planned < 1e12 else 0


def _gres(count: int, indices: Sequence[int]) -> str:
    return f"gpu:{count}(IDX:{_ranges(indices) if indices else 'N/A'})"


def _ranges(indices: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5', as Slurm writes GPU indices."""
    parts: list[str] = []
    start = previous = indices[0]
    for index in [*indices[1:], None]:
        if index is not None and index == previous + 1:
            previous = index
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if index is not None:
            start = previous = index
    return ",".join(parts)


def _node(node: SlurmNode, partitions: list[str]) -> dict[str, Any]:
    used = [i for i, holder in enumerate(node.holders) if holder is not None]
    if node.unavailable == DOWN:
        state = "down"
    elif not used:
        state = "idle"
    else:
        state = "allocated" if len(used) == node.gpus else "mixed"
    flags = {DRAINED: ["DRAIN"], RESERVED: ["RESERVED"]}.get(node.unavailable or "", [])
    return {
        "gres": f"gpu:{node.gpus}",
        "gres_used": f"gpu:{len(used)}",  # sinfo's JSON gives no indices here
        "name": node.name,
        "partitions": partitions,
        "reason": node.reason_text,
        "state": state,
        "state_flags": flags,
    }
