"""Every public pynvml nvmlDevice* query reaches an answer from the simulated library:
statically (each C function exists) and live, under `nvwatch simulate exec`, on every GPU
of every profile, from a script that knows nothing of nvwatch."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from nvwatch.sim.nvml import SimulatedNvml
from nvwatch.sim.profiles import PROFILES
from tests.sim.every_device_query import queries

SCRIPT = Path(__file__).with_name("every_device_query.py")


def c_functions(wrapper: str) -> set[str]:
    """The C symbols a pynvml wrapper looks up, directly or through wrappers it calls."""
    seen: set[str] = set()
    pending, symbols = [wrapper], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        source = inspect.getsource(getattr(pynvml, name))
        symbols |= set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', source))
        called = set(re.findall(r"\b(nvmlDevice\w+)\(", source)) - {name}
        pending += [c for c in called if callable(getattr(pynvml, c, None))]
    return symbols


def missing(wrapper: str) -> set[str]:
    return {symbol for symbol in c_functions(wrapper) if not hasattr(SimulatedNvml, symbol)}


def test_the_script_covers_every_device_query_pynvml_has() -> None:
    names = queries()
    assert len(names) > 200  # nvidia-ml-py 13.x: ~230 read-only device wrappers
    assert "nvmlDeviceGetP2PStatus" in names and "nvmlDeviceSetPersistenceMode" not in names


def test_every_query_finds_its_c_functions() -> None:
    lacking = {name: missing(name) for name in queries()}
    assert {name: symbols for name, symbols in lacking.items() if symbols} == {}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_query_on_every_gpu_under_simulate_exec(profile: str) -> None:
    command = [sys.executable, str(SCRIPT)]
    nvwatch = [sys.executable, "-m", "nvwatch.agent.cli", "simulate", "exec", "--profile", profile]
    done = subprocess.run([*nvwatch, "--", *command], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    gpus = PROFILES[profile].gpu_count
    per_gpu = len(queries()) + 1  # and the drain-state lookup
    assert len(rows) == gpus * per_gpu
    assert {row["gpu"] for row in rows} == set(range(gpus))
    outcomes = {row["outcome"] for row in rows}
    assert outcomes <= {"ok", "refused", "NVMLError_NotSupported", "NVMLError_NotFound"}
    by_name = {(row["gpu"], row["fn"]): row for row in rows}
    # calls the simulator once left unanswered: answered, with the Linux driver's answers
    for gpu in range(gpus):
        assert by_name[(gpu, "nvmlDeviceGetDriverModel")]["outcome"] == "NVMLError_NotSupported"
        assert by_name[(gpu, "nvmlDeviceGetNumaNodeId")]["outcome"] == "NVMLError_NotSupported"
        for name in ("nvmlDeviceGetDisplayActive", "nvmlDeviceGetTopologyCommonAncestor"):
            assert by_name[(gpu, name)]["outcome"] == "ok"
        assert by_name[(gpu, "nvmlDeviceGetP2PStatus")]["outcome"] == "ok"
