"""The disk an engine's data takes, read while the engine runs: VictoriaMetrics merges and
removes its parts as `du` walks them, and du then exits 1 over a vanished file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks.scale.measure import du_bytes

# a du that says a file vanished as many times as the file `fails` holds lines, then
# answers as the real one
FLAKY_DU = """#!/bin/sh
left=$(wc -l < "$FAILS")
if [ "$left" -gt 0 ]; then
    sed -i 1d "$FAILS"
    echo "du: cannot access '$2/part-1': No such file or directory" >&2
    exit 1
fi
exec /usr/bin/du "$@"
"""


def _flaky_du(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: int) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    du = bin_dir / "du"
    du.write_text(FLAKY_DU)
    du.chmod(0o755)
    fails = tmp_path / "fails"
    fails.write_text("x\n" * failures)
    monkeypatch.setenv("FAILS", str(fails))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_a_file_that_vanished_under_du_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "chunk").write_bytes(b"x" * 10_000)
    expected = int(subprocess.run(["du", "-sb", str(data)], capture_output=True,
                                  text=True, check=True).stdout.split()[0])  # fmt: skip
    _flaky_du(tmp_path, monkeypatch, failures=2)
    assert du_bytes(data) == expected >= 10_000


def test_a_directory_that_keeps_changing_is_still_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _flaky_du(tmp_path, monkeypatch, failures=5)
    with pytest.raises(subprocess.CalledProcessError):
        du_bytes(data)
