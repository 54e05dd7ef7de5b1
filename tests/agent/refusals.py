"""Running a command that must refuse its input at once, in one line and exit 2."""

from __future__ import annotations

import subprocess
import sys

from nvwatch.agent.cli import EXIT_BAD_INPUT

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
# a command that took its input instead (a `serve` that starts, an open() that waits on
# a FIFO) is killed here: a failure, not a hang
HANG_S = 30


def refusal_line(args: list[str]) -> str:
    """The one line `nvwatch ARGS` prints on stderr as it exits 2, without a traceback."""
    completed = subprocess.run([*NVWATCH, *args], capture_output=True, text=True, timeout=HANG_S)
    assert completed.returncode == EXIT_BAD_INPUT, completed.stderr[-2000:]
    assert "Traceback" not in completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, lines[:5]
    assert lines[0].startswith("nvwatch: error: ")
    return lines[0]
