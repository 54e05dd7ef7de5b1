"""Slurm attribution: the job on each GPU by the three ways sites run it.

1. The cgroup path of each process NVML reports (slurm_cgroup); its user from the
   path's uid (v1) or /proc/<pid>/status (v2).
2. The job-mapping directory a prolog writes, dcgm-exporter's format (mapping_dir): the
   jobs a GPU is allocated to, whether or not a process runs on it yet.
3. The process environment (SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_ACCOUNT) of a process
   no cgroup places; reading another user's environ needs root (or CAP_SYS_PTRACE).

The same job seen by several ways is one owner, with each way's fields merged (the
mapping file's job id gets the cgroup's user and the environment's account).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from nvwatch.agent.sources.attribution.mapping_dir import MappingDirUnreadable, read_mapping_dir
from nvwatch.agent.sources.attribution.model import Allocation, GpuRef, Owner, Resolution
from nvwatch.agent.sources.attribution.procfs import PerProcess, ProcFS, ProcUnreadable, user_name
from nvwatch.agent.sources.attribution.slurm_cgroup import job_of

SCHEDULER = "slurm"


@dataclass
class _Errors:
    """The first problem of each kind and how many there were, for one line."""

    messages: dict[str, tuple[str, int]] = field(default_factory=dict)

    def add(self, kind: str, message: str) -> None:
        first, count = self.messages.get(kind, (message, 0))
        self.messages[kind] = (first, count + 1)

    def line(self) -> str | None:
        if not self.messages:
            return None
        parts = [m if n == 1 else f"{m} (and {n - 1} more)" for m, n in self.messages.values()]
        return "; ".join(parts)


class SlurmResolver:
    name = SCHEDULER

    def __init__(self, proc: ProcFS, mapping_dir: Path | None = None) -> None:
        self._proc = proc
        self._mapping_dir = mapping_dir
        self._owners: PerProcess[Owner | None] = PerProcess(proc)

    def resolve(self, gpus: Sequence[GpuRef]) -> Resolution:
        errors = _Errors()
        mapped = self._mapped_jobs(errors)
        pid_owners: dict[int, Owner] = {}
        allocations: list[Allocation] = []
        seen: list[int] = []
        for gpu in gpus:
            units: list[tuple[str, int | None, tuple[int, ...]]] = [(gpu.uuid, None, gpu.pids)]
            units += [(i.uuid, i.gpu_instance_id, i.pids) for i in gpu.instances]
            for uuid, instance, pids in units:
                owners = [Owner(SCHEDULER, job) for job in mapped.get((gpu.index, instance), ())]
                seen += pids
                for pid in pids:
                    owner = self._owner_of(pid, errors)
                    if owner is not None:
                        pid_owners[pid] = owner
                        owners.append(owner)
                allocations += [Allocation(gpu.index, uuid, o) for o in _merged(owners)]
        self._owners.keep_only(seen)
        return Resolution(_per_job(allocations), pid_owners, errors.line())

    def close(self) -> None:
        """Nothing to release: every read opens and closes its file."""

    def _mapped_jobs(self, errors: _Errors) -> dict[tuple[int, int | None], tuple[str, ...]]:
        if self._mapping_dir is None:
            return {}
        try:
            files = read_mapping_dir(self._mapping_dir)
        except MappingDirUnreadable as exc:
            errors.add("mapping", str(exc))
            return {}
        return {(f.gpu, f.gpu_instance_id): f.job_ids for f in files}

    def _owner_of(self, pid: int, errors: _Errors) -> Owner | None:
        try:
            return self._owners.get(pid, self._read_owner)
        except ProcUnreadable as exc:
            errors.add("proc", str(exc))
            return None

    def _read_owner(self, pid: int) -> Owner | None:
        """The job of `pid` from /proc; ProcUnreadable when an entry cannot be read."""
        paths = self._proc.cgroup_paths(pid)
        if paths is None:
            return None  # exited since NVML listed it
        job = job_of(paths)
        if job is not None:
            uid = job.uid if job.uid is not None else self._proc.uid(pid)
            user = user_name(uid) if uid is not None else ""
            return Owner(SCHEDULER, job.job_id, user, self._account(pid, job.job_id))
        return self._owner_from_environ(pid)

    def _owner_from_environ(self, pid: int) -> Owner | None:
        """The job the environment names. Another user's environ is root's to read: not
        being root, this way is simply not available (no error); as root, an unreadable
        environ is as wrong as any other /proc entry."""
        try:
            env = self._proc.environ(pid)
        except ProcUnreadable:
            if os.geteuid() != 0:
                return None
            raise
        job_id = (env or {}).get("SLURM_JOB_ID", "")
        if env is None or not job_id:
            return None
        return Owner(
            SCHEDULER, job_id, env.get("SLURM_JOB_USER", ""), env.get("SLURM_JOB_ACCOUNT", "")
        )

    def _account(self, pid: int, job_id: str) -> str:
        """The account, which only the environment names; "" when it is not ours to read
        (the cgroup already placed the process, so an unreadable environ is no error)."""
        try:
            env = self._proc.environ(pid) or {}
        except ProcUnreadable:
            return ""
        return env.get("SLURM_JOB_ACCOUNT", "") if env.get("SLURM_JOB_ID") == job_id else ""


def _merged(owners: Sequence[Owner]) -> list[Owner]:
    """One owner per job, fields merged across the ways that saw it, in first-seen order."""
    by_job: dict[str, Owner] = {}
    for owner in owners:
        seen = by_job.get(owner.job_id)
        if seen is None:
            by_job[owner.job_id] = owner
        elif seen != owner:
            by_job[owner.job_id] = seen.merged(owner)
    return list(by_job.values())


def _per_job(allocations: Sequence[Allocation]) -> tuple[Allocation, ...]:
    """Each job's fields merged across all its GPUs on the node: a GPU that only the
    mapping file gives a job (no process of the job on it yet, or an idle GPU the job
    holds) names the user and account that the job's processes on its other GPUs show."""
    by_job: dict[str, Owner] = {}
    for allocation in allocations:
        owner = allocation.owner
        seen = by_job.get(owner.job_id)
        by_job[owner.job_id] = owner if seen is None else seen.merged(owner)
    return tuple(replace(a, owner=by_job[a.owner.job_id]) for a in allocations)
