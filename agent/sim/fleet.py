"""A simulated fleet: many simulated DGX nodes, each a real agent on its own port, in one process.

Each node is what `nvwatch serve --simulate PROFILE` runs (a `SimulatedNode` behind an
`Agent` and its HTTP server), so Prometheus scrapes the same code path as on a real
cluster. What makes 128 nodes fit on two cores:

- One pynvml in the process: `DispatchingNvml` is installed once, and each node's
  `SimulatedNvml` is bound with `bind()` in a context of its own before that node's
  `Agent` is built; the poller and the XID listener carry that context to their threads.
- Simulated time moves in steps. The simulated NVML integrates its physics up to
  `clock()` on every C call, so a continuously running clock makes every one of the
  hundreds of calls of a poll integrate again. `SteppedClock` only moves when the one
  fleet-wide ticker thread steps it, once per interval, and then calls every node's
  `tick()` (NVML state and the sysfs files); between ticks a call reads settled state.
- `time_scale` makes simulated time run faster than real time, so a thermal runaway
  that takes minutes on real hardware crosses slowdown within seconds of a test.

The host source reads the real machine: every simulated node reports the same host.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.app import Agent
from agent.config import AgentConfig, ScenarioSpec, parse_scenario
from agent.exposition.render import Exposition
from agent.server import Health, MetricsServer
from agent.sim import nvml_lib
from agent.sim.fabric import IB_SCENARIOS
from agent.sim.node import SimulatedNode, known_scenarios
from agent.sim.profiles import UnknownProfile, get_profile
from agent.sources.registry import build_sources

log = logging.getLogger(__name__)

FLEET_SOURCES = ("nvml", "infiniband", "host")
DEFAULT_CLUSTER = "sim"
DEFAULT_NODES_PER_RACK = 4  # four DGX-1 (3.2 kW each) per ~13 kW rack
NAME_PREFIX = "dgx"
_MAX_PORT = 65535


class FleetError(ValueError):
    """Bad fleet input: a profile spec, a scenario, a port range."""


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


# --- parsing -------------------------------------------------------------------------------


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


_NODE_SCENARIO = re.compile(r"^\s*(\d+)\s*:\s*(\S+)\s*$")


def parse_node_scenario(text: str) -> tuple[int, ScenarioSpec]:
    """'3:thermal-runaway@2' -> (3, thermal-runaway on GPU 2); '5:ib-congestion@mlx5_1'."""
    match = _NODE_SCENARIO.match(text)
    if not match:
        raise FleetError(
            f"invalid fleet scenario {text!r}: use NODE:NAME[@TARGET], e.g. 3:gpu-lost"
        )
    spec = parse_scenario(match.group(2))
    if spec.name not in known_scenarios():
        raise FleetError(
            f"unknown scenario {spec.name!r} in {text!r} (known: {', '.join(known_scenarios())})"
        )
    return int(match.group(1)), spec


def _check_target(spec: NodeSpec, scenario: ScenarioSpec) -> None:
    """Fail before anything starts when a scenario aims at a GPU or port the node lacks."""
    profile = get_profile(spec.profile)
    where = f"node {spec.index} ({spec.name}, {spec.profile})"
    if scenario.name in IB_SCENARIOS:
        devices = [nic.device for nic in profile.nics]
        if not devices:
            raise FleetError(f"{where} has no InfiniBand port for {scenario.name}")
        if scenario.target is not None and scenario.target not in devices:
            raise FleetError(
                f"{where} has no device {scenario.target!r} (devices: {', '.join(devices)})"
            )
    elif scenario.target is not None:
        gpu = scenario.gpu
        if gpu is None or not 0 <= gpu < profile.gpu_count:
            raise FleetError(
                f"{where}: {scenario.name}@{scenario.target} needs a GPU index "
                f"0..{profile.gpu_count - 1}"
            )
    if scenario.name == "nvlink-degraded" and not any(profile.nvlinks):
        raise FleetError(f"{where} has no NVLink for nvlink-degraded")


def node_name(index: int, prefix: str = NAME_PREFIX) -> str:
    return f"{prefix}-{index:03d}"


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


def plan_fleet(
    profiles: Sequence[str],
    *,
    base_port: int,
    seed: int = 0,
    scenarios: Sequence[tuple[int, ScenarioSpec]] = (),
    cluster: str | Sequence[str] = DEFAULT_CLUSTER,
    nodes_per_rack: int = DEFAULT_NODES_PER_RACK,
) -> list[NodeSpec]:
    """Node specs: names, ports, per-node seeds (seed + i) and scenarios, all checked."""
    if nodes_per_rack < 1:
        raise FleetError("nodes per rack must be at least 1")
    for name in profiles:
        _check_profile(name)
    ports = assign_ports(len(profiles), base_port)
    clusters = [cluster] * len(profiles) if isinstance(cluster, str) else list(cluster)
    if len(clusters) != len(profiles):
        raise FleetError(f"{len(clusters)} cluster names for {len(profiles)} nodes")
    per_node: dict[int, list[ScenarioSpec]] = {}
    for index, scenario in scenarios:
        if not 0 <= index < len(profiles):
            raise FleetError(
                f"scenario {scenario.name} for node {index}: the fleet has nodes "
                f"0..{len(profiles) - 1}"
            )
        per_node.setdefault(index, []).append(scenario)
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
        )
        for i, profile in enumerate(profiles)
    ]
    for spec in specs:
        for scenario in spec.scenarios:
            _check_target(spec, scenario)
    return specs


def file_sd_groups(
    targets: Sequence[tuple[NodeSpec, str]],
) -> list[dict[str, Any]]:
    """Prometheus file_sd target groups: one per node, so each carries its own labels."""
    return [
        {
            "targets": [address],
            "labels": {
                "cluster": spec.cluster,
                "rack": spec.rack,
                "node_class": spec.profile,
                "instance": spec.name,
            },
        }
        for spec, address in targets
    ]


def write_json_atomic(path: Path, data: object) -> None:
    """Prometheus re-reads file_sd files on change: it must never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# --- running -------------------------------------------------------------------------------


