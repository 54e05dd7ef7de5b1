"""Jobs on a simulated fleet: a small simulated Slurm per node, as the agent sees one.

`simulate fleet --job 0:0-3,user=alice,account=ml` places a job on GPUs 0-3 of node 0;
`--job 0-3:all,id=77` one job on every GPU of nodes 0..3 (NODES: N, N-M or a list of
those, `0,2,4-5`). A job across nodes is a synchronous data-parallel job: every step
waits for its slowest rank (sim/job/); `sync=yes` makes a one-node job one too, `sync=no`
leaves a multi-node one unsynchronised.
For each node with jobs, `NodeJobs` writes what a real Slurm node shows the agent:

- the job-mapping directory a prolog writes, in dcgm-exporter's format (one file per GPU,
  named by its index, one job id per line; agent/sources/attribution/mapping_dir.py), so
  every GPU of a job is allocated whether or not anything runs on it;
- a /proc tree (the node agent's --proc-root) with an entry for the simulated job worker
  on each busy GPU of the job (the pid the simulated NVML reports there), whose
  environment names the job, its user and account (SLURM_JOB_ID, SLURM_JOB_USER,
  SLURM_JOB_ACCOUNT: the third way of the Slurm resolver; the simulated users are not in
  this machine's passwd, so a cgroup path's uid could not name them).

The node's agent then runs with `--attribution slurm --hpc-job-mapping-dir DIR
--proc-root DIR`, the same code path as on a Slurm node. A job on an idle GPU (scenario
`idle@GPU`) is allocated and idle: what NvwatchGpuAllocatedIdle is for.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nvwatch.agent.config import AgentConfig
from nvwatch.sim.fleet.plan import FleetError, NodeSpec
from nvwatch.sim.job.plan import JobNode, SyncJobPlan, sync_job_plan
from nvwatch.sim.profiles import get_profile

# NODE: one node (N), a range (N-M) or a list of those (0,2,4-5): one job across them
JOB_SYNTAX = "NODE:GPUS[,user=NAME][,account=NAME][,id=JOBID][,sync=yes|no]"
FIRST_JOB_ID = 1001
_RANGE = r"\d+(?:\s*-\s*\d+)?"
_JOB = re.compile(rf"^\s*({_RANGE}(?:\s*,\s*{_RANGE})*)\s*:\s*(all|{_RANGE})\s*((?:,[^,]*)*)$")
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_OPTIONS = ("user", "account", "id", "sync")
_SYNC = {"yes": True, "no": False}


@dataclass(frozen=True)
class FleetJob:
    """One simulated Slurm job: the GPUs it holds on each of its nodes, and whose it is.

    `node` is its first node; `nodes` all of them, in order (empty: `node` alone)."""

    node: int
    gpus: tuple[int, ...] | None  # None: every GPU of the node
    job_id: str
    user: str
    account: str = ""
    nodes: tuple[int, ...] = ()
    sync: bool | None = None  # None: synchronous when it spans nodes

    @property
    def all_nodes(self) -> tuple[int, ...]:
        return self.nodes or (self.node,)

    @property
    def synchronous(self) -> bool:
        """Whether its steps wait for its slowest rank (sim/job/)."""
        return len(self.all_nodes) > 1 if self.sync is None else self.sync

    def on(self, node: int) -> FleetJob:
        """Its part on `node`, as that node's Slurm lists it."""
        return dataclasses.replace(self, node=node)


def parse_job(text: str, number: int) -> FleetJob:
    """'0:0-3,user=alice,account=ml' -> a job on node 0's GPUs 0..3; '0-3:all,id=77' ->
    one job on every GPU of nodes 0..3; `number` is its position in the list, which gives
    its id (FIRST_JOB_ID + number) unless id= does."""
    match = _JOB.match(text)
    if not match:
        raise FleetError(
            f"invalid fleet job {text!r}: use {JOB_SYNTAX} (NODE: N, N-M or a list), "
            "e.g. 0:0-3,user=alice or 0-3:all"
        )
    options = _options(text, match.group(3))
    nodes = _nodes(text, match.group(1))
    return FleetJob(
        node=nodes[0],
        gpus=_gpus(text, match.group(2)),
        job_id=options.get("id", str(FIRST_JOB_ID + number)),
        user=options.get("user", f"user{number}"),
        account=options.get("account", ""),
        nodes=nodes if len(nodes) > 1 else (),
        sync=_SYNC[options["sync"]] if "sync" in options else None,
    )


def _nodes(text: str, spec: str) -> tuple[int, ...]:
    nodes: list[int] = []
    for part in spec.split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if high < low:
            raise FleetError(
                f"invalid fleet job {text!r}: node range {part.strip()} runs backwards"
            )
        for node in range(low, high + 1):
            if node in nodes:
                raise FleetError(f"invalid fleet job {text!r}: node {node} is named twice")
            nodes.append(node)
    return tuple(nodes)


def _gpus(text: str, spec: str) -> tuple[int, ...] | None:
    if spec == "all":
        return None
    first, _, last = spec.partition("-")
    low, high = int(first), int(last or first)
    if high < low:
        raise FleetError(f"invalid fleet job {text!r}: GPU range {spec} runs backwards")
    return tuple(range(low, high + 1))


