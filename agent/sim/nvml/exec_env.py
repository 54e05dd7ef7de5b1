"""`nvwatch simulate exec`: child Python processes get the simulated library.

`exec_environment()` puts `agent/sim/pynvml_shim` first on the child's PYTHONPATH; its
sitecustomize calls `install_from_environment()` before the child's own code runs.
`simulated_job()` starts the real processes that stand for the simulated job's workers,
once for the whole command: every pynvml process it runs reports the same pids.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pynvml

from agent.sim import process_file, scenarios, workers
from agent.sim.mig_layout import checked_layout
from agent.sim.nvml.installation import install
from agent.sim.nvml.library import SimulatedNvml
from agent.sim.profiles import get_profile

MIG_ENV_VAR = "NVWATCH_SIMULATE_MIG"  # the --mig layout of `simulate exec`
SHIM_DIR = Path(__file__).resolve().parents[1] / "pynvml_shim"
REPO_ROOT = Path(__file__).resolve().parents[3]


def exec_environment(
    profile: str,
    scenario: str | None = None,
    *,
    seed: int | None = None,
    mig: str | None = None,
) -> dict[str, str]:
    """Environment additions so a child `python` importing pynvml sees simulated GPUs."""
    model = get_profile(profile)  # fail here, not silently in the child
    if scenario is not None:
        scenarios.validate(scenario)
    if mig is not None:
        checked_layout(mig, [gpu.name for gpu in model.gpus])
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
    if scenario is not None:
        env["NVWATCH_SIMULATE_SCENARIO"] = scenario
    if seed is not None:
        env["NVWATCH_SIMULATE_SEED"] = str(seed)
    if mig is not None:
        env[MIG_ENV_VAR] = mig
    return env


def simulated_job(profile: str, scenario: str | None = None) -> workers.WorkerProcesses:
    """One worker process per GPU the simulated job keeps busy (close() when done);
    its pids go to the command in NVWATCH_SIM_WORKER_PIDS."""
    lib = SimulatedNvml(profile, scenario=scenario)
    return workers.WorkerProcesses(profile, workers.busy_gpus(lib))


def install_from_environment(environ: Mapping[str, str] = os.environ) -> SimulatedNvml | None:
    """Install a SimulatedNvml described by NVWATCH_SIMULATE* (used by the exec shim)."""
    profile = environ.get("NVWATCH_SIMULATE")
    if not profile:
        return None
    mig = environ.get(MIG_ENV_VAR) or None
    model = get_profile(profile)
    lib = SimulatedNvml(
        model,
        scenario=environ.get("NVWATCH_SIMULATE_SCENARIO") or None,
        seed=int(environ.get("NVWATCH_SIMULATE_SEED", "0")),
        mig=checked_layout(mig, [gpu.name for gpu in model.gpus]) if mig else None,
    )
    # the job workers `simulate exec` started, and real processes the caller says use the
    # GPUs (that variable passes through from the caller's environment)
    lib.worker_pids = workers.from_environment(environ)
    lib.process_file = process_file.from_environment(lib.profile.gpu_count, environ)
    install(lib)
    return lib