class SteppedClock:
    """Simulated seconds that move only on `step()`, `scale` times as fast as real time.

    With `running=False` simulated time holds still until `run()`: a test starts the
    fleet and its Prometheus first, so the faults begin under a scraping Prometheus.
    """

    def __init__(self, scale: float = 1.0, *, running: bool = True) -> None:
        if scale <= 0:
            raise ValueError("time scale must be positive")
        self.scale = scale
        self._now = time.monotonic()
        self._base = self._now
        self._since: float | None = time.monotonic() if running else None
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def run(self) -> None:
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()

    def step(self) -> float:
        with self._lock:
            if self._since is not None:
                self._now = self._base + (time.monotonic() - self._since) * self.scale
            return self._now


class FleetNode:
    """One running simulated node: simulator, agent and HTTP server."""

    def __init__(self, spec: NodeSpec, sim: SimulatedNode, agent: Agent) -> None:
        self.spec = spec
        self.sim = sim
        self.agent = agent
        self.listening = False
        self._lock = threading.Lock()
        try:
            # the node's own callables, not the agent's: once the node is stopped, a
            # scraper's open keep-alive connection must fail too, as with a dead process
            self.server = MetricsServer(
                agent.config.listen_host,
                agent.config.listen_port,
                exposition=self._exposition,
                health=self._health,
            )
        except OSError as exc:
            where = f"{agent.config.listen_host}:{agent.config.listen_port}"
            raise FleetError(f"{spec.name}: cannot listen on {where}: {exc.strerror}") from exc

    def _exposition(self) -> Exposition | None:
        return self.agent.exposition() if self.listening else None

    def _health(self) -> Health:
        return self.agent.health() if self.listening else Health(False, "agent stopped")

    @property
    def index(self) -> int:
        return self.spec.index

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def address(self) -> str:
        return f"{self.agent.config.listen_host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def start(self) -> None:
        # the first poll before listening: the first scrape already has data
        self.agent.poller.poll_once()
        self.agent.poller.start()
        self.listening = True
        self.server.start()

    def stop(self) -> None:
        """The agent dies: its server stops listening and its poll loop ends."""
        with self._lock:
            if not self.listening:
                return
            self.listening = False
        self.server.stop()
        self.agent.poller.stop(timeout=1.0)


