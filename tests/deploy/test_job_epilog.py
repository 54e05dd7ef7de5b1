"""deploy/slurm/nvwatch-job-epilog.sh as slurmctld runs it, with a stand-in `nvwatch` that
records its arguments: what reaches the command from the environment file and Slurm's
variables, and that the epilog never fails a job's end (the real command, on a real
slurmctld with slurmdbd, is tests/slurm/test_job_store.py's)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EPILOG = REPO / "deploy" / "slurm" / "nvwatch-job-epilog.sh"


def _fake_nvwatch(tmp_path: Path, body: str) -> Path:
    """A stand-in for nvwatch that writes its arguments, one per line, then runs `body`."""
    fake = tmp_path / "nvwatch"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/argv"\n{body}\n')
    fake.chmod(0o755)
    return fake


def _run(
    tmp_path: Path, env_lines: list[str], job_env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "nvwatch-job"
    env_file.write_text("".join(f"{line}\n" for line in env_lines))
    env = {"PATH": os.environ["PATH"], "NVWATCH_JOB_ENV": str(env_file), **job_env}
    return subprocess.run(
        [str(EPILOG)], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _argv(tmp_path: Path) -> list[str]:
    return (tmp_path / "argv").read_text().splitlines()


def test_the_environment_file_and_slurm_variables_reach_the_command(tmp_path: Path) -> None:
    fake = _fake_nvwatch(tmp_path, "exit 0")
    done = _run(
        tmp_path,
        [
            f"NVWATCH={fake}",
            "NVWATCH_PROMETHEUS_URL=http://127.0.0.1:9",
            "NVWATCH_JOB_STORE=dir:/var/lib/nvwatch/jobs",
            "NVWATCH_CLUSTER='east 1'",  # the file is read by sh
        ],
        {"SLURM_JOB_ID": "4242", "SLURM_JOB_PARTITION": "gpu"},
    )
    assert done.returncode == 0 and done.stderr == ""
    argv = _argv(tmp_path)
    assert argv[:2] == ["job", "4242"]
    assert "--store" in argv
    argv.remove("--store")
    pairs = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert pairs == {
        "--prometheus": "http://127.0.0.1:9",
        "--partition": "gpu",
        "--cluster": "east 1",  # one argument, spaces and all
        "--job-store": "dir:/var/lib/nvwatch/jobs",
    }


def test_without_a_cluster_no_cluster_flag_and_slurm_is_the_default_store(
    tmp_path: Path,
) -> None:
    fake = _fake_nvwatch(tmp_path, "exit 0")
    done = _run(
        tmp_path,
        [f"NVWATCH={fake}", "NVWATCH_PROMETHEUS_URL=http://127.0.0.1:9"],
        {"SLURM_JOB_ID": "7"},
    )
    assert done.returncode == 0
    argv = _argv(tmp_path)
    assert "--cluster" not in argv
    assert argv[argv.index("--job-store") + 1] == "slurm"
    assert argv[argv.index("--partition") + 1] == ""


def test_a_failing_command_is_one_line_and_the_job_still_ends_well(tmp_path: Path) -> None:
    fake = _fake_nvwatch(
        tmp_path, 'echo "a warning"; echo "nvwatch: error: no such job" >&2; exit 3'
    )
    done = _run(
        tmp_path,
        [f"NVWATCH={fake}", "NVWATCH_PROMETHEUS_URL=http://127.0.0.1:9"],
        {"SLURM_JOB_ID": "9"},
    )
    assert done.returncode == 0
    assert done.stderr == (
        "nvwatch-job-epilog: job 9: no summary kept: nvwatch: error: no such job\n"
    )


def test_a_hanging_command_is_cut_at_the_timeout(tmp_path: Path) -> None:
    fake = _fake_nvwatch(tmp_path, "exec sleep 30")
    started = time.monotonic()
    done = _run(
        tmp_path,
        [f"NVWATCH={fake}", "NVWATCH_PROMETHEUS_URL=http://127.0.0.1:9", "NVWATCH_JOB_TIMEOUT=1"],
        {"SLURM_JOB_ID": "11"},
    )
    assert done.returncode == 0
    assert time.monotonic() - started < 20
    assert done.stderr.startswith("nvwatch-job-epilog: job 11: no summary kept")


@pytest.mark.parametrize(
    ("env_lines", "job_env", "said"),
    [
        (
            ["NVWATCH_PROMETHEUS_URL=http://127.0.0.1:9"],
            {},
            "no SLURM_JOB_ID: not run by slurmctld",
        ),
        ([], {"SLURM_JOB_ID": "5"}, "job 5: no NVWATCH_PROMETHEUS_URL in "),
    ],
)
def test_missing_settings_are_one_line_and_exit_0(
    tmp_path: Path, env_lines: list[str], job_env: dict[str, str], said: str
) -> None:
    fake = _fake_nvwatch(tmp_path, "exit 0")
    done = _run(tmp_path, [f"NVWATCH={fake}", *env_lines], job_env)
    assert done.returncode == 0
    assert done.stderr.startswith(f"nvwatch-job-epilog: {said}")
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "argv").exists(), "the command must not run"
