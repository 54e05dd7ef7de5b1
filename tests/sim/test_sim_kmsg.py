"""The simulated kernel log: /dev/kmsg's record format, the agent's parser reads it back."""

from __future__ import annotations

from nvwatch.agent.sources.nvml.kmsg import XidRecord, parse_record, pci_key
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.gpu.state import EVENT_DOUBLE_BIT_ECC, EVENT_XID, GpuEvent
from nvwatch.sim.node.kmsg import UPTIME_AT_START_S, SimulatedKernelLog, kernel_pci
from nvwatch.sim.profiles import get_profile, gpu_pci_bus_id


def test_xids_become_records_with_rising_seq_and_time_since_boot() -> None:
    profile = get_profile("dgx-a100")
    clock = ManualClock(5000.0)
    log = SimulatedKernelLog(profile, clock)
    try:
        log.on_event(GpuEvent(3, EVENT_XID, 79, 5012.5))
        log.on_event(GpuEvent(3, EVENT_DOUBLE_BIT_ECC, 0, 5013.0))  # not an XID: not logged
        log.on_event(GpuEvent(0, EVENT_XID, 13, 5020.0))
        lines = log.path.read_text().splitlines()
    finally:
        log.close()
    assert not log.path.exists()
    assert lines[0].startswith("6,0,0,-;Linux version")
    assert [int(line.split(",")[1]) for line in lines] == list(range(len(lines)))
    records = [r for r in map(parse_record, lines) if r is not None]
    boot_us = round((UPTIME_AT_START_S + 12.5) * 1e6)
    assert records == [
        XidRecord(kernel_pci(gpu_pci_bus_id(profile, 3)), 79, seq=2, usec=boot_us),
        XidRecord(kernel_pci(gpu_pci_bus_id(profile, 0)), 13, seq=3, usec=boot_us + 7_500_000),
    ]
    assert "pid='<unknown>', name=<unknown>, GPU has fallen off the bus." in lines[2]
    assert "pid=4242, name=python3, " in lines[3]


def test_kernel_pci_is_what_the_agent_matches_nvml_bus_ids_with() -> None:
    assert kernel_pci("00000000:3B:00.0") == "0000:3b:00"
    for index in range(get_profile("dgx-h100").gpu_count):
        bus_id = gpu_pci_bus_id(get_profile("dgx-h100"), index)
        assert pci_key(kernel_pci(bus_id)) == pci_key(bus_id)
