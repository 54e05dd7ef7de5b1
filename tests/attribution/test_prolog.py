"""deploy/slurm's prolog/epilog pair writes what the mapping-directory reader reads."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nvwatch.agent.sources.attribution.mapping_dir import MappedJobs, read_mapping_dir

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "slurm"


def _run(script: str, directory: Path, job: str, gpus: str | None) -> None:
    env = {"PATH": os.environ["PATH"], "NVWATCH_HPC_JOB_MAPPING_DIR": str(directory)}
    env["SLURM_JOB_ID"] = job
    if gpus is not None:
        env["SLURM_JOB_GPUS"] = gpus
    subprocess.run([str(DEPLOY / script)], env=env, check=True, timeout=30)


def test_prolog_and_epilog_keep_the_directory_in_step_with_jobs(tmp_path: Path) -> None:
    directory = tmp_path / "job-map"
    _run("nvwatch-prolog.sh", directory, "11", "0,3")
    _run("nvwatch-prolog.sh", directory, "12", "3")
    _run("nvwatch-prolog.sh", directory, "12", "3")  # a prolog run twice adds nothing
    assert read_mapping_dir(directory) == (
        MappedJobs(0, None, ("11",)),
        MappedJobs(3, None, ("11", "12")),
    )
    assert (directory / "3").read_text() == "11\n12\n"
    _run("nvwatch-epilog.sh", directory, "11", None)  # even without the GPU list
    assert read_mapping_dir(directory) == (MappedJobs(3, None, ("12",)),)
    _run("nvwatch-epilog.sh", directory, "12", "3")
    assert read_mapping_dir(directory) == ()


def test_a_job_without_gpus_writes_nothing(tmp_path: Path) -> None:
    _run("nvwatch-prolog.sh", tmp_path / "job-map", "13", None)
    assert not (tmp_path / "job-map").exists()
