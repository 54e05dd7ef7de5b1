"""What the history writes for a node's BMC is what /probe answers for it at that instant.

The generator interprets the simulated BMC's readings without a server (a month of a
fleet is hundreds of thousands of probes). Here the real server and probe service answer
`/probe?target=<bmc>&module=default` over HTTP for the same node, on the same clock, right
after the generator sampled it: every BMC series the history writes must be in the probe's
body with the same value, and the probe's body must hold nothing else (but the read's
duration, which the history leaves out).
"""

from __future__ import annotations

import contextlib
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.config import ScenarioSpec
from nvwatch.agent.exposition.bmc import probe_exposition
from nvwatch.agent.server import Health, MetricsServer
from nvwatch.agent.server.probe import ProbeService
from nvwatch.sim.bmc.reader import SIMULATED_MODULE, SimulatedBmcReader
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fleet.plan import plan_fleet
from nvwatch.sim.history.bmc import DURATION, UP
from nvwatch.sim.history.history import for_history
from nvwatch.sim.history.series import NodeSeries
from nvwatch.sim.node.node import SimulatedNode

STEP_S = 600.0
_LABEL = re.compile(r'(\w+)="([^"]*)"')
# a stopped fan, a failed supply and a hot aisle: every kind of state the BMC reports
SCENARIOS = (
    ScenarioSpec("fan-failure", "2", 0.0),
    ScenarioSpec("psu-failure", "1", 0.0),
    ScenarioSpec("hot-aisle", "12", 0.0),
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _probe(port: int, target: str) -> Samples:
    url = f"http://127.0.0.1:{port}/probe?target={target}&module=default"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name != DURATION
    }


@contextlib.contextmanager
def _server(reader: SimulatedBmcReader) -> Iterator[MetricsServer]:
    service = ProbeService(
        {"default": SIMULATED_MODULE}, reader, probe_exposition, cache_s=0.0, workers=1
    )
    server = MetricsServer(
        "127.0.0.1",
        0,
        exposition=lambda: None,
        health=lambda: Health(True, "probes only"),
        probe=service.respond,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()
        service.close()


@pytest.mark.parametrize("profile", ["dgx1-v100", "dgx-h100", "inference-t4"])
def test_history_bmc_rows_equal_the_probe(profile: str, tmp_path: Path) -> None:
    (spec,) = plan_fleet([profile], base_port=0, seed=3, scenarios=[(0, s) for s in SCENARIOS])
    clock = ManualClock(0.0)
    node = for_history(
        SimulatedNode(profile, spec.scenarios, seed=3, clock=clock, sysfs_root=tmp_path)
    )
    try:
        series = NodeSeries(spec, node)
        with _server(SimulatedBmcReader({spec.bmc: node})) as server:
            for _ in range(3):  # healthy start, the faults begun, settled
                clock.advance(STEP_S)
                node.tick()
                rows = [(f, labels, v) for f, labels, v in series.bmc_rows() if f != UP]
                probed = _probe(server.port, spec.bmc)
                written = {
                    (family, frozenset(
                        (k, v) for k, v in _LABEL.findall(labels) if k not in series.bmc.target
                    )): value
                    for family, labels, value in rows
                }  # fmt: skip
                assert written == probed
    finally:
        node.close()
    families = {family for family, _ in written}
    assert {"nvwatch_bmc_fan_speed_rpm", "nvwatch_bmc_power_supply_failed"} <= families
    assert ("nvwatch_bmc_power_supply_failed", frozenset({("sensor", "PSU1 Status")})) in written
    assert written["nvwatch_bmc_power_supply_failed", frozenset({("sensor", "PSU1 Status")})] == 1
