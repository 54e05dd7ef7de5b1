"""Golden expositions of every simulated profile, node_exporter style.

The simulated node runs on a manual clock with a fixed seed, so its exposition is
deterministic; a change in any name, label, unit or value shows up as a diff here.
Refresh after an intended change with:

    NVWATCH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/agent/test_golden.py
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from nvwatch.sim.profiles import PROFILES
from nvwatch.sim.series_budget import render_profile
from tests.conftest import require_tool

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
# host readings and poll timings belong to the machine running the test, and process
# names come from psutil on this host for the simulated pids: kept out of the golden text
# (tests/nvml/test_exported_equals_simulated.py checks the process families' values)
_VOLATILE = (
    "nvwatch_host_",
    "nvwatch_agent_poll_duration_seconds",
    "nvwatch_agent_last_poll_timestamp_seconds",
    "nvwatch_agent_build_info",
    "nvwatch_gpu_process_",  # memory and utilization per process: pids and names
)


def _metric_name(line: str) -> str:
    if line.startswith("#"):
        return line.split(" ")[2]
    return line.split("{")[0].split(" ")[0]


def _exposition(profile: str, tmp_path: Path) -> str:
    text = render_profile(profile, tmp_path)
    return "".join(
        line + "\n" for line in text.splitlines() if not _metric_name(line).startswith(_VOLATILE)
    )


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_golden_exposition(profile: str, tmp_path: Path) -> None:
    text = _exposition(profile, tmp_path)
    path = GOLDEN / f"{profile}.prom"
    if os.environ.get("NVWATCH_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing {path}: run with NVWATCH_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{profile} exposition changed; see module docstring"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_golden_files_pass_promtool_check_metrics(profile: str) -> None:
    promtool = require_tool("promtool")
    body = (GOLDEN / f"{profile}.prom").read_bytes()
    result = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, timeout=60
    )
    # promtool exits 3 for lint findings: every one of them is a failure here
    findings = (result.stdout + result.stderr).decode().strip()
    assert result.returncode == 0 and not findings, findings
