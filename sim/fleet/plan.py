"""Planning a simulated fleet before anything runs: profiles, scenarios, names, ports, racks.

Everything here is pure and checked up front, so a bad `--profile`, `--scenario` or port
range fails with one line before a single node starts; `nvwatch.sim.fleet.fleet` runs the plan.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nvwatch.agent.config import SCENARIO_SYNTAX, ConfigError, ScenarioSpec, parse_scenario
from nvwatch.agent.inventory_bmc import bmc_target_group
from nvwatch.sim.gpu.mig_layout import MigLayoutError, checked_layout
from nvwatch.sim.node import scenarios as node_scenarios
from nvwatch.sim.node.scenarios import UnknownScenario
from nvwatch.sim.profiles import UnknownProfile, get_profile
from nvwatch.sim.scenario_names import known_scenarios

DEFAULT_CLUSTER = "sim"
DEFAULT_NODES_PER_RACK = 4  # four DGX-1 (3.2 kW each) per ~13 kW rack
NAME_PREFIX = "dgx"
_MAX_PORT = 65535


class FleetError(ValueError):
    """Bad fleet input: a profile spec, a scenario, a port range."""


def cannot_listen(what: str, host: str, port: int, exc: OSError) -> FleetError:
    """`what` could not open its server on host:port, in one line: the errno's own words
    (socket.create_server appends the address again)."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return FleetError(f"{what}: cannot listen on {host}:{port}: {reason}")


@dataclass(frozen=True)
class NodeSpec:
    """What one simulated node is, before it runs."""

    index: int
    name: str  # the `instance` label, e.g. dgx-007
    profile: str  # also the `node_class` label
    port: int  # 0: any free port, chosen when the node starts
    seed: int
    cluster: str
    rack: str
    scenarios: tuple[ScenarioSpec, ...] = ()
    mig: str | None = None  # the node's --mig layout (sim/gpu/mig_layout.py)
    bmc: str = ""  # its BMC's address on the (loopback) management network: bmc_address()


def expand_profiles(text: str, nodes: int | None = None) -> list[str]:
    """'dgx1-v100:100,dgx-a100:24' -> 124 profile names in order; 'dgx-h100' needs `nodes`.

    With counts, `nodes` may be given but must equal their sum.
    """
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise FleetError("no profile given: use PROFILE or PROFILE:COUNT[,PROFILE:COUNT...]")
    counted: list[tuple[str, int]] = []
    for item in items:
        name, sep, count_text = item.partition(":")
        name = name.strip()
        _check_profile(name)
        if not sep:
            if len(items) > 1:
                raise FleetError(
                    f"profile {name!r} has no count: in a mixed fleet write PROFILE:COUNT"
                )
            if nodes is None:
                raise FleetError(f"profile {name!r} without a count needs --nodes")
            counted.append((name, nodes))
            continue
        if not count_text.strip().isdigit() or int(count_text) < 1:
            raise FleetError(
                f"invalid node count {count_text!r} for {name}: use a whole number ≥ 1"
            )
        counted.append((name, int(count_text)))
    total = sum(count for _, count in counted)
    if nodes is not None and total != nodes:
        raise FleetError(f"--nodes {nodes} does not match the {total} nodes of {text!r}")
    if total < 1:
        raise FleetError("a fleet needs at least one node")
    return [name for name, count in counted for _ in range(count)]


def _check_profile(name: str) -> None:
    try:
        get_profile(name)
    except UnknownProfile as exc:
        raise FleetError(str(exc)) from exc


_NODE_SCENARIO = re.compile(r"^\s*(?:(\d+)\s*:)?\s*(\S+)\s*$")
_REPAIR_REQUEST = re.compile(r"^\s*(\d+)\s*(?::\s*(\S+))?\s*$")


