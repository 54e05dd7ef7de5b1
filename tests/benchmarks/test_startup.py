"""benchmarks/startup.py: one start of each mode measures, and its section replaces itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.startup import (
    BEGIN,
    END,
    REPO,
    Startup,
    baseline_checkout,
    measure,
    startup_section,
    update,
)


def test_one_start_of_each_mode_is_measured() -> None:
    real, simulated = measure("this checkout", dict(os.environ), REPO, runs=1)
    assert (real.mode, simulated.mode) == ("real", "simulated")
    assert 0 < real.seconds < 60 and real.rss_mib > 5
    # the simulated agent holds the simulator; the real one none of it
    assert simulated.modules > real.modules > 10


def test_the_section_is_replaced_in_place(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    doc.write_text("# head\n\ntext\n")
    first = startup_section([Startup("a", "real", 1.0, 30.0, 50)])
    update(doc, first)
    update(doc, startup_section([Startup("b", "real", 2.0, 31.0, 51)]))
    text = doc.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert "| b | real | 2000 ms | 31.0 MiB | 51 |" in text and "| a |" not in text
    assert text.startswith("# head\n\ntext\n")


def test_the_baseline_imports_its_own_code_not_this_checkouts() -> None:
    # the installed `nvwatch` is this checkout's: a baseline that fell through to it would
    # measure this checkout twice (it did: both rows held the same module counts)
    with baseline_checkout("HEAD") as (tree, importable):
        shown = subprocess.run(
            [sys.executable, "-c", "import nvwatch.agent.cli as m; print(m.__file__)"],
            env={**os.environ, "PYTHONPATH": str(importable)},
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        # while the links exist: they lead into the baseline's worktree
        imported = Path(shown.stdout.strip()).resolve()
        assert imported.is_relative_to(tree.resolve()), shown.stdout
