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

A history with jobs also writes what the straggler rules compare ranks on: the node here
holds one synchronous job on every GPU, whose allocations the agent's Slurm resolver reads
from the job-mapping directory and /proc a fleet writes (sim/fleet/jobs.py), and a starved
host whose CPUs the agent's host source reads from the simulated host.
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
from nvwatch.agent.sources.attribution.model import AttributionSample, GpuRef
from nvwatch.agent.sources.attribution.procfs import ProcFS
from nvwatch.agent.sources.attribution.slurm import SlurmResolver
from nvwatch.agent.sources.host import HostSource
from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.agent.sources.nvml.source import NvmlSource
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fleet.jobs import NodeJobs, parse_job, sync_job_plans
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
    ScenarioSpec("cpu-starved", None, 0.0),
    ScenarioSpec("pcie-downtrained", "6", 0.0, slowdown=0.5),
)
JOB = "0:all,user=alice,account=ml,id=77,sync=yes"


class _Allocations:
    """The agent's attribution source as its Slurm resolver answers now (the agent runs
    it on a thread of its own; here it answers at the poll, on the same files)."""

    name = "attribution"

    def __init__(self, node: SimulatedNode, jobs: NodeJobs) -> None:
        self._node = node
        self._resolver = SlurmResolver(ProcFS(jobs.proc_root), jobs.mapping_dir)

    def collect(self) -> AttributionSample:
        gpus = [GpuRef(g.index, g.uuid, (self._node.nvml.worker_pid(g.index),)) for g in
                self._node.nvml.gpus]  # fmt: skip
        return AttributionSample(self._resolver.resolve(gpus).allocations)

    def close(self) -> None:
        self._resolver.close()


def _agent(node: SimulatedNode, clock: ManualClock, sysfs: Path, jobs: NodeJobs) -> Poller:
    """The agent's sources on the node: one poller for the whole test, so the host
    source's ratios span the history's step, as between two of the agent's polls."""
    nvml = NvmlSource(clock=clock, nvlink_detail="gpu", kmsg_path=node.kmsg_path)
    sources: list[Source] = [
        nvml,
        InfinibandSource(sysfs, gpu_bus_ids=nvml.gpu_bus_ids),
        HostSource(cpu_times=node.host.cpu_times),
        _Allocations(node, jobs),
    ]
    return Poller(sources, interval=60, timeout=30, prepare=prepare)


def _exported(poller: Poller) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = build_exposition(poller.poll_once()).text.decode()
    # an empty label is no label to Prometheus (the history leaves such labels out)
    return {
        (s.name, frozenset((k, v) for k, v in s.labels.items() if v)): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.parametrize("profile", ["dgx1-v100", "dgx-a100", "dgx-h100"])
def test_history_rows_equal_the_agents_exposition(profile: str, tmp_path: Path) -> None:
    (spec,) = plan_fleet([profile], base_port=0, seed=3, scenarios=[(0, s) for s in SCENARIOS])
    job = parse_job(JOB, 0)
    clock = ManualClock(0.0)
    node = for_history(
        SimulatedNode(
            profile,
            spec.scenarios,
            seed=3,
            clock=clock,
            sysfs_root=tmp_path / "sysfs",
            sync_jobs=sync_job_plans([job], [spec]),
        )
    )
    jobs = NodeJobs(tmp_path / "slurm", [job], len(node.nvml.gpus), node.nvml.worker_pid)
    jobs.write()
    sim_nvml.install(node.nvml)
    agent = _agent(node, clock, tmp_path / "sysfs", jobs)
    try:
        series = NodeSeries(spec, node, [job], rank_signals=True)
        # the first sample of each: the host's ratios need an interval
        list(series.rows(clock()))
        agent.poll_once()
        compared: set[str] = set()
        for _ in range(3):  # healthy start, faults begun, thermal runaway past slowdown
            clock.advance(STEP_S)
            node.tick()  # NVML state and the sysfs files the agent reads
            rows = list(series.rows(clock()))
            exported = _exported(agent)
            for family, labels, value in rows:
                if family in _NOT_COMPARED:
                    continue
                own = frozenset((k, v) for k, v in _LABEL.findall(labels) if k not in series.target)
                assert (family, own) in exported, f"{family}{labels} is not exported"
                assert value == pytest.approx(exported[family, own], rel=1e-12), family + labels
                compared.add(family)
    finally:
        agent.stop(timeout=2)
        node.close()
        sim_nvml.uninstall()
    # the BMC's families come from /probe (test_bmc_series_match_probe.py checks them),
    # the scheduler's from the controller's agent (test_queue_truth.py)
    node_families = set(FAMILIES) - set(BMC_FAMILIES) - set(CONTROLLER_FAMILIES)
    assert compared == node_families - _NOT_COMPARED - (
        set() if profile != "dgx1-v100" else {"nvwatch_gpu_remapped_rows"}
    ) - ({"nvwatch_gpu_retired_pages"} if profile != "dgx1-v100" else set())