def parse_node_scenario(text: str) -> tuple[int | None, ScenarioSpec]:
    """'3:thermal-runaway@2' -> (3, thermal-runaway on GPU 2); '5:ib-congestion@mlx5_1';
    '3:ecc-dbe@2,from=1m,until=5m' -> the same, begun at 1 min and repaired at 5 min.
    Without NODE: the scenario of every node, (None, spec): 'gpu-lost@3' means what it
    means to `serve --simulate` (and NVWATCH_SCENARIO reads the same for both)."""
    match = _NODE_SCENARIO.match(text)
    if not match:
        raise FleetError(
            f"invalid fleet scenario {text!r}: use [NODE:]{SCENARIO_SYNTAX}, "
            "e.g. 3:gpu-lost or 3:ecc-dbe@2,until=5m"
        )
    try:
        spec = parse_scenario(match.group(2))
        node_scenarios.check_name(spec.name)
        node_scenarios.check_window(spec)
    except ConfigError as exc:
        raise FleetError(str(exc)) from exc
    except UnknownScenario as exc:
        raise FleetError(
            f"unknown scenario {spec.name!r} in {text!r} (known: {', '.join(known_scenarios())})"
        ) from exc
    except ValueError as exc:
        raise FleetError(f"invalid fleet scenario {text!r}: {exc}") from exc
    return (None if match.group(1) is None else int(match.group(1))), spec


def parse_node_mig(text: str) -> tuple[range, str]:
    """'3:all:3g.40gb*2' -> (node 3, its layout); '0-15:0-3:7g.80gb' -> nodes 0..15."""
    nodes, sep, layout = text.partition(":")
    match = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", nodes)
    if not sep or match is None or not layout.strip():
        raise FleetError(
            f"invalid fleet MIG layout {text!r}: use NODE[-NODE]:LAYOUT, "
            "e.g. 0-3:all:3g.40gb,3g.40gb"
        )
    first = int(match.group(1))
    last = int(match.group(2) or first)
    if last < first:
        raise FleetError(f"invalid fleet MIG layout {text!r}: node range runs backwards")
    return range(first, last + 1), layout.strip()


def parse_repair_request(text: str) -> tuple[int, str | None]:
    """A line of a fleet's repair file: '3' (all of node 3's scenarios), '3:ecc-dbe',
    '3:ecc-dbe@2', '3:2' (GPU 2), '3:mlx5_1' -> (node, what SimulatedNode.repair takes)."""
    match = _REPAIR_REQUEST.match(text)
    if not match:
        raise FleetError(
            f"invalid repair request {text!r}: use NODE or NODE:NAME[@TARGET] or NODE:TARGET"
        )
    return int(match.group(1)), match.group(2)


def _check_target(spec: NodeSpec, scenario: ScenarioSpec) -> None:
    """Fail before anything starts when a scenario aims at a GPU or port the node lacks."""
    try:
        node_scenarios.check_target(get_profile(spec.profile), scenario)
    except ValueError as exc:
        raise FleetError(f"node {spec.index} ({spec.name}): {exc}") from exc


def node_name(index: int, prefix: str = NAME_PREFIX) -> str:
    return f"{prefix}-{index:03d}"


def bmc_address(index: int) -> str:
    """Node i's BMC on the simulated management network: 127.1.0.1 for node 0, up. As in
    the hand-over table of a real cluster, one address per node on its own network; here
    on loopback, so a probe that did open a socket would never leave the machine (the
    simulated reader opens none)."""
    number = index + 1
    if not 0 < number < 1 << 16:
        raise FleetError(f"no simulated BMC address for node {index}")
    return f"127.1.{number >> 8}.{number & 0xFF}"


def rack_name(index: int, nodes_per_rack: int = DEFAULT_NODES_PER_RACK) -> str:
    return f"rack-{index // nodes_per_rack:02d}"


def assign_ports(count: int, base_port: int) -> list[int]:
    """Node i listens on base_port + i; base_port 0 lets the OS pick a free port per node."""
    if count < 1:
        raise FleetError("a fleet needs at least one node")
    if base_port == 0:
        return [0] * count
    if not 1 <= base_port <= _MAX_PORT:
        raise FleetError(f"invalid base port {base_port}: use 1..{_MAX_PORT}, or 0 for any")
    last = base_port + count - 1
    if last > _MAX_PORT:
        raise FleetError(
            f"{count} nodes from port {base_port} would need port {last} > {_MAX_PORT}"
        )
    return [base_port + i for i in range(count)]


