"""The job-cost benchmark's month of jobs: every job a history of the cluster runs, each
stored as the measured summary under its own id, owner and life, all listed by `nvwatch
jobs --since 30d`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner

from benchmarks.job_cost import month_of_jobs, store_month
from nvwatch.agent.cli import cli
from nvwatch.report.jobs.model import GpuUse, JobSummary

# a summary as `nvwatch job --store` keeps one
SUMMARY = JobSummary(
    "64064", "c1", "u", "a", 0.0, 3600.0, (GpuUse("dgx-000", "0", utilization=0.5),), gpu_count=1
).to_dict()


def test_the_month_is_every_job_of_the_history_listed_as_its_own(tmp_path: Path) -> None:
    jobs = month_of_jobs(12, time.time() - 600)
    assert len({j.job_id for j in jobs}) == len(jobs) > 200  # placed and drawn
    store_month(tmp_path, SUMMARY, jobs)
    done = CliRunner().invoke(
        cli, ["jobs", "--since", "30d", "--job-store", f"dir:{tmp_path}", "--format", "json"]
    )
    assert done.exit_code == 0, done.output
    listed = {row["job_id"]: row for row in json.loads(done.output)}
    # a job ended within the first step of the range may have left the 30 days by now
    assert len(listed) >= len(jobs) - 5
    for job in jobs:
        if job.job_id in listed:
            assert (listed[job.job_id]["user"], listed[job.job_id]["account"]) == (
                job.user,
                job.account,
            )
