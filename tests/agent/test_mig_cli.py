"""`--mig LAYOUT` on serve/dump/topology, `simulate exec` and `simulate fleet`: bad
layouts are one line and exit 2; good ones partition the simulated node."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner

from nvwatch.agent.cli import cli

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]


def _invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli, args)


def _one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got: {output!r}"
    assert lines[0].startswith("nvwatch: error: ")
    return lines[0]


_DUMP = ["dump", "--sources", "nvml", "--settle", "0"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([*_DUMP, "--mig", "all:7g.80gb"], "--mig needs --simulate"),
        (
            [*_DUMP, "--simulate", "dgx-h100", "--mig", "all:3g.20gb"],
            "3g.20gb is not a MIG profile of GPU 0 (NVIDIA H100 80GB HBM3)",
        ),
        (
            [*_DUMP, "--simulate", "dgx-a100", "--mig", "0:3g.20gb*2,1g.5gb"],
            "cannot place 3g.20gb,3g.20gb,1g.5gb",
        ),
        ([*_DUMP, "--simulate", "dgx-a100", "--mig", "0:1g.5gb*8"], "a count of 1..7"),
        ([*_DUMP, "--simulate", "dgx1-v100", "--mig", "0:pending"], "does not support MIG"),
        ([*_DUMP, "--simulate", "dgx-h100", "--mig", "8:7g.80gb"], "no GPU 8 on this node"),
        (["topology", "--simulate", "dgx-h100", "--mig", "all"], "is not GPUS:PROFILES"),
        (
            ["simulate", "exec", "--profile", "dgx-h100", "--mig", "0:4g.40gb*2", "true"],
            "holds at most 1 x 4g.40gb",
        ),
        (
            ["simulate", "fleet", "--profile", "dgx-h100", "--nodes", "2", "--mig", "1-2:all:none"],
            "MIG layout for node 2: the fleet has nodes 0..1",
        ),
        (
            ["simulate", "fleet", "--profile", "dgx1-v100:1,dgx-a100:1", "--mig", "0:0:none"],
            "node 0 (dgx1-v100): --mig: GPU 0 (Tesla V100-SXM2-32GB) does not support MIG",
        ),
        (["simulate", "fleet", "--profile", "dgx-a100", "--nodes", "1", "--mig", "0"], "NODE"),
    ],
)
def test_bad_layouts_exit_2_with_one_line(args: list[str], expected: str) -> None:
    result = _invoke(args)
    assert result.exit_code == 2, result.output
    assert expected in _one_line_error(result.output)


def test_mig_from_the_environment_partitions_dump() -> None:
    result = CliRunner().invoke(
        cli,
        [*_DUMP, "--simulate", "dgx-a100"],
        env={"NVWATCH_MIG": "0-1:3g.20gb,3g.20gb;2:pending"},
    )
    assert result.exit_code == 0, result.output
    # under MIG NVML has no GPU utilization: absent on GPUs 0-1, there on 2 (pending)
    assert 'nvwatch_gpu_utilization_ratio{gpu="0"' not in result.output
    assert 'nvwatch_gpu_utilization_ratio{gpu="2"' in result.output
    assert 'nvwatch_gpu_power_watts{gpu="0"' in result.output
    assert result.output.count("nvwatch_mig_info{") == 4  # two 3g.20gb on each of GPUs 0-1
    assert 'nvwatch_gpu_mig_mode{gpu="2",' in result.output


def test_simulate_exec_child_sees_the_mig_devices() -> None:
    script = (
        "import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(3); "
        "m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0); "
        "print(n.nvmlDeviceGetMigMode(h), n.nvmlDeviceGetName(m))"
    )
    exec_args = ["simulate", "exec", "--profile", "dgx-h100", "--mig", "all:7g.80gb", "--"]
    done = subprocess.run(
        [*NVWATCH, *exec_args, sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1, 1] NVIDIA H100 80GB HBM3 MIG 7g.80gb"