def management_port(count: int, base_port: int) -> int:
    """Where the fleet's management host (its BMCs' /probe) listens: right after the
    nodes' ports, BASE + N; 0 (any free port) when the nodes take any."""
    if base_port == 0:
        return 0
    port = base_port + count
    if port > _MAX_PORT:
        raise FleetError(
            f"{count} nodes from port {base_port} leave no port for the management host "
            f"({port} > {_MAX_PORT})"
        )
    return port


def plan_fleet(
    profiles: Sequence[str],
    *,
    base_port: int,
    seed: int = 0,
    scenarios: Sequence[tuple[int | None, ScenarioSpec]] = (),
    cluster: str | Sequence[str] = DEFAULT_CLUSTER,
    nodes_per_rack: int = DEFAULT_NODES_PER_RACK,
    mig: Sequence[tuple[range, str]] = (),
) -> list[NodeSpec]:
    """Node specs: names, ports, per-node seeds (seed + i) and scenarios, all checked.

    A scenario for node None runs on every node."""
    if nodes_per_rack < 1:
        raise FleetError("nodes per rack must be at least 1")
    for name in profiles:
        _check_profile(name)
    ports = assign_ports(len(profiles), base_port)
    clusters = [cluster] * len(profiles) if isinstance(cluster, str) else list(cluster)
    if len(clusters) != len(profiles):
        raise FleetError(f"{len(clusters)} cluster names for {len(profiles)} nodes")
    per_node: dict[int, list[ScenarioSpec]] = {}
    for node, scenario in scenarios:
        if node is None:
            for index in range(len(profiles)):
                per_node.setdefault(index, []).append(scenario)
            continue
        index = node
        if not 0 <= index < len(profiles):
            raise FleetError(
                f"scenario {scenario.name} for node {index}: the fleet has nodes "
                f"0..{len(profiles) - 1}"
            )
        per_node.setdefault(index, []).append(scenario)
    layouts = _mig_layouts(profiles, mig)
    specs = [
        NodeSpec(
            index=i,
            name=node_name(i),
            profile=profile,
            port=ports[i],
            seed=seed + i,
            cluster=clusters[i],
            rack=rack_name(i, nodes_per_rack),
            scenarios=tuple(per_node.get(i, ())),
            mig=layouts.get(i),
            bmc=bmc_address(i),
        )
        for i, profile in enumerate(profiles)
    ]
    for spec in specs:
        for scenario in spec.scenarios:
            _check_target(spec, scenario)
    return specs


def _mig_layouts(profiles: Sequence[str], mig: Sequence[tuple[range, str]]) -> dict[int, str]:
    """Node index -> its MIG layout, each checked against the node's GPUs now."""
    layouts: dict[int, str] = {}
    for nodes, layout in mig:
        for index in nodes:
            if not 0 <= index < len(profiles):
                raise FleetError(
                    f"MIG layout for node {index}: the fleet has nodes 0..{len(profiles) - 1}"
                )
            if index in layouts:
                raise FleetError(f"node {index} is given two MIG layouts")
            gpus = [model.name for model in get_profile(profiles[index]).gpus]
            try:
                checked_layout(layout, gpus)
            except MigLayoutError as exc:
                raise FleetError(f"node {index} ({profiles[index]}): {exc}") from exc
            layouts[index] = layout
    return layouts


def node_labels(spec: NodeSpec) -> dict[str, str]:
    """The labels every series of node `spec` carries, its agent's and its BMC's."""
    return {
        "cluster": spec.cluster,
        "rack": spec.rack,
        "node_class": spec.profile,
        "instance": spec.name,
    }


def file_sd_groups(
    targets: Sequence[tuple[NodeSpec, str]],
) -> list[dict[str, Any]]:
    """Prometheus file_sd target groups: one per node, so each carries its own labels."""
    return [{"targets": [address], "labels": node_labels(spec)} for spec, address in targets]


def bmc_file_sd_groups(specs: Sequence[NodeSpec]) -> list[dict[str, Any]]:
    """The `nvwatch-bmc` job's file_sd groups, one per node, as `nvwatch inventory` writes
    them."""
    return [bmc_target_group(spec.bmc, node_labels(spec)) for spec in specs]
