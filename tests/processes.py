"""Stopping what a test started: by its pid, politely first."""

from __future__ import annotations

import contextlib
import subprocess
from typing import Any


def stop(process: subprocess.Popen[Any], grace_s: float = 15.0) -> None:
    """SIGTERM, up to `grace_s` for the process to exit on its own, then SIGKILL (a
    process that has already exited is left as it is)."""
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
