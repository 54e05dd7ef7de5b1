"""`simulate history --backfill DIR`: each part of the history imported into a TSDB
directory with promtool as soon as it is written, then deleted.

promtool reads its input through mmap, so it cannot read a pipe: the history must be a
file. A month of six nodes is a gigabyte of OpenMetrics as one file; written a node at a
time and imported at once, at most one node's part (about a sixth of it) is on disk. The
parts cover the same time range, so their blocks overlap, which Prometheus merges (as
it does any backfill imported into a running TSDB).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import click


def promtool_or_fail() -> str:
    """promtool's path, or one line and exit 2 before minutes of simulation start."""
    path = shutil.which("promtool")
    if path is None:
        raise click.UsageError(
            "--backfill imports with promtool, which is not on PATH "
            "(Debian: apt-get install prometheus)"
        )
    return path


def importer(promtool: str, tsdb: Path, days: float) -> Callable[[Path], None]:
    """What `generate(on_file=...)` calls with each complete part: import it, delete it.
    A block may span the whole history (and two days of slack for its alignment), so a
    part is one block, not one per two hours."""
    tsdb.mkdir(parents=True, exist_ok=True)
    block = f"--max-block-duration={int(days * 24) + 48}h"

    def import_part(part: Path) -> None:
        argv = [
            promtool, "tsdb", "create-blocks-from", block, "openmetrics", "--quiet",
            str(part), str(tsdb),
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
            raise click.ClickException(f"promtool could not import {part}: {lines[-1]}")
        part.unlink()

    return import_part
