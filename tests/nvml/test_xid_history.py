"""The NVML source counts XIDs from the simulated node's kernel log: since boot, across
restarts, and once each although NVML reports them as events too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvwatch.sim.gpu.scenarios import GPU_LOST_AFTER_XID_S
from nvwatch.sim.node.kmsg import SimulatedKernelLog, kernel_pci
from nvwatch.sim.profiles import get_profile, gpu_pci_bus_id
from nvwatch.sim.scenario_names import FAULT_ONSET_S
from tests.nvml.conftest import Node, NodeFactory
from tests.nvml.helpers import exposition, poll, value, wait_for

ECC_XIDS = {48: 1, 63: 1}  # ecc-dbe: the double-bit error, then the row remapping


@pytest.fixture
def ecc_node(node: NodeFactory) -> Iterator[tuple[Node, SimulatedKernelLog]]:
    """A DGX A100 whose GPU 2 gets an uncorrectable ECC error, with its kernel log."""
    n = node("dgx-a100", gpu_scenarios={2: "ecc-dbe"})
    log = SimulatedKernelLog(get_profile("dgx-a100"), n.clock)
    n.lib.event_sinks.append(log.on_event)
    yield n, log
    log.close()


def _fault_happens(n: Node) -> None:
    n.clock.advance(FAULT_ONSET_S + 2.0)
    n.lib.advance()


def test_xids_from_before_the_agent_started_are_counted(
    ecc_node: tuple[Node, SimulatedKernelLog],
) -> None:
    n, log = ecc_node
    _fault_happens(n)  # no agent is listening yet
    pci = kernel_pci(gpu_pci_bus_id(get_profile("dgx-a100"), 2))
    assert f"NVRM: Xid (PCI:{pci}): 48, pid='<unknown>'" in log.path.read_text()
    # NVML alone never hears of them: the events went out before anyone registered
    assert n.source().collect().gpus[2].xid_counts == {}
    sample = n.source(kmsg_path=log.path).collect()
    assert sample.gpus[2].xid_counts == ECC_XIDS
    assert all(not gpu.xid_counts for gpu in sample.gpus if gpu.index != 2)
    series = exposition(sample)
    assert value(series, "nvwatch_gpu_xid_errors_total", gpu="2", xid="48") == 1


def test_a_restarted_source_reports_the_same_counts(
    ecc_node: tuple[Node, SimulatedKernelLog],
) -> None:
    n, log = ecc_node
    first = n.source(kmsg_path=log.path)
    poll(first, n.clock, int(FAULT_ONSET_S / 5) + 2)
    assert first.collect().gpus[2].xid_counts == ECC_XIDS
    first.close()
    second = n.source(kmsg_path=log.path)
    assert second.collect().gpus[2].xid_counts == ECC_XIDS


def test_an_xid_seen_as_event_and_log_line_counts_once(
    ecc_node: tuple[Node, SimulatedKernelLog], tmp_path: Path
) -> None:
    n, log = ecc_node
    with_log = n.source(kmsg_path=log.path)
    # a directory cannot be read as a kernel log: this source hears NVML events only
    events_only = n.source(kmsg_path=tmp_path)
    for source in (with_log, events_only):
        source.collect()  # both listen before the fault
    poll(with_log, n.clock, int(FAULT_ONSET_S / 5) + 2)
    # the events reached the listeners (the one without a log shows it) ...
    assert wait_for(lambda: events_only.collect().gpus[2].xid_counts == ECC_XIDS)
    time.sleep(0.6)  # ... and one more wake-up of the listener that reads the log
    # ... and the source that has both still counts each XID once
    for _ in range(3):
        assert with_log.collect().gpus[2].xid_counts == ECC_XIDS


def test_unreadable_kernel_log_counts_from_agent_start(
    ecc_node: tuple[Node, SimulatedKernelLog], tmp_path: Path
) -> None:
    n, _ = ecc_node
    _fault_happens(n)
    missing = tmp_path / "no-kmsg"
    source = n.source(kmsg_path=missing)
    assert source.collect().gpus[2].xid_counts == {}  # before the start: not seen
    n.lib.gpus[2].emit_xid(48)  # a new one, after the start, delivered as time moves
    n.clock.advance(1.0)
    assert wait_for(lambda: source.collect().gpus[2].xid_counts == {48: 1})


def test_a_gpu_lost_before_the_agent_started_has_its_xid_from_the_poll_it_returns(
    node: NodeFactory,
) -> None:
    # XID 79, then the GPU falls off the bus, all before the agent starts: the agent
    # never learns its bus id until it answers again, so its log lines are nobody's
    n = node("dgx-a100", gpu_scenarios={5: "gpu-lost"})
    log = SimulatedKernelLog(get_profile("dgx-a100"), n.clock)
    n.lib.event_sinks.append(log.on_event)
    try:
        n.clock.advance(FAULT_ONSET_S + GPU_LOST_AFTER_XID_S + 5.0)
        n.lib.advance()
        source = n.source(kmsg_path=log.path)
        (lost,) = poll(source, n.clock, 1)
        assert not lost.gpus[5].up and lost.gpus[5].xid_counts == {}
        n.lib.end_scenarios("gpu-lost")
        (back,) = poll(source, n.clock, 1)
        # the same poll as nvwatch_gpu_up 1: an XID series appearing a poll after the
        # GPU would look like a new XID to NvwatchGpuXidCritical
        assert back.gpus[5].up
        assert back.gpus[5].xid_counts == {79: 1}
        assert all(not gpu.xid_counts for gpu in back.gpus if gpu.index != 5)
    finally:
        log.close()
