"""What the history writes for a node is what the agent exports for it at that instant.

The generator reads the simulator's state directly (a poll through pynvml and sysfs would
make a month of a fleet take hours). Here the real agent sources poll the same simulated
node, on the same clock, right after the generator sampled it a history step in, with
`--nvlink-detail gpu` as the history assumes: every series the history writes must be in
the agent's exposition with the same value. GPM ratios are left out: NVML computes them
between the caller's own two samples, so the agent's span is not the history's.

The history's `port_xmit_wait` counts on past 32 bits (a congested port fills the 32-bit
field in minutes, a busy one in hours, and a month would show nothing after), as
PortXmitWait's 64-bit extended form does; the agent exports such a reading as it is, so
there too the values are equal.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.config import ScenarioSpec
from nvwatch.agent.exposition.render import build_exposition, prepare
from nvwatch.agent.poller import Poller
from nvwatch.agent.sources import Source
from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.agent.sources.nvml.source import NvmlSource
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fleet.plan import plan_fleet
from nvwatch.sim.history.bmc import BMC_FAMILIES
from nvwatch.sim.history.history import for_history
from nvwatch.sim.history.scheduler import CONTROLLER_FAMILIES
from nvwatch.sim.history.series import FAMILIES, UP, NodeSeries
from nvwatch.sim.node.node import SimulatedNode

STEP_S = 600.0
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_NOT_COMPARED = {UP, "nvwatch_gpu_sm_active_ratio", "nvwatch_gpu_tensor_active_ratio"}
_NOT_COMPARED |= {"nvwatch_gpu_dram_active_ratio"}
# faults that move the values a capacity review reads: a throttled, capped, congested node
SCENARIOS = (
    ScenarioSpec("thermal-runaway", "2", 0.0),
    ScenarioSpec("power-capped", "5", 0.0),
    ScenarioSpec("ib-congestion", "mlx5_1", 0.0),
    ScenarioSpec("ecc-dbe", "3", 60.0),
)


def _exported(
    node: SimulatedNode, clock: ManualClock, sysfs: Path
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    nvml = NvmlSource(clock=clock, nvlink_detail="gpu", kmsg_path=node.kmsg_path)
    sources: list[Source] = [nvml, InfinibandSource(sysfs, gpu_bus_ids=nvml.gpu_bus_ids)]
    poller = Poller(sources, interval=60, timeout=30, prepare=prepare)
    try:
        snapshot = poller.poll_once()
    finally:
        poller.stop(timeout=2)
    text = build_exposition(snapshot).text.decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.parametrize("profile", ["dgx1-v100", "dgx-a100", "dgx-h100"])
def test_history_rows_equal_the_agents_exposition(profile: str, tmp_path: Path) -> None:
    (spec,) = plan_fleet([profile], base_port=0, seed=3, scenarios=[(0, s) for s in SCENARIOS])
    clock = ManualClock(0.0)
    node = for_history(
        SimulatedNode(profile, spec.scenarios, seed=3, clock=clock, sysfs_root=tmp_path)
    )
    sim_nvml.install(node.nvml)
    try:
        series = NodeSeries(spec, node)
        compared: set[str] = set()
        for _ in range(3):  # healthy start, faults begun, thermal runaway past slowdown
            clock.advance(STEP_S)
            node.tick()  # NVML state and the sysfs files the agent reads
            rows = list(series.rows(clock()))
            exported = _exported(node, clock, tmp_path)
            for family, labels, value in rows:
                if family in _NOT_COMPARED:
                    continue
                own = frozenset((k, v) for k, v in _LABEL.findall(labels) if k not in series.target)
                assert (family, own) in exported, f"{family}{labels} is not exported"
                assert value == pytest.approx(exported[family, own], rel=1e-12), family + labels
                compared.add(family)
    finally:
        node.close()
        sim_nvml.uninstall()
    # the BMC's families come from /probe (test_bmc_series_match_probe.py checks them),
    # the scheduler's from the controller's agent (test_queue_truth.py)
    node_families = set(FAMILIES) - set(BMC_FAMILIES) - set(CONTROLLER_FAMILIES)
    assert compared == node_families - _NOT_COMPARED - (
        set() if profile != "dgx1-v100" else {"nvwatch_gpu_remapped_rows"}
    ) - ({"nvwatch_gpu_retired_pages"} if profile != "dgx1-v100" else set())
