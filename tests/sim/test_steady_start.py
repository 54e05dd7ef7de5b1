"""A simulated node begins in its workload's thermal steady state, not as a cold die
drawing full power; the cold-start scenario asks for the cold one."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from nvwatch.sim.clock import ManualClock
from nvwatch.sim.nvml import SimulatedNvml
from nvwatch.sim.profiles import PROFILES

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("NVWATCH_")}
WARM_UP_TAUS = 20  # thermal time constants a cold GPU runs before it is as warm as it gets


def _warmed_up(profile: str, seed: int = 0) -> list[float]:
    """Each GPU's temperature after a cold start and WARM_UP_TAUS of the same job."""
    clock = ManualClock()
    lib = SimulatedNvml(profile, scenario="cold-start", seed=seed, clock=clock)
    clock.advance(WARM_UP_TAUS * max(g.thermal_time_constant_s for g in lib.profile.gpus))
    lib.advance()
    return [gpu.temperature_c for gpu in lib.gpus]


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("scenario", ["healthy-training", "idle"])
def test_every_gpu_starts_where_the_workload_holds_it(profile: str, scenario: str) -> None:
    start = SimulatedNvml(profile, scenario=scenario, clock=ManualClock())
    if scenario == "healthy-training":
        expected = _warmed_up(profile)
    else:  # idle GPUs are as cold at the start as after any time idle
        later = ManualClock()
        idle = SimulatedNvml(profile, scenario="idle", clock=later)
        later.advance(3600.0)
        idle.advance()
        expected = [gpu.temperature_c for gpu in idle.gpus]
    for gpu, warm in zip(start.gpus, expected, strict=True):
        # the training load is a square wave: a degree or two of ripple around the mean
        assert gpu.temperature_c == pytest.approx(warm, abs=2.0), (profile, gpu.index)


def _dump(*args: str) -> dict[str, dict[str, float]]:
    """metric -> {gpu: value} of a one-shot dump of a simulated dgx-h100 (seed 0)."""
    completed = subprocess.run(
        [*NVWATCH, "dump", "--simulate", "dgx-h100", "--sources", "nvml", "--settle", "0",
         *args],
        capture_output=True, text=True, timeout=60, env=CLEAN_ENV,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    values: dict[str, dict[str, float]] = {}
    pattern = re.compile(r'^(nvwatch_gpu_\w+)\{gpu="(\d+)"(.*)\} (\S+)$')
    for line in completed.stdout.splitlines():
        match = pattern.match(line)
        if match and ('sensor="' not in match.group(3) or 'sensor="gpu"' in match.group(3)):
            values.setdefault(match.group(1), {})[match.group(2)] = float(match.group(4))
    return values


def test_a_one_shot_dump_shows_busy_gpus_warm() -> None:
    dump = _dump()
    warm = _warmed_up("dgx-h100")
    cold = SimulatedNvml("dgx-h100", scenario="cold-start", clock=ManualClock())
    for gpu, temperature in dump["nvwatch_gpu_temperature_celsius"].items():
        index = int(gpu)
        assert dump["nvwatch_gpu_utilization_ratio"][gpu] > 0.8  # the job runs
        assert temperature == pytest.approx(warm[index], abs=2.5)
        assert temperature > cold.gpus[index].temperature_c + 15


def test_cold_start_asks_for_the_cold_gpus() -> None:
    dump = _dump("--scenario", "cold-start")
    cold = SimulatedNvml("dgx-h100", scenario="cold-start", clock=ManualClock())
    for gpu, temperature in dump["nvwatch_gpu_temperature_celsius"].items():
        assert temperature == pytest.approx(cold.gpus[int(gpu)].temperature_c, abs=1.0)
        assert dump["nvwatch_gpu_utilization_ratio"][gpu] > 0.8
