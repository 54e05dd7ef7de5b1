"""`nvwatch simulate exec`: child Python processes get the simulated library.

`exec_environment()` puts `sim/pynvml_shim` first on the child's PYTHONPATH; its
sitecustomize calls `install_from_environment()` before the child's own code runs.
Scenarios travel in the one syntax of every command (nvwatch.agent.config.SCENARIO_SYNTAX),
space-separated in NVWATCH_SIMULATE_SCENARIO; they are checked here, in the parent, so
a typo is one line from `nvwatch`, not a traceback from the child.
`simulated_job()` starts the real processes that stand for the simulated job's workers,
once for the whole command: every pynvml process it runs reports the same pids.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pynvml

from nvwatch.agent.config import ScenarioSpec, parse_scenario, split_scenarios
from nvwatch.sim.bmc.scenarios import is_bmc_scenario
from nvwatch.sim.clock import Clock, ScaledClock
from nvwatch.sim.fabric.fabric import is_ib_scenario
from nvwatch.sim.gpu.mig_layout import checked_layout
from nvwatch.sim.node import process_file, workers
from nvwatch.sim.nvml.installation import install
from nvwatch.sim.nvml.library import SimulatedNvml
from nvwatch.sim.profiles import get_profile

MIG_ENV_VAR = "NVWATCH_SIMULATE_MIG"  # the --mig layout of `simulate exec`
SCENARIO_ENV_VAR = "NVWATCH_SIMULATE_SCENARIO"
TIME_SCALE_ENV_VAR = "NVWATCH_SIMULATE_TIME_SCALE"
SHIM_DIR = Path(__file__).resolve().parents[1] / "pynvml_shim"


def _import_root() -> Path:
    """The folder a child puts on its path to `import nvwatch.sim`.

    This file is <root>/nvwatch/sim/nvml/exec_env.py, installed or in the editable
    install's tree of links (so unresolved: the link, not the checkout's file).
    """
    return Path(__file__).parents[3]


IMPORT_ROOT = _import_root()

Scenarios = str | Sequence[str | ScenarioSpec] | None


def exec_scenarios(profile: str, scenarios: Scenarios) -> tuple[ScenarioSpec, ...]:
    """The scenarios of an exec child, checked against `profile`: ValueError (one line)
    for an unknown name, a GPU the profile lacks, or an InfiniBand scenario, which has
    nothing to act on where only NVML is simulated."""
    # here, not at the top: sim/node/scenarios.py imports this package (sim.nvml)
    from nvwatch.sim.node import scenarios as node_scenarios

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
        if is_bmc_scenario(spec.name):
            raise ValueError(
                f"{spec}: a scenario of the node's chassis; `simulate exec` simulates NVML "
                "only (serve --simulate and the fleet run the chassis and its BMC too)"
            )
    return node_scenarios.checked(get_profile(profile), specs)


def exec_environment(
    profile: str,
    scenarios: Scenarios = None,
    *,
    seed: int | None = None,
    time_scale: float = 1.0,
    mig: str | None = None,
) -> dict[str, str]:
    """Environment additions so a child `python` importing pynvml sees simulated GPUs."""
    model = get_profile(profile)  # fail here, not silently in the child
    specs = exec_scenarios(profile, scenarios)
    if time_scale <= 0:
        raise ValueError("--time-scale must be greater than zero")
    if mig is not None:
        checked_layout(mig, [gpu.name for gpu in model.gpus])
    path = [str(SHIM_DIR), str(IMPORT_ROOT)]
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
        env[SCENARIO_ENV_VAR] = " ".join(str(spec) for spec in specs)
    if seed is not None:
        env["NVWATCH_SIMULATE_SEED"] = str(seed)
    if time_scale != 1.0:
        env[TIME_SCALE_ENV_VAR] = repr(time_scale)
    if mig is not None:
        env[MIG_ENV_VAR] = mig
    return env


def _library(
    profile: str,
    specs: Sequence[ScenarioSpec],
    *,
    seed: int,
    clock: Clock = time.monotonic,
    mig: str | None = None,
) -> SimulatedNvml:
    """The simulated library with the scenarios' workloads and faults (faults from their
    from=, or the default onset, in simulated time since now)."""
    from nvwatch.sim.node import scenarios as node_scenarios

    model = get_profile(profile)
    lib = SimulatedNvml(
        model,
        gpu_scenarios=node_scenarios.gpu_workloads(specs),
        workload=node_scenarios.node_workload(specs, seed),
        seed=seed,
        clock=clock,
        mig=checked_layout(mig, [gpu.name for gpu in model.gpus]) if mig else None,
    )
    for spec in specs:
        if spec.name not in node_scenarios.WORKLOADS:
            lib.start_scenario(spec.name, spec.gpu, onset_s=spec.from_s, until_s=spec.until_s)
    return lib


def simulated_job(
    profile: str, scenarios: Scenarios = None, *, seed: int = 0
) -> workers.WorkerProcesses:
    """One worker process per GPU the simulated job keeps busy (close() when done);
    its pids go to the command in NVWATCH_SIM_WORKER_PIDS."""
    lib = _library(profile, exec_scenarios(profile, scenarios), seed=seed)
    return workers.WorkerProcesses(profile, workers.busy_gpus(lib))


def install_from_environment(environ: Mapping[str, str] = os.environ) -> SimulatedNvml | None:
    """Install a SimulatedNvml described by NVWATCH_SIMULATE* (used by the exec shim)."""
    profile = environ.get("NVWATCH_SIMULATE")
    if not profile:
        return None
    scale = float(environ.get(TIME_SCALE_ENV_VAR, "1"))
    lib = _library(
        profile,
        exec_scenarios(profile, environ.get(SCENARIO_ENV_VAR) or None),
        seed=int(environ.get("NVWATCH_SIMULATE_SEED", "0")),
        clock=time.monotonic if scale == 1.0 else ScaledClock(scale),
        mig=environ.get(MIG_ENV_VAR) or None,
    )
    # the job workers `simulate exec` started, and real processes the caller says use the
    # GPUs (that variable passes through from the caller's environment)
    lib.worker_pids = workers.from_environment(environ)
    lib.process_file = process_file.from_environment(lib.profile.gpu_count, environ)
    install(lib)
    return lib
