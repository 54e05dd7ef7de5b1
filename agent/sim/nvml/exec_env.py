"""`nvwatch simulate exec`: child Python processes get the simulated library.

`exec_environment()` puts `agent/sim/pynvml_shim` first on the child's PYTHONPATH; its
sitecustomize calls `install_from_environment()` before the child's own code runs.
Scenarios travel in the one syntax of every command (agent.config.SCENARIO_SYNTAX),
space-separated in NVWATCH_SIMULATE_SCENARIO; they are checked here, in the parent, so
a typo is one line from `nvwatch`, not a traceback from the child.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pynvml

from agent.config import ScenarioSpec, parse_scenario, split_scenarios
from agent.sim.clock import Clock, ScaledClock
from agent.sim.fabric import is_ib_scenario
from agent.sim.nvml.installation import install
from agent.sim.nvml.library import SimulatedNvml
from agent.sim.profiles import get_profile
from agent.sim.workload import Workload

SHIM_DIR = Path(__file__).resolve().parents[1] / "pynvml_shim"
REPO_ROOT = Path(__file__).resolve().parents[3]


def exec_scenarios(
    profile: str, scenarios: str | Sequence[str | ScenarioSpec] | None
) -> tuple[ScenarioSpec, ...]:
    """The scenarios of an exec child, checked against `profile`: ValueError (one line)
    for an unknown name, a GPU the profile lacks, or an InfiniBand scenario, which has
    nothing to act on where only NVML is simulated."""
    # here, not at the top: node_scenarios imports this package (agent.sim.nvml)
    from agent.sim import node_scenarios

    if scenarios is None:
        return ()
    texts = split_scenarios(scenarios) if isinstance(scenarios, str) else scenarios
    specs = [s if isinstance(s, ScenarioSpec) else parse_scenario(s) for s in texts]
    for spec in specs:
        if is_ib_scenario(spec.name):
            raise ValueError(
                f"{spec}: an InfiniBand scenario; `simulate exec` simulates NVML only "
                "(serve or dump --simulate run the InfiniBand fabric too)"
            )
    return node_scenarios.checked(get_profile(profile), specs)


def exec_environment(
    profile: str,
    scenarios: str | Sequence[str | ScenarioSpec] | None = None,
    *,
    seed: int | None = None,
    time_scale: float = 1.0,
) -> dict[str, str]:
    """Environment additions so a child `python` importing pynvml sees simulated GPUs."""
    get_profile(profile)  # fail here, not silently in the child
    specs = exec_scenarios(profile, scenarios)
    if time_scale <= 0:
        raise ValueError("--time-scale must be greater than zero")
    path = [str(SHIM_DIR), str(REPO_ROOT)]
    existing = os.environ.get("PYTHONPATH")
    if existing:
        path.append(existing)
    env = {
        "PYTHONPATH": os.pathsep.join(path),
        "NVWATCH_SIMULATE": profile,
        # where this interpreter's pynvml lives, for a child interpreter without one
        "NVWATCH_PYNVML_DIR": str(Path(pynvml.__file__).resolve().parent),
    }
    if specs:
        env["NVWATCH_SIMULATE_SCENARIO"] = " ".join(str(spec) for spec in specs)
    if seed is not None:
        env["NVWATCH_SIMULATE_SEED"] = str(seed)
    if time_scale != 1.0:
        env["NVWATCH_SIMULATE_TIME_SCALE"] = repr(time_scale)
    return env


def install_from_environment(environ: Mapping[str, str] = os.environ) -> SimulatedNvml | None:
    """Install a SimulatedNvml described by NVWATCH_SIMULATE* (used by the exec shim)."""
    from agent.sim import node_scenarios

    profile = environ.get("NVWATCH_SIMULATE")
    if not profile:
        return None
    specs = exec_scenarios(profile, environ.get("NVWATCH_SIMULATE_SCENARIO") or None)
    seed = int(environ.get("NVWATCH_SIMULATE_SEED", "0"))
    scale = float(environ.get("NVWATCH_SIMULATE_TIME_SCALE", "1"))
    clock: Clock = time.monotonic if scale == 1.0 else ScaledClock(scale)
    lib = SimulatedNvml(
        profile,
        gpu_scenarios=node_scenarios.gpu_workloads(specs),
        workload=Workload(kind=node_scenarios.node_workload(specs), seed=seed),
        seed=seed,
        clock=clock,
    )
    for spec in specs:
        if spec.name not in node_scenarios.WORKLOADS:
            lib.start_scenario(spec.name, spec.gpu, onset_s=spec.from_s, until_s=spec.until_s)
    install(lib)
    return lib
