"""--simulate with an explicit --sysfs-root is refused: before, the simulated node's tree
replaced the given root without a word, and the agent read a tree nobody had named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvwatch.agent.config import AgentConfig, ConfigError
from nvwatch.agent.runtime import runtime

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_simulate_with_a_sysfs_root_exits_2_with_one_line(tmp_path: Path, how: str) -> None:
    args = [*NVWATCH, "dump", "--simulate", "dgx-h100", "--sources", "host", "--settle", "0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVWATCH_")}
    if how == "flag":
        args += ["--sysfs-root", str(tmp_path)]
    else:
        env["NVWATCH_SYSFS_ROOT"] = str(tmp_path)
    completed = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.splitlines()
    assert line == (
        f"nvwatch: error: --sysfs-root {tmp_path} cannot be used with --simulate: "
        "the simulated node has its own sysfs tree (drop one of the two)"
    )
    assert completed.stdout == ""


def test_runtime_refuses_before_building_the_node(tmp_path: Path) -> None:
    config = AgentConfig(sources=("host",), simulate="dgx-h100", sysfs_root=tmp_path)
    with pytest.raises(ConfigError, match="cannot be used with --simulate"), runtime(config):
        pass


def test_simulate_alone_still_runs_on_its_own_tree() -> None:
    with runtime(AgentConfig(sources=("host",), simulate="dgx-h100")) as effective:
        assert (effective.sysfs_root / "class" / "infiniband").is_dir()
