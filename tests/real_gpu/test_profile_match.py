"""Each recorded board against the simulator's profile of it: memory total, temperature
thresholds, maximum clocks, power limits, PCIe, NVLink link count and the set of device
queries answering NotSupported. A failure names the difference: fix the profile (or the
simulator) from the recording, which is the board's word."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from benchmarks.real_gpu.replay import meta
from benchmarks.real_gpu.simulator import sim_module
from tests.real_gpu.fixtures import FIXTURES, case_id

EVERY_DEVICE_QUERY = Path(__file__).resolve().parents[1] / "sim" / "every_device_query.py"
MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(not FIXTURES, reason="no recorded run under tests/real_gpu/")


def _profile(fixture: Path) -> Any:
    info = meta(fixture)
    profiles = sim_module("profiles").PROFILES
    name = info["board"].get("profile") or next(
        (p.name for p in profiles.values() if p.gpus[0].name == info["board"]["name"]), None
    )
    if name is None or name not in profiles:
        pytest.fail(f"no simulated profile of {info['board']['name']}: add one beside dgx-h100")
    return profiles[name]


def _static(fixture: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((fixture / "static.json").read_text())
    return data


def _each_gpu(fixture: Path) -> list[tuple[int, dict[str, Any], Any]]:
    profile, static = _profile(fixture), _static(fixture)
    gpus = static["gpus"]
    assert gpus, "the recording has no GPU"
    assert len(gpus) <= profile.gpu_count, f"{len(gpus)} GPUs recorded, {profile.name} has fewer"
    return [(i, gpu, profile.gpus[i]) for i, gpu in enumerate(gpus)]


@pytest.mark.parametrize("fixture", FIXTURES, ids=case_id)
def test_memory_total(fixture: Path) -> None:
    for i, gpu, model in _each_gpu(fixture):
        got, want = gpu["memory_total_bytes"], model.memory_bytes
        assert got == want, f"GPU {i}: {got / MIB:g} MiB recorded, profile {want / MIB:g} MiB"


@pytest.mark.parametrize("fixture", FIXTURES, ids=case_id)
def test_temperature_thresholds(fixture: Path) -> None:
    for i, gpu, model in _each_gpu(fixture):
        want = {
            "slowdown": model.temp_slowdown_c,
            "shutdown": model.temp_shutdown_c,
            "gpu_max": model.temp_gpu_max_c,
            "memory_max": model.temp_memory_max_c,
        }
        assert gpu["thresholds_c"] == want, f"GPU {i}: recorded {gpu['thresholds_c']}"


@pytest.mark.parametrize("fixture", FIXTURES, ids=case_id)
def test_maximum_clocks(fixture: Path) -> None:
    for i, gpu, model in _each_gpu(fixture):
        want = {
            "sm": model.max_sm_clock_mhz,
            "memory": model.max_memory_clock_mhz,
            "graphics": model.max_graphics_clock_mhz,
        }
        assert gpu["max_clocks_mhz"] == want, f"GPU {i}: recorded {gpu['max_clocks_mhz']}"


@pytest.mark.parametrize("fixture", FIXTURES, ids=case_id)
def test_power_limits(fixture: Path) -> None:
    for i, gpu, model in _each_gpu(fixture):
        assert gpu["power_default_limit_mw"] == model.tdp_watts * 1000, f"GPU {i}"
        want = [model.min_power_limit_watts * 1000, model.max_power_limit_watts * 1000]
        assert gpu["power_limits_mw"] == want, f"GPU {i}: recorded {gpu['power_limits_mw']}"


@pytest.mark.parametrize("fixture", FIXTURES, ids=case_id)
def test_pcie_link(fixture: Path) -> None:
    for i, gpu, model in _each_gpu(fixture):
        want = {"generation": model.pcie_generation, "width": model.pcie_width}
        assert gpu["pcie_max"] == want, f"GPU {i}: recorded {gpu['pcie_max']}"


@pytest.mark.parametrize("fixture", FIXTURES, ids=case_id)
def test_nvlink_link_count(fixture: Path) -> None:
    profile = _profile(fixture)
    for i, gpu, _ in _each_gpu(fixture):
        if gpu["nvlink_links"] == 0 and profile.nvlinks[i]:
            pytest.skip(
                f"GPU {i}: no NVLink link answers on the recorded machine (one GPU "
                "passed through without its NVSwitch fabric): not comparable"
            )
        assert gpu["nvlink_links"] == len(profile.nvlinks[i]), f"GPU {i}"


@pytest.mark.parametrize("fixture", FIXTURES, ids=case_id)
def test_not_supported_set(fixture: Path) -> None:
    static = _static(fixture)
    if not static["device_queries_ran"]:
        pytest.skip("the recorded run did not list its device queries")
    recorded = set(static["not_supported_gpu0"])
    simulated = _simulated_not_supported(_profile(fixture).name)
    board_only, sim_only = sorted(recorded - simulated), sorted(simulated - recorded)
    assert not board_only and not sim_only, (
        f"NotSupported on the board only: {board_only}; in the simulator only: {sim_only}"
    )


@cache
def _simulated_not_supported(profile: str) -> set[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nvwatch.agent.cli",
            "simulate",
            "exec",
            "--profile",
            profile,
            "--",
            sys.executable,
            str(EVERY_DEVICE_QUERY),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert rows, done.stderr
    return {r["fn"] for r in rows if r["gpu"] == 0 and r["outcome"] == "NVMLError_NotSupported"}
