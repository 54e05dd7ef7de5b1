"""`nvwatch doctor` as a health check: exit 0 when every source is up or absent, 1 when
one is down (or nothing can be collected), 2 for bad input; `--format json`; each
finding said once, on stdout, never repeated as a log line.

Real processes throughout (the exit code and stderr are what systemd, the kubelet and
slurmd see), on real sysfs trees built in tmp_path, on this GPU-less machine as it is,
and on simulated nodes whose scenarios break a source.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nvwatch.agent.sources.presence import scan_pci
from tests.agent.test_presence import MLX_IB, NVIDIA_3D, add_function
from tests.infiniband.sysfs_tree import add_device, healthy_port

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("NVWATCH_")}
GPU_LESS = not (scan_pci(Path("/sys")).nvidia_gpus() or scan_pci(Path("/sys")).infiniband_hcas())


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvwatch.agent.cli", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=CLEAN_ENV,
        check=False,
    )


def states(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """{name: state} of the text report."""
    return {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()}


def report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.stdout)
    return data


# --- simulated nodes: one scenario per source that can be down --------------------------


def test_a_healthy_simulated_node_is_0_and_logs_nothing() -> None:
    result = doctor("--simulate", "dgx-h100")
    assert result.returncode == 0, result.stderr
    assert states(result) == {
        "nvml": "up",
        "infiniband": "up",
        "host": "up",
        "xid-history": "up",
        "simulation": "on",
    }
    # not the simulated node's banner (the simulation line says it), no INFO lines
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("scenario", "down", "why"),
    [
        ("nvml-driver-broken", "nvml", "8 NVIDIA GPUs on PCI but NVML failed"),
        ("ib-hca-vanish", "infiniband", "8 Mellanox HCAs on PCI but"),
    ],
)
def test_a_source_down_is_1_and_said_once(scenario: str, down: str, why: str) -> None:
    result = doctor("--simulate", "dgx-h100", "--scenario", f"{scenario},from=0")
    assert result.returncode == 1
    found = states(result)
    assert found[down] == "down"
    assert all(
        state == "up"
        for name, state in found.items()
        if name in ("nvml", "infiniband", "host") and name != down
    )
    (line,) = [line for line in result.stdout.splitlines() if line.startswith(down)]
    assert why in line
    # the poller's "source ... is down" warning would repeat the line above
    assert result.stderr == ""


def test_json_carries_each_source_and_the_exit_code() -> None:
    result = doctor(
        "--simulate", "dgx-h100", "--scenario", "ib-hca-vanish,from=0", "--format", "json"
    )
    assert result.returncode == 1
    data = report(result)
    assert data["healthy"] is False and data["exit_code"] == 1
    by_name = {s["name"]: s for s in data["sources"]}
    assert [s["name"] for s in data["sources"]] == ["nvml", "infiniband", "host"]
    assert by_name["infiniband"]["state"] == "down"
    assert "is the mlx5_ib driver loaded?" in by_name["infiniband"]["detail"]
    assert by_name["nvml"]["state"] == "up" and by_name["nvml"]["series"] > 1000
    assert data["xid_history"]["state"] == "up"
    assert data["simulated_profile"] == "dgx-h100"
    assert result.stderr == ""


# --- real sysfs trees (no simulator): the agent's own presence checks -------------------


def test_a_real_tree_with_a_working_hca_is_0(tmp_path: Path) -> None:
    add_function(tmp_path, "0000:13:00.0", *MLX_IB, driver="mlx5_core")
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    result = doctor("--sources", "infiniband,host", "--sysfs-root", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert states(result) == {"infiniband": "up", "host": "up"}
    assert result.stderr == ""


def test_a_real_tree_with_hcas_but_no_rdma_devices_is_1(tmp_path: Path) -> None:
    add_function(tmp_path, "0000:13:00.0", *MLX_IB, driver="mlx5_core")
    result = doctor(
        "--sources", "infiniband,host", "--sysfs-root", str(tmp_path), "--format", "json"
    )
    assert result.returncode == 1
    (infiniband, host) = report(result)["sources"]
    assert infiniband["state"] == "down"
    assert infiniband["detail"] == (
        f"1 Mellanox HCA on PCI but {tmp_path}/class/infiniband does not exist: "
        "is the mlx5_ib driver loaded?"
    )
    assert host["state"] == "up"
    assert result.stderr == ""


@pytest.mark.skipif(not GPU_LESS, reason="this machine has NVIDIA GPUs or HCAs")
def test_a_real_tree_with_a_gpu_and_no_driver_is_1(tmp_path: Path) -> None:
    # this machine has no libnvidia-ml: a GPU on the tree's PCI bus is a driver problem
    add_function(tmp_path, "0000:3b:00.0", *NVIDIA_3D)
    result = doctor("--sources", "nvml,host", "--sysfs-root", str(tmp_path))
    assert result.returncode == 1
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("nvml")]
    assert line.split()[1] == "down"
    assert "1 NVIDIA GPU on PCI but NVML failed" in line
    assert result.stderr == ""


# --- this machine, as it is -----------------------------------------------------------


@pytest.mark.skipif(not GPU_LESS, reason="this machine has NVIDIA GPUs or HCAs")
def test_this_gpu_less_machine_is_0_with_nvml_and_infiniband_absent() -> None:
    result = doctor("--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = report(result)
    assert data["healthy"] is True
    assert {s["name"]: s["state"] for s in data["sources"]} == {
        "nvml": "absent",
        "infiniband": "absent",
        "host": "up",
    }
    assert data["simulated_profile"] is None
    # the poller's "source nvml is absent" INFO lines are gone: the report says it
    assert result.stderr == ""


@pytest.mark.skipif(not GPU_LESS, reason="this machine has NVIDIA GPUs or HCAs")
def test_nothing_to_collect_is_1() -> None:
    result = doctor("--sources", "nvml")
    assert result.returncode == 1
    assert states(result)["nvml"] == "absent"
    assert result.stderr == "nothing can be collected on this node\n"


def test_bad_input_is_2() -> None:
    result = doctor("--sources", "nvml,gpus")
    assert result.returncode == 2
    assert result.stderr.startswith("nvwatch: error: ") and result.stderr.count("\n") == 1
    assert result.stdout == ""
