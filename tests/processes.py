"""Stopping what a test started: by its pid, politely first."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterable
from typing import Any


def reap(process: subprocess.Popen[Any], grace: float) -> None:
    """Wait up to `grace` s for a process told to stop; kill it if it is still there."""
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def stop(process: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """SIGTERM, up to `grace` s for the process to exit on its own, then SIGKILL (a
    process that has already exited is left as it is)."""
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    reap(process, grace)


def stop_all(processes: Iterable[subprocess.Popen[Any]], grace: float) -> None:
    """All told first, then each waited for: they stop side by side."""
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        reap(process, grace)
