"""Exported equals simulated: each dynamic value the agent exports is the simulator's own
state at the instant of the poll, within the rounding of the unit it crossed over in.

For every profile a simulated node runs on a manual clock and is polled twice a minute
apart, as in the golden test. Each exported series is then compared with the attribute of
the SimulatedGpu, its LinkState or the fabric's port that it stands for, read after the
poll with the clock standing still: never with what the simulated NVML or the sysfs
files answered, so a unit slip on either side of that boundary (the simulator's answer
or the agent's scaling) fails here, where a golden file would pin it.

Not compared, and why: GPM ratios (NVML computes them from two samples' activity
integrals; the expected value would be the simulated library's formula, not state);
identity, limits, thresholds and maxima (fixed per model, the golden files pin them);
XID counts (the simulator holds no counter, only events in flight).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.exposition.render import build_exposition, prepare
from nvwatch.agent.poller import Poller
from nvwatch.agent.sources import Source
from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.agent.sources.nvml.source import NvmlSource
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.nvml import install, uninstall
from nvwatch.sim.profiles import PROFILES

# One step of the unit each value crosses the NVML or sysfs boundary in: as far as
# rounding or truncating to that unit can move a value, and no further.
MILLIWATT = 1e-3  # W; nvmlDeviceGetPowerUsage answers mW
MILLIJOULE = 1e-3  # J; the energy counter is mJ
DEGREE = 1.0  # C; temperatures are whole degrees
MHZ = 1e6  # Hz; clocks are MHz
BYTE = 1.0  # nvmlMemory_v2 and process memory are bytes
PERCENT = 0.01  # ratio; utilization and fan speed are whole percent
KIB = 1024.0  # bytes; PCIe throughput is KiB/s, NVLink data counters KiB
NANOSECOND = 1e-9  # s; violation time is ns
COUNT = 1.0  # error counters and packets are whole numbers
IB_WORD = 4.0  # bytes; port_xmit_data and port_rcv_data count 4-byte words

POLL_INTERVAL_S = 60.0

# nvidia-smi's reason name -> the NVML bit, for the reasons the simulator can raise
_SIMULATED_REASONS = {
    "idle": pynvml.nvmlClocksEventReasonGpuIdle,
    "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
    "sw_thermal_slowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
    "hw_thermal_slowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
}


@dataclass(frozen=True)
class Series:
    name: str  # sample name, with _total on counters
    labels: dict[str, str]
    value: float


class Comparison:
    """Exported series against expected state; collects every mismatch, not the first."""

    def __init__(self, exposition: str) -> None:
        self._by_name: dict[str, list[Series]] = defaultdict(list)
        for family in text_string_to_metric_families(exposition):
            for s in family.samples:
                self._by_name[s.name].append(Series(s.name, dict(s.labels), s.value))
        self.problems: list[str] = []
        self.compared = 0

    def find(self, name: str, **labels: str) -> list[Series]:
        return [
            s
            for s in self._by_name.get(name, [])
            if all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def equal(self, state: float, tolerance: float, name: str, **labels: str) -> None:
        found = self.find(name, **labels)
        if len(found) != 1:
            self.problems.append(f"{name}{labels}: {len(found)} series exported, expected 1")
            return
        exported = found[0].value
        self.compared += 1
        if not abs(exported - state) <= tolerance:
            self.problems.append(
                f"{name}{labels}: exported {exported!r}, simulator {state!r} "
                f"(off by {abs(exported - state):g}, rounding allows {tolerance:g})"
            )

    def absent(self, name: str, **labels: str) -> None:
        if self.find(name, **labels):
            self.problems.append(f"{name}{labels}: exported, but the simulator has no such value")


@dataclass
class PolledNode:
    node: SimulatedNode
    exposition: str


@pytest.fixture(params=sorted(PROFILES))
def polled(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PolledNode]:
    """A simulated node after two polls a minute apart, its clock stopped at the second."""
    clock = ManualClock(0.0)
    node = SimulatedNode(request.param, seed=7, clock=clock, sysfs_root=tmp_path)
    install(node.nvml)
    nvml = NvmlSource(clock=clock)
    sources: list[Source] = [nvml, InfinibandSource(tmp_path, gpu_bus_ids=nvml.gpu_bus_ids)]
    poller = Poller(sources, interval=POLL_INTERVAL_S, timeout=30, prepare=prepare)
    try:
        poller.poll_once()
        clock.advance(POLL_INTERVAL_S)
        node.tick()
        snapshot = poller.poll_once()
        yield PolledNode(node, build_exposition(snapshot).text.decode())
    finally:
        poller.stop(timeout=2)
        node.close()
        uninstall()


def _compare_gpu(check: Comparison, gpu: SimulatedGpu) -> None:
    """One SimulatedGpu: power, energy, temperatures, fan, clocks, memory, utilization."""
    model = gpu.model
    labels = {"gpu": str(gpu.index), "uuid": gpu.uuid}
    check.equal(gpu.power_w, MILLIWATT, "nvwatch_gpu_power_watts", **labels)
    if model.energy_counter:
        check.equal(gpu.energy_mj / 1e3, MILLIJOULE, "nvwatch_gpu_energy_joules_total", **labels)
    else:
        check.absent("nvwatch_gpu_energy_joules_total", **labels)
    temperature = "nvwatch_gpu_temperature_celsius"
    check.equal(gpu.temperature_c, DEGREE, temperature, sensor="gpu", **labels)
    if model.memory_temperature:
        check.equal(gpu.memory_temperature_c, DEGREE, temperature, sensor="memory", **labels)
    else:
        check.absent(temperature, sensor="memory", **labels)
    if model.fan:
        check.equal(gpu.fan_percent / 100, PERCENT, "nvwatch_gpu_fan_speed_ratio", **labels)
    else:
        check.absent("nvwatch_gpu_fan_speed_ratio", **labels)
    clock = "nvwatch_gpu_clock_hertz"
    check.equal(gpu.sm_clock_mhz * 1e6, MHZ, clock, clock="sm", **labels)
    check.equal(gpu.memory_clock_mhz * 1e6, MHZ, clock, clock="memory", **labels)
    # the simulator runs the graphics and SM domains on one clock
    check.equal(gpu.sm_clock_mhz * 1e6, MHZ, clock, clock="graphics", **labels)
    total = model.memory_bytes
    used = gpu.memory_used_bytes
    check.equal(total, BYTE, "nvwatch_gpu_memory_total_bytes", **labels)
    check.equal(used, BYTE, "nvwatch_gpu_memory_used_bytes", **labels)
    free = total - gpu.memory_reserved_bytes - used
    check.equal(free, BYTE, "nvwatch_gpu_memory_free_bytes", **labels)
    check.equal(gpu.utilization, PERCENT, "nvwatch_gpu_utilization_ratio", **labels)
    memory_utilization = "nvwatch_gpu_memory_utilization_ratio"
    check.equal(gpu.memory_utilization, PERCENT, memory_utilization, **labels)


def _compare_gpu_counters(check: Comparison, gpu: SimulatedGpu) -> None:
    """PCIe, throttle time, clock events, ECC and process memory of one SimulatedGpu."""
    labels = {"gpu": str(gpu.index), "uuid": gpu.uuid}
    pcie = "nvwatch_gpu_pcie_throughput_bytes_per_second"
    check.equal(gpu.pcie_tx_rate, KIB, pcie, direction="tx", **labels)
    check.equal(gpu.pcie_rx_rate, KIB, pcie, direction="rx", **labels)
    check.equal(gpu.pcie_replays, COUNT, "nvwatch_gpu_pcie_replays_total", **labels)
    if gpu.model.violation_counters:
        throttle = "nvwatch_gpu_throttle_seconds_total"
        for reason, ns in (
            ("power", gpu.power_violation_ns),
            ("thermal", gpu.thermal_violation_ns),
            ("low_utilization", gpu.low_util_violation_ns),
        ):
            check.equal(ns / 1e9, NANOSECOND, throttle, reason=reason, **labels)
    for reason, bit in _SIMULATED_REASONS.items():
        active = float(bool(gpu.reasons & bit))
        check.equal(active, 0.0, "nvwatch_gpu_clock_event_active", reason=reason, **labels)
    if gpu.model.ecc:
        ecc = gpu.ecc
        for scope, kind, state in (
            ("volatile", "corrected", ecc.corrected_volatile),
            ("aggregate", "corrected", ecc.corrected_aggregate),
            ("volatile", "uncorrected", ecc.uncorrected_volatile),
            ("aggregate", "uncorrected", ecc.uncorrected_aggregate),
        ):
            errors = "nvwatch_gpu_ecc_errors_total"
            check.equal(state, COUNT, errors, scope=scope, type=kind, **labels)
    processes = "nvwatch_gpu_process_memory_bytes"
    if gpu.process_memory_bytes:
        check.equal(gpu.process_memory_bytes, BYTE, processes, **labels)
    else:
        check.absent(processes, **labels)
    # the job's one worker does all of the GPU's work: its share is the GPU's utilization
    for family, state in (
        ("nvwatch_gpu_process_sm_utilization_ratio", gpu.utilization),
        ("nvwatch_gpu_process_memory_utilization_ratio", gpu.memory_utilization),
    ):
        if gpu.process_memory_bytes:
            check.equal(state, PERCENT, family, **labels)
        else:
            check.absent(family, **labels)


def _compare_nvlinks(check: Comparison, gpu: SimulatedGpu) -> None:
    """Every LinkState of one GPU: up, data counters and error counters, link by link."""
    labels = {"gpu": str(gpu.index), "uuid": gpu.uuid}
    exported = {
        s.labels["link"] for s in check.find("nvwatch_nvlink_transmit_bytes_total", **labels)
    }
    expected = {str(n) for n in range(len(gpu.links))}
    if exported != expected:
        check.problems.append(
            f"GPU {gpu.index}: links {sorted(exported)} exported, simulator has {sorted(expected)}"
        )
    for n, link in enumerate(gpu.links):
        at = {"link": str(n), **labels}
        check.equal(float(link.up), 0.0, "nvwatch_nvlink_up", **at)
        check.equal(link.tx_bytes, KIB, "nvwatch_nvlink_transmit_bytes_total", **at)
        check.equal(link.rx_bytes, KIB, "nvwatch_nvlink_receive_bytes_total", **at)
        for series in check.find("nvwatch_nvlink_errors_total", **at):
            kind = series.labels["type"]
            check.equal(link.errors[kind], COUNT, "nvwatch_nvlink_errors_total", type=kind, **at)
        # the error types every NVLink generation counts (data ECC arrived with NVLink3)
        for kind in ("replay", "recovery", "crc_flit", "crc_data"):
            if not check.find("nvwatch_nvlink_errors_total", type=kind, **at):
                check.problems.append(f"GPU {gpu.index} link {n}: no {kind} error counter")


def _compare_ib_ports(check: Comparison, node: SimulatedNode) -> None:
    """Every simulated HCA port: data (4-byte words in sysfs), packets, transmit waits."""
    ports = node.fabric._ports  # the fabric's own state; nothing public exposes it
    for device, port in ports.items():
        at = {"device": device, "port": "1"}
        counters = port.counters
        check.equal(
            counters["port_xmit_data"] * 4, IB_WORD, "nvwatch_ib_port_transmit_bytes_total", **at
        )
        check.equal(
            counters["port_rcv_data"] * 4, IB_WORD, "nvwatch_ib_port_receive_bytes_total", **at
        )
        packets = "_packets_total"
        check.equal(
            counters["port_xmit_packets"], COUNT, "nvwatch_ib_port_transmit" + packets, **at
        )
        check.equal(counters["port_rcv_packets"], COUNT, "nvwatch_ib_port_receive" + packets, **at)
        check.equal(counters["port_xmit_wait"], COUNT, "nvwatch_ib_port_transmit_wait_total", **at)


def test_exported_values_are_the_simulators_state(polled: PolledNode) -> None:
    # a series missing from the exposition counts as a mismatch, so a renamed metric
    # or a reading the agent stopped making fails here rather than passing by omission
    check = Comparison(polled.exposition)
    for gpu in polled.node.nvml.gpus:
        _compare_gpu(check, gpu)
        _compare_gpu_counters(check, gpu)
        _compare_nvlinks(check, gpu)
    _compare_ib_ports(check, polled.node)
    assert not check.problems, f"{len(check.problems)} of {check.compared} differ:\n" + "\n".join(
        check.problems
    )
