"""XID history end to end: the simulated node writes its XIDs to its kernel log, the
agent exports their count, an agent started later exports the same; the flag, the
simulated runtime and `nvwatch doctor`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.app import poll_and_render
from nvwatch.agent.cli import cli
from nvwatch.agent.cli.options import build_config
from nvwatch.agent.config import AgentConfig, ScenarioSpec
from nvwatch.agent.runtime import runtime
from nvwatch.agent.sources.nvml.declaration import kmsg_path
from nvwatch.agent.sources.nvml.kmsg import DEFAULT_PATH
from nvwatch.agent.sources.registry import build_sources
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.gpu.scenarios import FAULT_ONSET_S, XID_STORM_BURST
from nvwatch.sim.node.kmsg import kernel_pci
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.profiles import get_profile, gpu_pci_bus_id

PROFILE = "dgx-h100"
STORM = {xid: XID_STORM_BURST.count(xid) for xid in set(XID_STORM_BURST)}  # one burst


@pytest.fixture
def storm_node() -> Iterator[tuple[SimulatedNode, ManualClock]]:
    """A simulated node whose GPU 1 has had one burst of XIDs before any agent ran."""
    clock = ManualClock(1000.0)
    node = SimulatedNode(PROFILE, [ScenarioSpec("xid-storm", "1")], clock=clock)
    sim_nvml.install(node.nvml)
    try:
        clock.advance(FAULT_ONSET_S + 1.0)
        node.tick()
        yield node, clock
    finally:
        node.close()
        sim_nvml.uninstall()


def _agent_xid_counts(config: AgentConfig) -> dict[tuple[str, str], float]:
    """One agent's life: poll once, render, stop. (gpu, xid) -> exported count."""
    text = poll_and_render(config, build_sources(config), settle=0).text.decode()
    return {
        (s.labels["gpu"], s.labels["xid"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "nvwatch_gpu_xid_errors_total"
    }


def test_simulated_xids_reach_the_kernel_log_and_every_later_agent(
    storm_node: tuple[SimulatedNode, ManualClock],
) -> None:
    node, clock = storm_node
    pci = kernel_pci(gpu_pci_bus_id(get_profile(PROFILE), 1))
    lines = node.kmsg_path.read_text().splitlines()
    xid_lines = [line for line in lines if "NVRM: Xid" in line]
    assert [line.split(f"(PCI:{pci}): ")[1].split(",")[0] for line in xid_lines] == [
        str(x) for x in XID_STORM_BURST
    ]
    seqs = [int(line.split(",")[1]) for line in lines]
    assert seqs == list(range(len(lines)))  # the kernel's seq: one more per record
    config = AgentConfig(
        sources=("nvml",), simulate=PROFILE, sysfs_root=node.sysfs_root, kmsg_path=node.kmsg_path
    )
    expected = {("1", str(xid)): float(n) for xid, n in STORM.items()}
    assert _agent_xid_counts(config) == expected
    # a second agent, started after the first stopped: the same history
    assert _agent_xid_counts(config) == expected
    # the next burst is counted once on top, by an agent that was not there for either
    clock.advance(30.0)
    node.tick()
    assert _agent_xid_counts(config) == {k: 2 * v for k, v in expected.items()}


def test_without_the_kernel_log_a_late_agent_sees_no_history(
    storm_node: tuple[SimulatedNode, ManualClock], tmp_path: Path
) -> None:
    node, _ = storm_node
    config = AgentConfig(
        sources=("nvml",), simulate=PROFILE, sysfs_root=node.sysfs_root, kmsg_path=tmp_path
    )
    assert _agent_xid_counts(config) == {}


def test_simulate_points_the_agent_at_the_nodes_kernel_log(tmp_path: Path) -> None:
    with runtime(AgentConfig(sources=("nvml",), simulate=PROFILE)) as effective:
        assert effective.kmsg_path is not None and effective.kmsg_path != DEFAULT_PATH
        simulated = effective.kmsg_path
        assert "Linux version" in simulated.read_text()
    assert not simulated.exists()  # the node's log goes with the node
    given = tmp_path / "kmsg"
    with runtime(AgentConfig(sources=("nvml",), simulate=PROFILE, kmsg_path=given)) as effective:
        assert effective.kmsg_path == given


def test_the_kernel_log_path_per_config() -> None:
    assert kmsg_path(AgentConfig()) == DEFAULT_PATH
    assert kmsg_path(AgentConfig(kmsg_path=Path("/var/log/kern.log"))) == Path("/var/log/kern.log")
    # a simulated agent never reads the host's kernel log
    assert kmsg_path(AgentConfig(simulate=PROFILE)) is None


def test_kmsg_path_flag() -> None:
    base = {"interval": "5s", "sources": "nvml", "sysfs_root": "/sys"}
    assert build_config(base).kmsg_path is None
    assert build_config({**base, "kmsg_path": "/host/kmsg"}).kmsg_path == Path("/host/kmsg")
    result = CliRunner().invoke(cli, ["doctor", "--help"])
    assert "--kmsg-path" in result.output and "NVWATCH_KMSG_PATH" in result.output


def test_doctor_says_where_xid_counts_come_from(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(cli, ["doctor", "--simulate", PROFILE, "--sources", "nvml"])
    line = next(x for x in ok.output.splitlines() if x.startswith("xid-history"))
    assert line.split()[1] == "up" and "nvwatch-sim-" in line and "whole boot" in line
    missing = tmp_path / "kmsg"
    env = {"NVWATCH_KMSG_PATH": str(missing)}
    limited = runner.invoke(cli, ["doctor", "--simulate", PROFILE, "--sources", "nvml"], env=env)
    line = next(x for x in limited.output.splitlines() if x.startswith("xid-history"))
    assert line.split()[1] == "limited"
    assert f"cannot read {missing}: it does not exist" in line and "since the agent started" in line
    host_only = runner.invoke(cli, ["doctor", "--simulate", PROFILE, "--sources", "host"])
    assert "xid-history" not in host_only.output