def _options(text: str, raw: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in _OPTIONS:
            raise FleetError(
                f"invalid fleet job {text!r}: unknown option {item!r} "
                "(use user=, account=, id=, sync=)"
            )
        if key == "sync" and value not in _SYNC:
            raise FleetError(f"invalid fleet job {text!r}: sync={value!r} is not yes or no")
        if not _NAME.match(value):
            raise FleetError(f"invalid fleet job {text!r}: {key}={value!r} is not a plain name")
        options[key] = value
    return options


def check_jobs(jobs: Sequence[FleetJob], gpu_counts: Sequence[int]) -> None:
    """Fail before anything starts on a job for a node or GPU the fleet lacks, or an id
    two jobs share."""
    seen: dict[str, int] = {}
    for job in jobs:
        for node in job.all_nodes:
            _check_node(job, node, gpu_counts)
        if job.job_id in seen:
            raise FleetError(f"job id {job.job_id} is given to two jobs")
        seen[job.job_id] = job.node


def _check_node(job: FleetJob, node: int, gpu_counts: Sequence[int]) -> None:
    if not 0 <= node < len(gpu_counts):
        raise FleetError(
            f"job {job.job_id} on node {node}: the fleet has nodes 0..{len(gpu_counts) - 1}"
        )
    count = gpu_counts[node]
    missing = [g for g in job.gpus or () if g >= count]
    if missing:
        raise FleetError(
            f"job {job.job_id} on node {node}: no GPU {missing[0]} "
            f"(the node has GPUs 0..{count - 1})"
        )


def sync_job_plans(jobs: Sequence[FleetJob], specs: Sequence[NodeSpec]) -> list[SyncJobPlan]:
    """The synchronous jobs among `jobs`, each planned over the fleet's `specs`."""
    plans = []
    for job in jobs:
        if not job.synchronous:
            continue
        nodes = [specs[i] for i in job.all_nodes]
        held = {
            spec.index: job.gpus or tuple(range(len(get_profile(spec.profile).gpus)))
            for spec in nodes
        }
        members = [JobNode(s.index, s.profile, s.seed, s.scenarios) for s in nodes]
        plans.append(sync_job_plan(job.job_id, held, members))
    return plans


class NodeJobs:
    """The jobs of one node, written as its prolog and its processes would show them."""

    def __init__(
        self,
        root: Path,
        jobs: Sequence[FleetJob],
        gpu_count: int,
        worker_pid: Callable[[int], int],
    ) -> None:
        """`root`: a directory of the node's own; `worker_pid(gpu)`: the pid the simulated
        NVML reports for the job worker on that GPU."""
        self.mapping_dir = root / "slurm-job-mapping"
        self.proc_root = root / "proc"
        self.jobs = tuple(jobs)
        self._gpu_count = gpu_count
        self._worker_pid = worker_pid

    def agent_config(self, config: AgentConfig) -> AgentConfig:
        """`config` with Slurm attribution reading this node's jobs, refreshed every poll
        (a real node's 10 s would be minutes of a fleet's simulated time)."""
        return dataclasses.replace(
            config,
            attribution=("slurm",),
            hpc_job_mapping_dir=self.mapping_dir,
            proc_root=self.proc_root,
            attribution_interval=config.interval,
        )

    def gpus_of(self, job: FleetJob) -> tuple[int, ...]:
        return job.gpus if job.gpus is not None else tuple(range(self._gpu_count))

    def write(self) -> None:
        """The mapping files (the prolog's) and the workers' /proc entries."""
        self.mapping_dir.mkdir(parents=True, exist_ok=True)
        self.proc_root.mkdir(parents=True, exist_ok=True)
        self.update(self.jobs)

    def update(self, jobs: Sequence[FleetJob]) -> None:
        """Bring the files to `jobs` (a queue's jobs start and end): a GPU no job holds
        any more loses its mapping file and its worker's /proc entry, as after an
        epilog; a file whose jobs did not change is not rewritten."""
        self.jobs = tuple(jobs)
        per_gpu: dict[int, list[str]] = {}
        workers: dict[int, FleetJob] = {}  # pid -> the job of its GPU (the first listed)
        for job in self.jobs:
            for gpu in self.gpus_of(job):
                per_gpu.setdefault(gpu, []).append(job.job_id)
                workers.setdefault(self._worker_pid(gpu), job)
        for gpu, job_ids in per_gpu.items():
            _write_if_changed(self.mapping_dir / str(gpu), "".join(f"{j}\n" for j in job_ids))
        for stale in self.mapping_dir.iterdir():
            if stale.name.isdigit() and int(stale.name) not in per_gpu:
                stale.unlink()
        for pid, job in workers.items():
            self._write_worker(pid, job)
        for entry in self.proc_root.iterdir():
            if entry.name.isdigit() and int(entry.name) not in workers:
                shutil.rmtree(entry, ignore_errors=True)

    def _write_worker(self, pid: int, job: FleetJob) -> None:
        entry = self.proc_root / str(pid)
        entry.mkdir(exist_ok=True)
        # not in a Slurm cgroup the resolver knows: the environment places it
        _write_if_changed(entry / "cgroup", "0::/system.slice/slurmstepd.scope/system\n")
        env = {
            "SLURM_JOB_ID": job.job_id,
            "SLURM_JOB_USER": job.user,
            "SLURM_JOB_ACCOUNT": job.account,
        }
        _write_if_changed(entry / "environ", "".join(f"{k}={v}\0" for k, v in env.items()))


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except FileNotFoundError:
        pass
    _write_atomic(path, text)


def _write_atomic(path: Path, text: str) -> None:
    """The agent's refresher may read while a file is written: never half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
