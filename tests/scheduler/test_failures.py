"""Every way reading Slurm fails is the scheduler source down with one line; nothing else.

squeue is missing (a PATH without it), fails (exit 1 and Slurm's message), hangs past its
deadline, or prints garbage: the source reports why in one line, and the agent process
and its other sources go on. The commands here are small scripts standing in for squeue
on a PATH that holds nothing else, with SLURM_CONF naming a loopback slurm.conf of the
test's own, so no real Slurm client runs (one without a configuration would look for
its controller in DNS, and the source runs no command without one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvwatch.agent.sources import SourceUnavailable
from nvwatch.agent.sources.scheduler.source import SchedulerSource

NVWATCH = str(Path(sys.executable).parent / "nvwatch")

# squeue's stand-ins: (script body, what the one-line reason starts with)
BROKEN = {
    "missing": (None, "squeue not found"),
    "failing": (
        'echo "squeue: error: slurm_load_jobs error: Invalid user for SlurmUser" >&2; exit 1',
        "squeue failed: squeue: error: slurm_load_jobs error: Invalid user",
    ),
    "hanging": ("exec /bin/sleep 30", "squeue did not finish within 0.5 s"),
    "garbage": ("printf 'Segmentation fault\\n{\\000\\377'", "squeue printed bytes that are not"),
    "not_json": ("echo 'JOBID PARTITION NAME'", "squeue --json printed something that is not"),
    "wrong_json": ('echo \'{"jobs": [{"job_state": 5}]}\'', "squeue --json: jobs entry 0"),
}


def _path_with(tmp_path: Path, body: str | None) -> dict[str, str]:
    """An environment whose PATH holds only `squeue` with this body (none: no squeue)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if body is not None:
        script = bin_dir / "squeue"
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\nSlurmctldHost=localhost(127.0.0.1)\n")
    return {**os.environ, "PATH": str(bin_dir), "SLURM_CONF": str(conf)}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_squeue_is_the_source_down_with_one_line(tmp_path: Path, case: str) -> None:
    body, reason = BROKEN[case]
    source = SchedulerSource(
        interval=3600.0, timeout=0.5, max_accounts=5, env=_path_with(tmp_path, body)
    )
    try:
        started = time.monotonic()
        assert source.refresh() is None
        assert time.monotonic() - started < 5  # a hanging squeue is killed at its deadline
        with pytest.raises(SourceUnavailable) as down:
            source.collect()
    finally:
        source.close()
    message = str(down.value)
    assert message.startswith(reason), message
    assert "\n" not in message and len(message) < 300


def _run(tmp_path: Path, body: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NVWATCH, *args, "--sources", "host,scheduler", "--scheduler-timeout", "500ms"],
        env=_path_with(tmp_path, body),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("case", ["missing", "hanging"])
def test_dump_serves_the_other_sources_and_says_why_the_scheduler_is_down(
    tmp_path: Path, case: str
) -> None:
    body, reason = BROKEN[case]
    done = _run(tmp_path, body, "dump", "--format", "json", "--settle", "0")
    assert done.returncode == 0, done.stderr
    sources = json.loads(done.stdout)
    assert sources["host"]["up"] is True
    assert sources["scheduler"]["up"] is False
    assert sources["scheduler"]["error"].startswith(reason)
    assert "Traceback" not in done.stderr


def test_doctor_exits_1_with_the_reason_on_the_schedulers_line(tmp_path: Path) -> None:
    body, reason = BROKEN["failing"]
    done = _run(tmp_path, body, "doctor")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert lines["host"].split()[1] == "up"
    assert lines["scheduler"].split()[1] == "down"
    assert reason in lines["scheduler"]
    assert "Traceback" not in done.stderr


def test_doctor_waits_for_a_slow_squeue_and_shows_its_own_error(tmp_path: Path) -> None:
    """A loaded slurmctld answers in seconds: doctor reports what squeue said, not that
    its first read had not finished when the poll came (the poll waits 3 s)."""
    body, reason = BROKEN["failing"]
    done = subprocess.run(
        [NVWATCH, "doctor", "--sources", "host,scheduler", "--scheduler-timeout", "10s"],
        env=_path_with(tmp_path, f"/bin/sleep 4\n{body}"),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert lines["scheduler"].split()[1] == "down"
    assert reason in lines["scheduler"], lines["scheduler"]
