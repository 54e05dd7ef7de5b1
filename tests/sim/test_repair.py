"""Every scenario ends: repaired on request or on schedule, the node is healthy again.

The first half runs every scenario in the registry on a simulated node, checks that it
broke something, repairs it with `SimulatedNode.repair` and checks the state an alert's
resolution depends on: volatile ECC counts back to 0 after the GPU reset, the link up,
the temperature back under slowdown, the port ACTIVE. A scenario added without a repair
check fails. The second half covers time windows (`from=`, `until=`) and the details.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from nvwatch.agent.config import parse_scenario
from nvwatch.agent.sources.bmc.reading import BmcError
from nvwatch.agent.sources.host import HostSource
from nvwatch.sim.bmc.scenarios import HOT_AISLE_RAMP_S
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fabric.fabric import XMIT_WAIT_TICKS_PER_SECOND
from nvwatch.sim.gpu import scenarios
from nvwatch.sim.node.node import SimulatedNode, UnknownScenario, known_scenarios
from nvwatch.sim.nvml import install
from nvwatch.sim.profiles import PROFILES
from tests.sim.conftest import (
    CONGESTION_RATIO,
    NODE,
    POWER_CAP,
    THERMAL,
    Run,
    Simulate,
    handle,
    start,
)

UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
VOLATILE, AGGREGATE = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC
CRC = pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
AFTER_ONSET = scenarios.FAULT_ONSET_S + 5.0

REPAIRS: dict[str, Callable[[Simulate], None]] = {}


def repair_check(name: str) -> Callable[[Callable[[Simulate], None]], Callable[[Simulate], None]]:
    def register(check: Callable[[Simulate], None]) -> Callable[[Simulate], None]:
        REPAIRS[name] = check
        return check

    return register


def _temperature(index: int) -> int:
    return int(pynvml.nvmlDeviceGetTemperature(handle(index), pynvml.NVML_TEMPERATURE_GPU))


def _reasons(index: int) -> int:
    return int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(index)))


@repair_check("healthy-training")
def _training_needs_no_repair(simulate: Simulate) -> None:
    run = simulate("healthy-training@7", "idle")
    run.advance(60.0)
    assert run.node.repair("healthy-training") == []  # a workload, not a fault
    run.advance(60.0)
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(7)).gpu >= 85


@repair_check("idle")
def _idle_needs_no_repair(simulate: Simulate) -> None:
    run = simulate("idle")
    assert run.node.repair() == []
    run.advance(60.0)
    assert all(_reasons(i) & (THERMAL | POWER_CAP) == 0 for i in range(8))


@repair_check("cold-start")
def _cold_start_needs_no_repair(simulate: Simulate) -> None:
    run = simulate("cold-start")
    assert run.node.repair() == []  # a workload: GPUs warming up are healthy
    run.advance(600.0)
    assert all(_reasons(i) & (THERMAL | POWER_CAP) == 0 for i in range(8))


@repair_check("thermal-runaway")
def _cooling_restored(simulate: Simulate) -> None:
    run = simulate("thermal-runaway@3")
    for _ in range(14):
        run.advance(30.0)
    slowdown = PROFILES[NODE].gpus[3].temp_slowdown_c
    assert _temperature(3) > slowdown and _reasons(3) & THERMAL
    assert run.node.repair("thermal-runaway@3") == ["thermal-runaway@3"]
    run.advance(10.0)
    assert _temperature(3) > slowdown - 15  # no jump: it relaxes with its time constant
    for _ in range(12):  # 6 minutes, eight time constants
        run.advance(30.0)
    assert _temperature(3) < slowdown - 10
    assert _reasons(3) & THERMAL == 0
    sm = pynvml.NVML_CLOCK_SM
    assert pynvml.nvmlDeviceGetClockInfo(handle(3), sm) == pynvml.nvmlDeviceGetClockInfo(
        handle(2), sm
    )


@repair_check("power-capped")
def _power_limit_restored(simulate: Simulate) -> None:
    run = simulate("power-capped@1")
    run.advance(AFTER_ONSET)
    tdp_mw = PROFILES[NODE].gpus[1].tdp_watts * 1000
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(handle(1)) < tdp_mw
    assert run.node.repair("power-capped") == ["power-capped@1"]
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(handle(1)) == tdp_mw
    for _ in range(20):
        run.advance(0.3)
        assert _reasons(1) & POWER_CAP == 0


@repair_check("gpu-slow")
def _speed_restored(simulate: Simulate) -> None:
    run = simulate("gpu-slow@1,slowdown=0.5")
    run.advance(AFTER_ONSET)
    full = PROFILES[NODE].gpus[1].max_sm_clock_mhz
    assert pynvml.nvmlDeviceGetClockInfo(handle(1), pynvml.NVML_CLOCK_SM) < 0.6 * full
    assert run.node.repair("gpu-slow") == ["gpu-slow@1"]
    run.advance(1.0)
    assert pynvml.nvmlDeviceGetClockInfo(handle(1), pynvml.NVML_CLOCK_SM) == full


@repair_check("pcie-downtrained")
def _link_retrained(simulate: Simulate) -> None:
    run = simulate("pcie-downtrained@6,slowdown=0.8")
    run.advance(AFTER_ONSET)
    width = PROFILES[NODE].gpus[6].pcie_width
    assert pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle(6)) == width // 4
    assert run.node.repair("6") == ["pcie-downtrained@6"]
    assert pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle(6)) == width


@repair_check("cpu-starved")
def _host_freed(simulate: Simulate) -> None:
    run = simulate("cpu-starved,slowdown=0.5")
    host = HostSource(cpu_times=run.node.host.cpu_times)
    run.advance(AFTER_ONSET)
    host.collect()
    run.advance(10.0)
    assert (host.collect().cpu_utilization_ratio or 0.0) > 0.95
    assert run.node.repair("cpu-starved") == ["cpu-starved"]
    run.advance(10.0)
    assert (host.collect().cpu_utilization_ratio or 1.0) < 0.5


@repair_check("nvlink-degraded")
def _link_restored(simulate: Simulate) -> None:
    run = simulate("nvlink-degraded@2")
    run.advance(scenarios.FAULT_ONSET_S + scenarios.NVLINK_FAIL_AFTER_S + 1.0)
    assert pynvml.nvmlDeviceGetNvLinkState(handle(2), 0) == pynvml.NVML_FEATURE_DISABLED
    assert run.node.repair("2") == ["nvlink-degraded@2"]
    assert pynvml.nvmlDeviceGetNvLinkState(handle(2), 0) == pynvml.NVML_FEATURE_ENABLED
    errors = [pynvml.nvmlDeviceGetNvLinkErrorCounter(handle(2), n, CRC) for n in range(18)]
    tx = run.node.nvml.gpus[2].links[0].tx_bytes
    run.advance(120.0)
    assert errors[0] > 0  # the counts so far stay
    assert [pynvml.nvmlDeviceGetNvLinkErrorCounter(handle(2), n, CRC) for n in range(18)] == errors
    assert run.node.nvml.gpus[2].links[0].tx_bytes > tx  # carrying traffic again


@repair_check("ecc-dbe")
def _gpu_reset_clears_volatile_ecc(simulate: Simulate) -> None:
    run = simulate("ecc-dbe@5")
    run.advance(AFTER_ONSET)
    h = handle(5)
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, UNCORRECTED, VOLATILE) == 1
    assert pynvml.nvmlDeviceGetRemappedRows(h) == (0, 1, 1, 0)  # remap pending a reset
    assert run.node.repair("ecc-dbe@5") == ["ecc-dbe@5"]
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, UNCORRECTED, VOLATILE) == 0
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, CORRECTED, VOLATILE) == 0
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, UNCORRECTED, AGGREGATE) == 1  # InfoROM
    assert pynvml.nvmlDeviceGetRemappedRows(h) == (0, 1, 0, 0)  # remapped, none pending
    run.advance(300.0)  # the weak cell is out of use: no more single-bit flips
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, CORRECTED, VOLATILE) == 0


@repair_check("gpu-lost")
def _gpu_reset_brings_it_back(simulate: Simulate) -> None:
    run = simulate("gpu-lost@6")
    run.advance(AFTER_ONSET)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetHandleByIndex(6)
    assert run.node.repair("gpu-lost") == ["gpu-lost@6"]
    run.advance(60.0)
    assert pynvml.nvmlDeviceGetPowerUsage(handle(6)) > 0
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(6)).gpu >= 85


@repair_check("xid-storm")
def _storm_stops(simulate: Simulate) -> None:
    run = simulate("xid-storm@0")
    events = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle(0), pynvml.nvmlEventTypeXidCriticalError, events)
    run.advance(AFTER_ONSET)
    assert _drain(events) == list(scenarios.XID_STORM_BURST)
    assert run.node.repair("xid-storm") == ["xid-storm@0"]
    run.advance(5 * scenarios.XID_STORM_PERIOD_S)
    assert _drain(events) == []


@repair_check("nvml-driver-broken")
def _driver_loaded_again(simulate: Simulate) -> None:
    run = simulate("nvml-driver-broken")
    run.advance(AFTER_ONSET)
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlDeviceGetCount()
    assert run.node.repair() == ["nvml-driver-broken"]
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 8
    assert pynvml.nvmlDeviceGetPowerUsage(handle(0)) > 0


@repair_check("ib-congestion")
def _congestion_ends(simulate: Simulate) -> None:
    run = simulate("ib-congestion@mlx5_2")
    assert _stall(run, 60.0) > CONGESTION_RATIO
    assert run.node.repair("mlx5_2") == ["ib-congestion@mlx5_2"]
    assert _stall(run, 60.0) < CONGESTION_RATIO / 10


@repair_check("ib-link-flap")
def _port_retrained(simulate: Simulate) -> None:
    run = simulate("ib-link-flap@mlx5_1")
    run.advance(85.0)  # up, then down for 10 s, then up, then down again from 110 s
    run.advance(30.0)
    assert run.ports()["mlx5_1"].state == 1  # DOWN, in its second down spell
    assert run.node.repair("ib-link-flap") == ["ib-link-flap@mlx5_1"]
    port = run.ports()["mlx5_1"]
    assert (port.state, port.physical_state) == (4, 5)  # ACTIVE, LinkUp at once
    downed = port.counters["link_downed"]
    assert downed == 2  # the count stays
    for _ in range(6):
        run.advance(30.0)
        assert run.ports()["mlx5_1"].state == 4
    assert run.ports()["mlx5_1"].counters["link_downed"] == downed


@repair_check("ib-degraded")
def _full_rate_again(simulate: Simulate) -> None:
    run = simulate("ib-degraded@mlx5_4")
    ports = run.ports()
    assert ports["mlx5_4"].rate_bytes_per_second != ports["mlx5_5"].rate_bytes_per_second
    assert run.node.repair("ib-degraded@mlx5_4") == ["ib-degraded@mlx5_4"]
    ports = run.ports()
    assert ports["mlx5_4"].rate_bytes_per_second == ports["mlx5_5"].rate_bytes_per_second


@repair_check("ib-symbol-errors")
def _cable_replaced(simulate: Simulate) -> None:
    run = simulate("ib-symbol-errors@mlx5_5")
    run.advance(60.0)
    assert run.node.repair("ib-symbol-errors") == ["ib-symbol-errors@mlx5_5"]
    before = run.ports()["mlx5_5"].counters
    run.advance(300.0)
    after = run.ports()["mlx5_5"].counters
    assert before["symbol_error"] > 100
    for counter in ("symbol_error", "link_error_recovery", "port_rcv_errors"):
        assert after[counter] == before[counter]


@repair_check("ib-hca-vanish")
def _hca_back(simulate: Simulate) -> None:
    run = simulate("ib-hca-vanish@mlx5_2")
    sent = run.ports()["mlx5_2"].counters["port_xmit_data"]
    run.advance(AFTER_ONSET)
    assert "mlx5_2" not in run.ports()
    assert run.node.repair("ib-hca-vanish") == ["ib-hca-vanish@mlx5_2"]
    port = run.ports()["mlx5_2"]  # back at once: the driver was loaded again
    assert port.state == 4
    run.advance(60.0)
    assert run.ports()["mlx5_2"].counters["port_xmit_data"] > sent


def _reading(run: Run, name: str) -> tuple[float | None, int | None]:
    sensor = run.sensors()[name]
    return sensor.value, sensor.states


@repair_check("hot-aisle")
def _aisle_cooled_again(simulate: Simulate) -> None:
    run = simulate("hot-aisle@35")
    room, _ = _reading(run, "Inlet Temp")
    run.advance(AFTER_ONSET + HOT_AISLE_RAMP_S + 600.0)
    assert all(_reasons(i) & THERMAL for i in range(8))
    assert run.node.repair("hot-aisle") == ["hot-aisle@35"]
    run.advance(HOT_AISLE_RAMP_S / 2)  # the room cools over minutes, as it warmed
    inlet = _reading(run, "Inlet Temp")[0]
    assert room is not None and inlet is not None and inlet > room + 10
    run.advance(HOT_AISLE_RAMP_S / 2 + 600.0)
    assert _reading(run, "Inlet Temp") == (room, 0)
    assert all(_reasons(i) & THERMAL == 0 for i in range(8))


@repair_check("fan-failure")
def _fan_replaced(simulate: Simulate) -> None:
    run = simulate("fan-failure@1")
    run.advance(AFTER_ONSET + 600.0)
    assert _reading(run, "FAN1")[0] == 0 and any(_reasons(i) & THERMAL for i in range(8))
    assert run.node.repair("fan-failure@1") == ["fan-failure@1"]
    run.advance(60.0)  # the new fan spins up in seconds
    speed, states = _reading(run, "FAN1")
    assert speed == _reading(run, "FAN3")[0] and states == 0
    run.advance(600.0)
    assert all(_reasons(i) & THERMAL == 0 for i in range(8))


@repair_check("psu-failure")
def _supply_replaced(simulate: Simulate) -> None:
    run = simulate("psu-failure@2")
    run.advance(AFTER_ONSET)
    assert _reading(run, "PSU2 Status") == (None, 0b11)  # present, failure detected
    assert run.node.repair("psu-failure") == ["psu-failure@2"]
    assert _reading(run, "PSU2 Status") == (None, 0b01)


@repair_check("bmc-unreachable")
def _bmc_answers_again(simulate: Simulate) -> None:
    run = simulate("bmc-unreachable")
    run.advance(AFTER_ONSET)
    with pytest.raises(BmcError):
        run.read_bmc()
    assert run.node.repair() == ["bmc-unreachable"]
    assert run.read_bmc().dcmi_watts


def test_every_registered_scenario_has_a_repair_check() -> None:
    registered = set(known_scenarios())
    assert not registered - set(REPAIRS), "scenarios without a check of their repair"
    assert not set(REPAIRS) - registered, "repair checks for scenarios no longer registered"


@pytest.mark.parametrize("name", known_scenarios())
def test_scenario_is_repaired(name: str, simulate: Simulate) -> None:
    if name not in REPAIRS:
        pytest.fail(f"scenario {name!r} has no repair check in REPAIRS")
    REPAIRS[name](simulate)


def _drain(event_set: object) -> list[int]:
    found = []
    while True:
        try:
            found.append(pynvml.nvmlEventSetWait_v2(event_set, 0).eventData)
        except pynvml.NVMLError_Timeout:
            return found


def _stall(run: Run, seconds: float, device: str = "mlx5_2") -> float:
    """Share of the next `seconds` that `device` spent waiting to transmit."""
    before = run.ports()[device].counters["port_xmit_wait"]
    run.advance(seconds)
    ticks = run.ports()[device].counters["port_xmit_wait"] - before
    return ticks / (seconds * XMIT_WAIT_TICKS_PER_SECOND)


# --- time windows and details -----------------------------------------------------------------


def test_until_repairs_on_schedule(simulate: Simulate) -> None:
    run = simulate("ecc-dbe@5,until=2m", "gpu-lost@6,from=90s,until=3m")
    run.advance(60.0)
    assert pynvml.nvmlDeviceGetTotalEccErrors(handle(5), UNCORRECTED, VOLATILE) == 1
    assert pynvml.nvmlDeviceGetPowerUsage(handle(6)) > 0  # not begun yet
    run.advance(40.0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetPowerUsage(handle(6))
    run.advance(25.0)  # 125 s: the ECC error repaired
    assert pynvml.nvmlDeviceGetTotalEccErrors(handle(5), UNCORRECTED, VOLATILE) == 0
    run.advance(60.0)  # 185 s: the GPU reset
    assert pynvml.nvmlDeviceGetPowerUsage(handle(6)) > 0
    assert run.node.repair() == []  # nothing left running


def test_a_port_scenario_counts_only_inside_its_window(simulate: Simulate) -> None:
    run = simulate("ib-congestion@mlx5_2,from=1m,until=2m")
    assert _stall(run, 60.0) < CONGESTION_RATIO / 10
    assert _stall(run, 60.0) > CONGESTION_RATIO
    assert _stall(run, 60.0) < CONGESTION_RATIO / 10
    # one advance across the whole window counts exactly the window's share
    second = simulate("ib-congestion@mlx5_2,from=1m,until=2m")
    assert CONGESTION_RATIO / 3 < _stall(second, 180.0) < CONGESTION_RATIO


def test_node_wide_hca_vanish_takes_every_hca_and_leaves_the_pci_tree(
    simulate: Simulate,
) -> None:
    run = simulate("ib-hca-vanish")
    run.advance(AFTER_ONSET)
    ib = run.node.sysfs_root / "class/infiniband"
    assert ib.is_dir() and list(ib.iterdir()) == []  # as after `rmmod mlx5_ib`
    assert len(run.node.repair("ib-hca-vanish")) == 8
    assert sorted(p.name for p in ib.iterdir()) == [f"mlx5_{i}" for i in range(8)]
    assert all(port.state == 4 for port in run.ports().values())


def test_driver_broken_from_the_start_fails_init(tmp_path: Path) -> None:
    clock = ManualClock()
    specs = [parse_scenario("nvml-driver-broken,from=0,until=1m")]
    node = SimulatedNode(NODE, specs, clock=clock, sysfs_root=tmp_path)
    try:
        install(node.nvml)
        with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
            pynvml.nvmlInit()
        clock.advance(61.0)
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetCount() == 8
    finally:
        node.close()


def test_a_repair_before_the_onset_means_the_fault_never_happens(simulate: Simulate) -> None:
    run = simulate("gpu-lost@6", "ib-link-flap@mlx5_1,from=1m")
    run.advance(10.0)
    assert sorted(run.node.repair()) == ["gpu-lost@6", "ib-link-flap@mlx5_1"]
    run.advance(300.0)
    assert pynvml.nvmlDeviceGetPowerUsage(handle(6)) > 0
    assert run.ports()["mlx5_1"].counters["link_downed"] == 0


def test_ecc_reset_applies_a_pending_page_retirement() -> None:
    lib, clock = start("dgx1-v100", gpu_scenarios={5: "ecc-dbe"})
    clock.advance(AFTER_ONSET)
    h = handle(5)
    assert pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h) == 1
    assert lib.end_scenarios("ecc-dbe") == ["ecc-dbe@5"]
    assert pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h) == 0
    assert len(pynvml.nvmlDeviceGetRetiredPages_v2(h, 1)) == 1  # the page stays retired
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, UNCORRECTED, VOLATILE) == 0


@pytest.mark.parametrize(
    ("what", "error", "message"),
    [
        ("meltdown@3", UnknownScenario, "unknown scenario 'meltdown'"),
        ("meltdown", ValueError, "nothing called 'meltdown' on dgx-h100: give a scenario"),
        ("9", ValueError, r"nothing called '9' on dgx-h100: .* GPU index 0\.\.7"),
        ("mlx5_9", ValueError, "nothing called 'mlx5_9'"),
        ("ecc-dbe@12", ValueError, "nothing called '12'"),
    ],
)
def test_repair_refuses_what_the_node_does_not_have(
    simulate: Simulate, what: str, error: type[Exception], message: str
) -> None:
    run = simulate("ecc-dbe@5")
    with pytest.raises(error, match=message):
        run.node.repair(what)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("idle,until=5m", "sets the workload"),
        ("ecc-dbe,until=10s", "until= must come after the fault begins at 30s"),
        ("ib-congestion@mlx5_1,from=2m,until=1m", "until= must come after from="),
        ("nvml-driver-broken@3", "node-wide"),
        ("thermal-runaway@mlx5_0", r"needs a GPU index 0\.\.7"),
    ],
)
def test_node_refuses_windows_and_targets_that_cannot_be(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimulatedNode(NODE, [parse_scenario(spec)], clock=ManualClock())
