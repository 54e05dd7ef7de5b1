"""dcgm-exporter's HPC job-mapping directory (its --hpc-job-mapping-dir).

A Slurm prolog writes one file per GPU the job holds and the epilog removes it. Each file
is named by the GPU's NVML index ("3"), or for a MIG instance by the parent GPU's index
and the GPU instance id ("3.1"), as dcgm-exporter's hpc mapper
(internal/pkg/transformation/hpc.go) matches `^\\d+(\\.\\d+)?$`; it holds one job id per
line (several jobs may share a GPU). Other names and sub-directories are ignored, as there.

A directory that does not exist yet is no jobs, not an error: the prolog creates it with
the first job, and dcgm-exporter treats it the same way.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from nvwatch.common.regular_files import open_regular

_NAME = re.compile(r"(?P<gpu>\d+)(?:\.(?P<instance>\d+))?")
# a job id is short; a file larger than this is not a mapping file
_MAX_FILE_BYTES = 1 << 16


class MappingDirUnreadable(OSError):
    """The directory or one of its files exists and cannot be read."""


@dataclass(frozen=True)
class MappedJobs:
    """The jobs one mapping file names, for a GPU or one of its MIG instances."""

    gpu: int
    gpu_instance_id: int | None
    job_ids: tuple[str, ...]


def read_mapping_dir(directory: Path) -> tuple[MappedJobs, ...]:
    """Every mapping file in `directory`, in name order; () when it does not exist."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise MappingDirUnreadable(f"cannot list {directory}: {exc.strerror or exc}") from exc
    result = []
    for entry in entries:
        match = _NAME.fullmatch(entry.name)
        if not match or not entry.is_file():
            continue
        jobs = _job_ids(Path(entry.path))
        if jobs is None:
            continue  # removed by an epilog between the listing and the read
        instance = match["instance"]
        result.append(MappedJobs(int(match["gpu"]), int(instance) if instance else None, jobs))
    return tuple(result)


def _job_ids(path: Path) -> tuple[str, ...] | None:
    try:
        # replaced by a FIFO since the listing, open() would wait for a writer for good
        with open_regular(path) as file:
            data = file.read(_MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MappingDirUnreadable(f"cannot read {path}: {exc.strerror or exc}") from exc
    lines = (line.strip() for line in data.decode("utf-8", "replace").splitlines())
    # the same job twice (a prolog run again) is one owner, as dcgm-exporter dedupes it
    return tuple(dict.fromkeys(line for line in lines if line))
