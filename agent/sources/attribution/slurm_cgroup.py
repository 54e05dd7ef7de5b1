"""The Slurm job of a process from its cgroup paths (/proc/<pid>/cgroup).

slurmstepd puts every task in a cgroup named after its job; the layouts sites run:

- cgroup v2 (cgroup/v2 plugin): ``0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0``
- cgroup v2 with several slurmd per host (multiple-slurmd builds): the scope is
  ``<node>_slurmstepd.scope``
- cgroup v1 (cgroup/v1 plugin): ``4:memory:/slurm/uid_1000/job_42/step_batch/task_0``; Slurm
  22.05 names the root ``slurm_<host>`` (seen on Debian 12's slurm-wlm), older releases
  ``slurm``

v1 also names the job's uid in the path; v2 does not (the caller reads /proc/<pid>/status).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_V2 = re.compile(r"(?:^|/)(?:[^/]+_)?slurmstepd\.scope/job_(?P<job>\d+)(?:/|$)")
_V1 = re.compile(r"(?:^|/)slurm(?:_[^/]+)?/uid_(?P<uid>\d+)/job_(?P<job>\d+)(?:/|$)")


@dataclass(frozen=True)
class CgroupJob:
    job_id: str
    uid: int | None  # from a v1 path; None for v2


def job_of(paths: Iterable[str]) -> CgroupJob | None:
    """The job named by any of a process's cgroup paths, or None outside Slurm."""
    for path in paths:
        match = _V2.search(path)
        if match:
            return CgroupJob(match["job"], None)
        match = _V1.search(path)
        if match:
            return CgroupJob(match["job"], int(match["uid"]))
    return None
