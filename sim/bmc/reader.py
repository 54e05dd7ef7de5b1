"""`SimulatedBmcReader`: the BmcReader of the `bmc` source over simulated nodes' BMCs.

It answers for the BMC addresses it was given, each its node's chassis model read now
(sim/bmc/model.py) and described by its SDR (sim/bmc/sdr.py), so the probe and the
interpreter run exactly as they do against a real BMC. It never opens a socket: an
address is only a key. A target it does not know, or a node whose BMC is unreachable
(the `bmc-unreachable` scenario), answers nothing: BmcError after the module's timeout,
capped at NO_ANSWER_WAIT_CAP_S so a test of a dead BMC does not wait ipmi_exporter's
seconds. Any user and password are accepted: authentication is tested on ipmi_sim.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from nvwatch.agent.sources.bmc.reading import (
    DEFAULT_IPMI_PORT,
    DEFAULT_MODULE,
    BmcError,
    BmcReading,
    Module,
    SensorReading,
    Target,
)
from nvwatch.sim.bmc.sdr import SensorRecord, dcmi_watts, sensor_records
from nvwatch.sim.node.node import SimulatedNode

NO_ANSWER_WAIT_CAP_S = 1.0
# the module a simulated node's or fleet's /probe uses when no --bmc-config names one:
# every sensor and DCMI power; the inlet of a vendor that gives it no entity by its name
SIMULATED_MODULE = Module(
    name=DEFAULT_MODULE,
    user="admin",
    password="admin",
    privilege="admin",
    timeout_s=2.0,
    collectors=frozenset({"ipmi", "dcmi"}),
    inlet_pattern=r"(?i)\binlet\b",
)


class SimulatedBmcReader:
    """Reads the simulated BMC at each address of `nodes` (address -> node); addresses
    may be added while it serves (`add`)."""

    def __init__(
        self,
        nodes: Mapping[str, SimulatedNode] | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._nodes: dict[str, SimulatedNode] = {}
        self._records: dict[str, tuple[SensorRecord, ...]] = {}
        self._lock = threading.Lock()
        self._sleep = sleep
        for address, node in (nodes or {}).items():
            self.add(address, node)

    def add(self, address: str, node: SimulatedNode) -> None:
        with self._lock:
            self._nodes[address] = node
            self._records[address] = sensor_records(node.bmc)

    @property
    def addresses(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._nodes)

    def read(self, target: Target, module: Module) -> BmcReading:
        started = time.perf_counter()
        with self._lock:
            node = self._nodes.get(target.host) if target.port == DEFAULT_IPMI_PORT else None
            records = self._records.get(target.host, ())
        state = node.read_bmc() if node is not None else None
        if state is None or not state.answering:
            self._sleep(min(module.timeout_s, NO_ANSWER_WAIT_CAP_S))
            raise BmcError(f"no answer from {target}")
        sensors: tuple[SensorReading, ...] = ()
        if "ipmi" in module.collectors:
            excluded = module.exclude_sensor_ids
            sensors = tuple(r.read(state) for r in records if r.record_id not in excluded)
        dcmi = None
        if "dcmi" in module.collectors and node is not None and node.bmc.chassis.dcmi:
            dcmi = dcmi_watts(state)
        return BmcReading(sensors, dcmi, time.perf_counter() - started)
