"""A simulated node's scenarios: which part runs each one, when it ends, how it is repaired.

A scenario is a `ScenarioSpec` (`NAME[@TARGET][,from=DURATION][,until=DURATION]`, parsed
by `nvwatch.agent.config.parse_scenario`). Workload scenarios (`idle`, `healthy-training`) set
what the GPUs run, the whole node's without a target or one GPU's with one. Fault
scenarios go to the simulated NVML (GPU faults, `nvml-driver-broken`), to the simulated
fabric (InfiniBand ports, `ib-hca-vanish`), to the host (`cpu-starved`: sim/node/host.py)
or to the chassis its BMC watches (`hot-aisle`, `fan-failure`, `psu-failure`,
`bmc-unreachable`: sim/bmc/scenarios.py), each with its own repair. Faults that slow
what they hit take `slowdown=S` (SLOWDOWN_SCENARIOS in sim/scenario_names.py).
Everything is checked here before a node builds anything, so a fleet refuses bad input
up front.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nvwatch.agent.config import ScenarioSpec, is_index, parse_scenario
from nvwatch.sim import scenario_names
from nvwatch.sim.bmc import scenarios as bmc_scenarios
from nvwatch.sim.bmc.classes import bmc_class
from nvwatch.sim.bmc.model import SimulatedBmc
from nvwatch.sim.bmc.scenarios import is_bmc_scenario
from nvwatch.sim.fabric.fabric import (
    SimulatedFabric,
    is_ib_scenario,
)
from nvwatch.sim.gpu import scenarios
from nvwatch.sim.node.host import SimulatedHost, is_host_scenario
from nvwatch.sim.nvml import SimulatedNvml
from nvwatch.sim.profiles import Profile
from nvwatch.sim.scenario_names import known_scenarios, onset
from nvwatch.sim.workload import Workload

# scenarios that change what GPUs are doing rather than breaking a part of the node
WORKLOADS = frozenset(scenario_names.WORKLOAD_SCENARIOS)


class UnknownScenario(ValueError):
    pass


def check_name(name: str) -> None:
    if name not in known_scenarios():
        raise UnknownScenario(f"unknown scenario {name!r} (known: {', '.join(known_scenarios())})")


def check_window(spec: ScenarioSpec) -> None:
    """ValueError unless the spec's from=/until= fit the scenario."""
    if spec.slowdown is not None and spec.name not in scenario_names.SLOWDOWN_SCENARIOS:
        raise ValueError(
            f"{spec}: {spec.name} takes no slowdown= (those that do: "
            f"{', '.join(scenario_names.SLOWDOWN_SCENARIOS)})"
        )
    if spec.from_s is None and spec.until_s is None:
        return
    if spec.name in WORKLOADS:
        raise ValueError(f"{spec}: {spec.name} sets the workload; it takes no from= or until=")
    begin = onset(spec.name) if spec.from_s is None else spec.from_s
    if spec.until_s is not None and spec.until_s <= begin:
        raise ValueError(f"{spec}: until= must come after the fault begins at {begin:g}s")


def check_target(profile: Profile, spec: ScenarioSpec) -> None:
    """ValueError unless the GPU, HCA, fan or supply the spec aims at exists on `profile`."""
    name, target = spec.name, spec.target
    if is_bmc_scenario(name):
        bmc_scenarios.check_target(profile, bmc_class(profile), spec)
    elif is_ib_scenario(name):
        devices = [nic.device for nic in profile.nics]
        if not devices:
            raise ValueError(f"{profile.name} has no InfiniBand port for {name}")
        if target is not None and target not in devices:
            raise ValueError(
                f"no device {target!r} in {profile.name} for {name} (devices: {', '.join(devices)})"
            )
    elif name in scenario_names.DRIVER_SCENARIOS or is_host_scenario(name):
        if target is not None:
            raise ValueError(f"{spec}: {name} is node-wide; it takes no @TARGET")
    elif target is not None and (spec.gpu is None or spec.gpu >= profile.gpu_count):
        raise ValueError(
            f"{spec}: no GPU {target} in {profile.name}; {name} needs a GPU index "
            f"0..{profile.gpu_count - 1}"
        )
    if name == "nvlink-degraded" and not any(profile.nvlinks):
        raise ValueError(f"{profile.name} has no NVLink for nvlink-degraded")


