"""Running a Slurm client command (squeue, sinfo, sshare) with a deadline.

Every failure is a SchedulerError with one line saying why, so the source reports itself
down with that reason and the process and the other sources go on.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

_STDERR_LINE_CHARS = 200


class SchedulerError(Exception):
    """Slurm could not be read; the message is the one-line reason."""


def run_slurm(argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None) -> str:
    """The command's standard output; SchedulerError when it is missing, fails, hangs past
    `timeout_s` (it is killed) or prints something that is not text."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, timeout=timeout_s, env=env, check=False
        )
    except FileNotFoundError as exc:
        raise SchedulerError(f"{argv[0]} not found: is this a Slurm client host?") from exc
    except PermissionError as exc:
        raise SchedulerError(f"{argv[0]} cannot be run: {exc.strerror}") from exc
    except subprocess.TimeoutExpired as exc:
        raise SchedulerError(f"{argv[0]} did not finish within {timeout_s:g} s") from exc
    if done.returncode != 0:
        why = _first_line(done.stderr) or f"exit status {done.returncode}"
        raise SchedulerError(f"{argv[0]} failed: {why}")
    try:
        return done.stdout.decode()
    except UnicodeDecodeError as exc:
        raise SchedulerError(f"{argv[0]} printed bytes that are not UTF-8") from exc


def _first_line(stderr: bytes) -> str:
    text = stderr.decode(errors="replace").strip()
    line = text.splitlines()[0] if text else ""
    return line[:_STDERR_LINE_CHARS]
