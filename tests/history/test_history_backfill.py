"""`nvwatch simulate history --backfill DIR`: each part imported by the real promtool as
soon as it is written and deleted, so at most one part is on disk; the TSDB holds every
sample the same history holds as one file (counted in the file, not by the generator);
without promtool it is one line and exit 2 before anything is simulated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import require_tool

NVWATCH = str(Path(sys.executable).parent / "nvwatch")
HISTORY = ["simulate", "history", "--nodes", "6", "--days", "0.25", "--step", "15m",
           "--end", "2026-11-01T00:00:00Z", "--seed", "3"]  # fmt: skip


def _run(*args: str, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NVWATCH, *args], capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": path, "HOME": "/nonexistent"},
    )  # fmt: skip


def _samples_in(path: Path) -> int:
    with path.open(encoding="utf-8") as lines:
        return sum(1 for line in lines if line.strip() and not line.startswith("#"))


def _samples_in_tsdb(promtool: str, tsdb: Path) -> int:
    listed = subprocess.run(
        [promtool, "tsdb", "list", str(tsdb)], capture_output=True, text=True, check=True
    )
    header, *blocks = listed.stdout.splitlines()
    assert header.split()[:6] == ["BLOCK", "ULID", "MIN", "TIME", "MAX", "TIME"], header
    # columns: ULID, min time, max time, duration, samples, chunks, series, size
    return sum(int(block.split()[4]) for block in blocks if block.strip())


def test_parts_go_one_at_a_time_and_every_sample_arrives(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    out = tmp_path / "out"
    out.mkdir()
    # promtool as the command finds it: notes which parts exist when it is called
    calls = tmp_path / "calls.log"
    wrapper = tmp_path / "bin" / "promtool"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f'#!/bin/sh\nfor f in {out}/*.om; do echo "$f"; done >> {calls}\necho -- >> {calls}\n'
        f'exec {promtool} "$@"\n'
    )
    wrapper.chmod(0o755)
    tsdb = tmp_path / "tsdb"
    done = _run(*HISTORY, "--out", str(out / "h.om"), "--backfill", str(tsdb),
                path=str(wrapper.parent))  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = calls.read_text().split("--\n")[:-1]
    assert len(seen) == 6, seen  # a part per node
    assert all(len(call.split()) == 1 for call in seen), seen  # one part on disk each time
    assert not list(out.glob("*.om")), "a part was left behind"
    assert (out / "h.truth.json").exists()

    whole = tmp_path / "whole.om"
    one_file = _run(*HISTORY, "--out", str(whole), path=str(Path(promtool).parent))
    assert one_file.returncode == 0, one_file.stderr
    assert _samples_in_tsdb(promtool, tsdb) == _samples_in(whole)


def test_without_promtool_it_fails_before_simulating(tmp_path: Path) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    done = _run(*HISTORY, "--out", str(tmp_path / "h.om"), "--backfill",
                str(tmp_path / "tsdb"), path=str(empty))  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("nvwatch: error: ") and "promtool" in line, line
    assert not (tmp_path / "tsdb").exists()
