"""The BMC alerts end to end: a simulated fleet's BMCs, probed through its management
host, scraped by a real Prometheus with the mixin's rules, paging through a real
Alertmanager to a webhook.

One node per BMC fault beside a healthy one, at the e2e suite's time scale: the hot aisle
pages the inlet alert and its GPUs' thermal alert names the room; the stopped fan pages
and the node is its heat source; the failed supply of a DGX-1 (3+1) pages and leaves no
spare; an unreachable BMC pages once and nothing else of its node fires; the healthy
node raises nothing. What the simulator did is read from its own state, not assumed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nvwatch.agent.config import ScenarioSpec
from nvwatch.alerts import build as alerts_build
from nvwatch.alerts.recording_bmc import (
    HEALTHY_SUPPLIES,
    HEAT_GPU,
    HEAT_NODE,
    HEAT_ROOM,
    HEAT_SOURCE,
)
from nvwatch.sim.fleet.fleet import Fleet
from tests.conftest import require_tool
from tests.e2e.conftest import POLL_INTERVAL, SCRAPE_INTERVAL, TIME_SCALE, mixin_config
from tests.e2e.loopback import wait_for
from tests.e2e.stack import Receiver, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

DEADLINE_S = 180.0
HEALTHY, HOT, FAN, SUPPLY, UNREACHABLE = range(5)
NODES = {
    HEALTHY: ("dgx-a100", None),
    HOT: ("dgx-a100", ScenarioSpec("hot-aisle")),
    FAN: ("dgx-a100", ScenarioSpec("fan-failure", "1")),
    SUPPLY: ("dgx1-v100", ScenarioSpec("psu-failure", "2")),
    UNREACHABLE: ("dgx-a100", ScenarioSpec("bmc-unreachable")),
}
GPU_THERMAL = (
    "NvwatchGpuTemperatureNearSlowdown",
    "NvwatchGpuMemoryTemperatureNearMax",
    "NvwatchGpuThermalSlowdown",
)


def _name(node: int) -> str:
    return f"dgx-{node:03d}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus = require_tool("prometheus")
    alertmanager = require_tool("prometheus-alertmanager", "alertmanager")
    workdir = tmp_path_factory.mktemp("e2e-bmc")
    rules = workdir / "rules"
    alerts_build.write(rules, mixin_config())
    fleet = Fleet(
        [profile for profile, _ in NODES.values()],
        base_port=0,
        interval=POLL_INTERVAL,
        scenarios=[(node, spec) for node, (_, spec) in NODES.items() if spec is not None],
        seed=29,
        time_scale=TIME_SCALE,
        hold_time=True,
    )
    result = Stack(workdir, fleet, Receiver())
    try:
        fleet.start()
        result.start_alertmanager(alertmanager)
        rule_files = [
            rules / alerts_build.PROMETHEUS_ALERTS,
            rules / alerts_build.PROMETHEUS_RECORDING,
        ]
        result.start_prometheus(prometheus, rule_files, SCRAPE_INTERVAL, bmc=True)
        wait_for(
            "every BMC probed", lambda: len(result.query('up{job="nvwatch-bmc"} == 1')) == 5, 60
        )
        fleet.run_time()
        yield result
    finally:
        result.close()


def _delivered(stack: Stack, alertname: str, node: int) -> list[dict[str, Any]]:
    return [
        a
        for a in stack.receiver.firing()
        if a["labels"]["alertname"] == alertname and a["labels"].get("instance") == _name(node)
    ]


def _wait_delivered(stack: Stack, alertname: str, node: int) -> list[dict[str, Any]]:
    return wait_for(
        f"{alertname} of {_name(node)} at the webhook",
        lambda: _delivered(stack, alertname, node),
        DEADLINE_S,
        every=1,
        explain=lambda: stack.where_alert_stopped(alertname, {"instance": _name(node)}),
    )


def _heat_source(stack: Stack, node: int) -> float | None:
    result = stack.query(f'{HEAT_SOURCE}{{instance="{_name(node)}"}}')
    return float(result[0]["value"][1]) if result else None


def test_a_hot_aisle_pages_the_inlet_and_its_gpus_name_the_room(stack: Stack) -> None:
    _wait_delivered(stack, "NvwatchNodeInletTemperatureHigh", HOT)
    thermal = wait_for(
        "a GPU thermal alert of the hot node",
        lambda: [a for name in GPU_THERMAL for a in _delivered(stack, name, HOT)],
        DEADLINE_S,
        every=1,
    )
    assert all("Which: the room." in a["annotations"]["description"] for a in thermal), thermal
    assert _heat_source(stack, HOT) == HEAT_ROOM


def test_a_stopped_fan_pages_and_the_node_is_the_heat_source(stack: Stack) -> None:
    (fan,) = _wait_delivered(stack, "NvwatchNodeFanStopped", FAN)
    assert fan["labels"]["sensor"] == "FAN1"
    assert _heat_source(stack, FAN) == HEAT_NODE
    # whatever of its GPUs got hot says it was the node
    for name in GPU_THERMAL:
        for alert in _delivered(stack, name, FAN):
            assert "Which: the node." in alert["annotations"]["description"], alert


def test_a_failed_supply_of_a_3_plus_1_node_leaves_no_spare(stack: Stack) -> None:
    (failed,) = _wait_delivered(stack, "NvwatchNodePowerSupplyFailed", SUPPLY)
    assert failed["labels"]["sensor"] == "PSU2 Status"
    (lost,) = _wait_delivered(stack, "NvwatchNodePowerSupplyRedundancyLost", SUPPLY)
    # three of four left: what a DGX-1 needs at full load, none spare
    assert stack.query(f'{HEALTHY_SUPPLIES}{{instance="{_name(SUPPLY)}"}} == 3')
    assert lost["labels"]["node_class"] == "dgx1-v100"


def test_an_unreachable_bmc_pages_once_and_nothing_else_of_its_node(stack: Stack) -> None:
    (down,) = _wait_delivered(stack, "NvwatchBmcDown", UNREACHABLE)
    assert down["labels"]["bmc"] == stack.fleet.specs[UNREACHABLE].bmc
    others = stack.query(f'ALERTS{{instance="{_name(UNREACHABLE)}"}}')
    assert {a["metric"]["alertname"] for a in others} == {"NvwatchBmcDown"}
    # its GPUs are still watched: their series did not go with the BMC
    assert stack.query(f'nvwatch_gpu_up{{instance="{_name(UNREACHABLE)}"}} == 1')


def test_the_healthy_node_raises_nothing(stack: Stack) -> None:
    # run after the faults have paged: the same time has passed for the healthy node
    _wait_delivered(stack, "NvwatchNodeInletTemperatureHigh", HOT)
    assert not stack.query(f'ALERTS{{instance="{_name(HEALTHY)}"}}')
    assert _heat_source(stack, HEALTHY) == HEAT_GPU


def test_a_missing_delivery_says_where_the_alert_stopped(stack: Stack) -> None:
    """What a timed-out delivery wait adds to its failure: how far the alert got."""
    _wait_delivered(stack, "NvwatchBmcDown", UNREACHABLE)
    wait_for(
        "NvwatchBmcDown at Alertmanager",
        lambda: "at Alertmanager" in stack.where_alert_stopped(
            "NvwatchBmcDown", {"instance": _name(UNREACHABLE)}
        ),
        DEADLINE_S,
    )  # fmt: skip
    healthy = {"instance": _name(HEALTHY)}
    quiet = stack.where_alert_stopped("NvwatchBmcDown", healthy)
    assert quiet.endswith(": not active in Prometheus"), quiet
    with pytest.raises(AssertionError, match="not active in Prometheus"):
        wait_for(
            "a page the healthy node never sends",
            lambda: _delivered(stack, "NvwatchBmcDown", HEALTHY),
            1,
            explain=lambda: stack.where_alert_stopped("NvwatchBmcDown", healthy),
        )