class Fleet:
    """N simulated nodes in one process, each an agent on its own port on `listen_host`."""

    def __init__(
        self,
        specs: Sequence[str],
        base_port: int = 9500,
        interval: float = 15.0,
        scenarios: Sequence[tuple[int, ScenarioSpec]] | Mapping[int, Sequence[ScenarioSpec]] = (),
        seed: int = 0,
        *,
        time_scale: float = 1.0,
        listen_host: str = "127.0.0.1",
        cluster: str | Sequence[str] = DEFAULT_CLUSTER,
        nodes_per_rack: int = DEFAULT_NODES_PER_RACK,
        hold_time: bool = False,
    ) -> None:
        """`hold_time`: simulated time stands still until `run_time()` (see SteppedClock)."""
        if interval <= 0:
            raise FleetError("interval must be positive")
        if time_scale <= 0:
            raise FleetError("time scale must be positive")
        pairs = (
            [(i, s) for i, specs_of in scenarios.items() for s in specs_of]
            if isinstance(scenarios, Mapping)
            else list(scenarios)
        )
        self.specs = plan_fleet(
            specs,
            base_port=base_port,
            seed=seed,
            scenarios=pairs,
            cluster=cluster,
            nodes_per_rack=nodes_per_rack,
        )
        self.interval = interval
        self.listen_host = listen_host
        self.clock = SteppedClock(time_scale, running=not hold_time)
        self.nodes: list[FleetNode] = []
        self._root: Path | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self.tick_cpu_seconds = 0.0  # CPU time the last round of ticks took
        self.ticks = 0
        self._started = False

    @property
    def root(self) -> Path | None:
        """The temporary directory holding every node's sysfs tree while running."""
        return self._root

    def start(self) -> None:
        """Build and start every node; on any failure, stop what started and re-raise."""
        if self._started:
            raise RuntimeError("fleet already started")
        self._started = True
        # one library for the whole process; each node's threads find their own through
        # the context they were created in
        nvml_lib.install(nvml_lib.DispatchingNvml())
        self._root = Path(tempfile.mkdtemp(prefix="nvwatch-fleet-"))
        try:
            for spec in self.specs:
                self.nodes.append(self._start_node(spec))
        except BaseException:
            self.stop()
            raise
        self._ticker = threading.Thread(
            target=self._tick_loop, name="nvwatch-fleet-tick", daemon=True
        )
        self._ticker.start()
        log.info(
            "simulated fleet: %d nodes on %s, every %gs, time x%g",
            len(self.nodes),
            self.listen_host,
            self.interval,
            self.clock.scale,
        )

    def _start_node(self, spec: NodeSpec) -> FleetNode:
        assert self._root is not None
        sysfs = self._root / spec.name
        sysfs.mkdir()
        try:
            sim = SimulatedNode(
                spec.profile, spec.scenarios, seed=spec.seed, clock=self.clock, sysfs_root=sysfs
            )
        except ValueError as exc:
            raise FleetError(f"node {spec.index} ({spec.name}): {exc}") from exc
        config = AgentConfig(
            listen_host=self.listen_host,
            listen_port=spec.port,
            interval=self.interval,
            sources=FLEET_SOURCES,
            sysfs_root=sysfs,
            simulate=spec.profile,
            scenarios=spec.scenarios,
            seed=spec.seed,
        )

        def build() -> Agent:
            # everything created in here (the poller's threads, the XID listener they
            # start) inherits this binding
            nvml_lib.bind(sim.nvml)
            return Agent(config, build_sources(config))

        agent = contextvars.Context().run(build)
        try:
            node = FleetNode(spec, sim, agent)
        except FleetError:
            agent.poller.stop(timeout=0.5)
            raise
        node.start()
        return node

    def _tick_loop(self) -> None:
        """Step the clock once per interval, then tick the nodes spread over the interval.

        All nodes in one burst would hold the GIL for seconds and starve the agents'
        polls into their timeouts; spread out, each node's tick is a short slice.
        """
        started = time.monotonic()
        while not self._stop.wait(max(0.0, started + self.interval - time.monotonic())):
            started = time.monotonic()
            cpu_started = time.thread_time()
            self.clock.step()
            slot = self.interval / max(1, len(self.nodes))
            for position, node in enumerate(self.nodes):
                try:
                    node.sim.tick()
                except Exception:
                    log.exception("simulated node %s failed to tick", node.name)
                if self._stop.wait(max(0.0, started + (position + 1) * slot - time.monotonic())):
                    return
            self.tick_cpu_seconds = time.thread_time() - cpu_started
            self.ticks += 1

    def run_time(self) -> None:
        """Let simulated time run (for a fleet built with hold_time=True)."""
        self.clock.run()

    def stop_node(self, index: int) -> None:
        """Kill node `index`'s agent: Prometheus' scrapes of it now fail."""
        self.nodes[index].stop()

    def targets(self) -> list[tuple[NodeSpec, str]]:
        if self.nodes:
            return [(n.spec, n.address) for n in self.nodes]
        return [(s, f"{self.listen_host}:{s.port}") for s in self.specs]

    def file_sd(self) -> list[dict[str, Any]]:
        return file_sd_groups(self.targets())

    def write_file_sd(self, path: Path) -> None:
        write_json_atomic(path, self.file_sd())

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(5.0)
        if self.nodes:
            # each agent's shutdown waits on its threads; in parallel, 128 nodes stop in
            # about the time one does
            with ThreadPoolExecutor(max_workers=min(32, len(self.nodes))) as pool:
                list(pool.map(_stop_node_quietly, self.nodes))
        for node in self.nodes:
            node.sim.close()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        nvml_lib.uninstall()

    def __enter__(self) -> Fleet:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def _stop_node_quietly(node: FleetNode) -> None:
    try:
        node.stop()
    except Exception:
        log.exception("stopping %s failed", node.name)