def checked(profile: Profile, specs: Iterable[ScenarioSpec]) -> tuple[ScenarioSpec, ...]:
    """The specs, each checked: UnknownScenario for a name, ValueError for the rest."""
    result = tuple(specs)
    for spec in result:
        check_name(spec.name)
        check_window(spec)
        check_target(profile, spec)
    return result


def node_workload(specs: Sequence[ScenarioSpec], seed: int = 0) -> Workload:
    """The whole node's workload: the last untargeted workload scenario's, else training.

    A targeted one (`healthy-training@7`) sets only its GPU's, whatever the order."""
    name = "healthy-training"
    for spec in specs:
        if spec.target is None and spec.name in WORKLOADS:
            name = spec.name
    return scenarios.workload_of(name, Workload(seed=seed))


def gpu_workloads(specs: Sequence[ScenarioSpec]) -> dict[int, str]:
    """GPU index -> the workload scenario aimed at it."""
    return {s.gpu: s.name for s in specs if s.name in WORKLOADS and s.gpu is not None}


def start(
    nvml: SimulatedNvml,
    fabric: SimulatedFabric,
    bmc: SimulatedBmc,
    specs: Sequence[ScenarioSpec],
    host: SimulatedHost | None = None,
) -> list[str]:
    """Start every fault scenario where it runs; returns what started ('name@target')."""
    started: list[str] = []
    for spec in specs:
        if spec.name in WORKLOADS:
            continue  # already in the workloads the node was built with
        if is_bmc_scenario(spec.name):
            started.append(bmc.start_scenario(spec))
        elif is_host_scenario(spec.name):
            if host is None:
                raise ValueError(f"{spec}: this node simulates no host")
            started.append(host.start_scenario(spec))
        elif is_ib_scenario(spec.name):
            started += fabric.start_scenario(
                spec.name,
                spec.target,
                since_s=spec.from_s,
                until_s=spec.until_s,
                slowdown=spec.slowdown,
            )
        else:
            started.append(
                nvml.start_scenario(
                    spec.name,
                    spec.gpu,
                    onset_s=spec.from_s,
                    until_s=spec.until_s,
                    slowdown=spec.slowdown,
                )
            )
    return started


def repair(
    nvml: SimulatedNvml,
    fabric: SimulatedFabric,
    bmc: SimulatedBmc,
    what: ScenarioSpec | str | None,
    host: SimulatedHost | None = None,
) -> list[str]:
    """End and repair the running scenarios `what` selects; returns them ('name@target').

    `what`: None (all), a scenario name, a target (GPU index or HCA device: all on it),
    'NAME@TARGET' (a fan or supply: `fan-failure@2`) or a ScenarioSpec. Nothing running
    that matches gives [].
    """
    name, target = _selection(bmc.profile, what)
    if name is not None and is_bmc_scenario(name):
        return bmc.end_scenarios(name, target)
    if name is not None and is_host_scenario(name):
        return host.end_scenarios(name) if host is not None else []
    gpu_side = name is None or name in scenario_names.NVML_SCENARIOS
    fabric_side = name is None or is_ib_scenario(name)
    repaired: list[str] = bmc.end_scenarios() if name is None and target is None else []
    if name is None and target is None and host is not None:
        repaired += host.end_scenarios()
    if gpu_side and (target is None or is_index(target)):
        repaired += nvml.end_scenarios(name, None if target is None else int(target))
    if fabric_side and (target is None or not is_index(target)):
        repaired += fabric.end_scenarios(name, target)
    return repaired


def _selection(profile: Profile, what: ScenarioSpec | str | None) -> tuple[str | None, str | None]:
    """(scenario name or None, target or None) for repair(); ValueError for a typo."""
    if what is None:
        return None, None
    if isinstance(what, str):
        if "@" in what:
            what = parse_scenario(what)
        elif what in known_scenarios():
            return what, None
        else:
            what = ScenarioSpec("", what)
    if what.name:
        check_name(what.name)
    if is_bmc_scenario(what.name):
        if what.target is not None:
            bmc_scenarios.check_target(profile, bmc_class(profile), what)
        return what.name, what.target
    target = what.target
    devices = [nic.device for nic in profile.nics]
    gpu = what.gpu
    if target is not None and target not in devices and (gpu is None or gpu >= profile.gpu_count):
        raise ValueError(
            f"nothing called {target!r} on {profile.name}: give a scenario, a GPU index "
            f"0..{profile.gpu_count - 1} or an HCA ({', '.join(devices) or 'none'})"
        )
    return what.name or None, target
