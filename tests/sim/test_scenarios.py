"""Each scenario moves what an operator would alert on, and only on its victim.

The first half runs every scenario in the registry (`known_scenarios()`, GPU and
InfiniBand alike) on a simulated node and checks the effect its docstring promises against
an untouched neighbour on the same node, so a scenario that did nothing fails, and a
scenario added without a check fails too. The second half looks at single scenarios in
more detail.
"""

from __future__ import annotations

from collections.abc import Callable

import pynvml
import pytest

from nvwatch.agent.config import parse_scenario
from nvwatch.agent.sources.bmc.reading import BmcError
from nvwatch.agent.sources.host import HostSource
from nvwatch.sim import scenario_names
from nvwatch.sim.bmc.scenarios import HOT_AISLE_RAMP_S
from nvwatch.sim.fabric.fabric import FLAP_DOWN_S, FLAP_PERIOD_S, XMIT_WAIT_TICKS_PER_SECOND
from nvwatch.sim.gpu import scenarios
from nvwatch.sim.node.node import SimulatedNode, UnknownScenario, known_scenarios
from nvwatch.sim.nvml import SimulatedNvml
from nvwatch.sim.profiles import PROFILES, pci_path
from tests.sim.conftest import (
    CONGESTION_RATIO,
    IDLE,
    NODE,
    POWER_CAP,
    THERMAL,
    Run,
    Simulate,
    handle,
    start,
)

NODE_PROFILE = PROFILES[NODE]

EFFECTS: dict[str, Callable[[Simulate], None]] = {}


def effect(name: str) -> Callable[[Callable[[Simulate], None]], Callable[[Simulate], None]]:
    def register(check: Callable[[Simulate], None]) -> Callable[[Simulate], None]:
        EFFECTS[name] = check
        return check

    return register


@effect("healthy-training")
def _trains(simulate: Simulate) -> None:
    # on an idle node, so the one GPU given healthy-training stands out
    simulate("healthy-training@7", "idle").advance(60.0)
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(7)).gpu >= 85
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(6)).gpu == 0


@effect("cold-start")
def _warms_up(simulate: Simulate) -> None:
    # GPU 3 starts cold under the job; its neighbours begin where the job holds them
    run = simulate("cold-start@3")
    cold, warm = (_temperature(i) for i in (3, 2))
    assert cold < warm - 15
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(3)).gpu >= 85  # training from t=0
    run.advance(600.0)  # ten thermal time constants: it has caught up
    assert abs(_temperature(3) - _temperature(2)) <= 2


def _temperature(index: int) -> int:
    return int(pynvml.nvmlDeviceGetTemperature(handle(index), pynvml.NVML_TEMPERATURE_GPU))


@effect("idle")
def _idles(simulate: Simulate) -> None:
    simulate("idle").advance(60.0)
    for index in range(8):
        assert pynvml.nvmlDeviceGetUtilizationRates(handle(index)).gpu == 0
        assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(index)) & IDLE


@effect("thermal-runaway")
def _overheats(simulate: Simulate) -> None:
    run = simulate("thermal-runaway@3")
    for _ in range(14):  # onset, then 6.5 minutes of failing cooling
        run.advance(30.0)
    slowdown = PROFILES[NODE].gpus[3].temp_slowdown_c
    assert pynvml.nvmlDeviceGetTemperature(handle(3), pynvml.NVML_TEMPERATURE_GPU) > slowdown
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(3)) & THERMAL == THERMAL
    assert pynvml.nvmlDeviceGetTemperature(handle(2), pynvml.NVML_TEMPERATURE_GPU) < slowdown
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(2)) & THERMAL == 0


@effect("power-capped")
def _caps_power(simulate: Simulate) -> None:
    run = simulate("power-capped@1")
    run.advance(scenarios.FAULT_ONSET_S + 1.0)
    tdp_mw = PROFILES[NODE].gpus[1].tdp_watts * 1000
    cap_mw = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle(1))
    assert cap_mw == pytest.approx(scenarios.POWER_CAP_FRACTION * tdp_mw)
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(handle(0)) == tdp_mw
    reasons = 0
    for _ in range(20):
        run.advance(0.3)
        assert pynvml.nvmlDeviceGetPowerUsage(handle(1)) <= cap_mw
        reasons |= pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(1))
    assert reasons & POWER_CAP


@effect("nvlink-degraded")
def _drops_a_link(simulate: Simulate) -> None:
    simulate("nvlink-degraded@2").advance(
        scenarios.FAULT_ONSET_S + scenarios.NVLINK_FAIL_AFTER_S + 1.0
    )
    assert pynvml.nvmlDeviceGetNvLinkState(handle(2), 0) == pynvml.NVML_FEATURE_DISABLED
    assert pynvml.nvmlDeviceGetNvLinkState(handle(1), 0) == pynvml.NVML_FEATURE_ENABLED
    crc = pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
    assert pynvml.nvmlDeviceGetNvLinkErrorCounter(handle(2), 0, crc) > 0
    assert pynvml.nvmlDeviceGetNvLinkErrorCounter(handle(1), 0, crc) == 0


@effect("ecc-dbe")
def _uncorrectable_ecc(simulate: Simulate) -> None:
    simulate("ecc-dbe@5").advance(scenarios.FAULT_ONSET_S + 5.0)
    uncorrected = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
    assert pynvml.nvmlDeviceGetTotalEccErrors(handle(5), *uncorrected) > 0
    assert pynvml.nvmlDeviceGetTotalEccErrors(handle(4), *uncorrected) == 0


@effect("gpu-lost")
def _loses_the_gpu(simulate: Simulate) -> None:
    run = simulate("gpu-lost@6")
    victim, neighbour = handle(6), handle(5)
    run.advance(scenarios.FAULT_ONSET_S + scenarios.GPU_LOST_AFTER_XID_S + 1.0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetPowerUsage(victim)
    assert pynvml.nvmlDeviceGetPowerUsage(neighbour) > 0


@effect("xid-storm")
def _storms_xids(simulate: Simulate) -> None:
    run = simulate("xid-storm@0")
    victim_events, neighbour_events = pynvml.nvmlEventSetCreate(), pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle(0), pynvml.nvmlEventTypeXidCriticalError, victim_events)
    pynvml.nvmlDeviceRegisterEvents(
        handle(1), pynvml.nvmlEventTypeXidCriticalError, neighbour_events
    )
    run.advance(scenarios.FAULT_ONSET_S + 1.0)
    assert _xids(victim_events) == list(scenarios.XID_STORM_BURST)
    assert _xids(neighbour_events) == []


@effect("ib-congestion")
def _congests(simulate: Simulate) -> None:
    run = simulate("ib-congestion@mlx5_2")
    before = run.ports()
    run.advance(60.0)
    after = run.ports()

    def stalled(device: str) -> float:
        ticks = after[device].counters["port_xmit_wait"] - before[device].counters["port_xmit_wait"]
        return ticks / (60.0 * XMIT_WAIT_TICKS_PER_SECOND)

    assert stalled("mlx5_2") > CONGESTION_RATIO
    assert stalled("mlx5_3") < CONGESTION_RATIO / 10


@effect("ib-link-flap")
def _flaps(simulate: Simulate) -> None:
    run = simulate("ib-link-flap@mlx5_1")
    run.advance(FLAP_PERIOD_S - FLAP_DOWN_S / 2)  # in the middle of the first down spell
    down = run.ports()
    assert (down["mlx5_1"].state, down["mlx5_1"].physical_state) == (1, 2)  # DOWN, Polling
    assert (down["mlx5_0"].state, down["mlx5_0"].physical_state) == (4, 5)  # ACTIVE, LinkUp
    run.advance(FLAP_DOWN_S)
    back = run.ports()
    assert back["mlx5_1"].state == 4
    assert back["mlx5_1"].counters["link_downed"] == 1
    assert back["mlx5_0"].counters["link_downed"] == 0


@effect("ib-degraded")
def _trains_down(simulate: Simulate) -> None:
    ports = simulate("ib-degraded@mlx5_4").ports()
    victim, neighbour = ports["mlx5_4"], ports["mlx5_5"]
    assert victim.state == 4  # still up, only slower
    assert victim.rate_bytes_per_second is not None
    assert neighbour.rate_bytes_per_second is not None
    assert victim.rate_bytes_per_second < neighbour.rate_bytes_per_second


@effect("ib-symbol-errors")
def _symbol_errors(simulate: Simulate) -> None:
    run = simulate("ib-symbol-errors@mlx5_5")
    before = run.ports()
    run.advance(300.0)
    after = run.ports()

    def grew(device: str, counter: str) -> int:
        return after[device].counters[counter] - before[device].counters[counter]

    assert grew("mlx5_5", "symbol_error") > 100
    assert grew("mlx5_5", "link_error_recovery") > 0
    assert grew("mlx5_6", "symbol_error") == 0


@effect("nvml-driver-broken")
def _breaks_the_driver(simulate: Simulate) -> None:
    run = simulate("nvml-driver-broken")  # NVML initialised before the fault
    assert pynvml.nvmlDeviceGetCount() == 8
    run.advance(scenarios.FAULT_ONSET_S + 1.0)
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    # the GPUs are still on the PCI bus: broken, not absent
    for index in range(8):
        function = (
            run.node.sysfs_root / "bus/pci/devices" / pci_path(NODE_PROFILE, "gpu", index)[-1]
        )
        assert (function / "vendor").read_text().strip() == "0x10de"


@effect("ib-hca-vanish")
def _hca_vanishes(simulate: Simulate) -> None:
    run = simulate("ib-hca-vanish@mlx5_2")
    assert "mlx5_2" in run.ports()
    run.advance(scenarios.FAULT_ONSET_S + 1.0)
    ib = run.node.sysfs_root / "class/infiniband"
    assert not (ib / "mlx5_2").exists() and (ib / "mlx5_3").is_dir()
    assert set(run.ports()) == {f"mlx5_{i}" for i in range(8)} - {"mlx5_2"}
    # the HCA's PCI function stays, as after an mlx5_ib unload
    function = run.node.sysfs_root / "bus/pci/devices" / pci_path(NODE_PROFILE, "nic", 2)[-1]
    assert (function / "vendor").read_text().strip() == "0x15b3"


@effect("gpu-slow")
def _slows_the_gpu(simulate: Simulate) -> None:
    run = simulate("gpu-slow@3,slowdown=0.25")
    run.advance(scenarios.FAULT_ONSET_S + 5.0)
    slow, healthy = (pynvml.nvmlDeviceGetClockInfo(handle(i), pynvml.NVML_CLOCK_SM) for i in (3, 2))
    assert slow == pytest.approx(0.75 * healthy, abs=2)
    # nothing to show for it: no thermal or power reason, and it draws less, not more
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(3)) & (THERMAL | POWER_CAP) == 0
    assert pynvml.nvmlDeviceGetPowerUsage(handle(3)) < pynvml.nvmlDeviceGetPowerUsage(handle(2))


@effect("pcie-downtrained")
def _narrows_the_link(simulate: Simulate) -> None:
    run = simulate("pcie-downtrained@4")
    run.advance(scenarios.FAULT_ONSET_S + 5.0)
    width = NODE_PROFILE.gpus[4].pcie_width
    assert pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle(4)) == width // 2
    assert pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle(4)) == width
    assert pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle(5)) == width
    rx = pynvml.NVML_PCIE_UTIL_RX_BYTES
    narrow, wide = (pynvml.nvmlDeviceGetPcieThroughput(handle(i), rx) for i in (4, 5))
    assert narrow == pytest.approx(wide / 2, rel=0.01)


@effect("cpu-starved")
def _starves_the_host(simulate: Simulate) -> None:
    run = simulate("cpu-starved")
    host = HostSource(cpu_times=run.node.host.cpu_times)
    host.collect()
    run.advance(scenarios.FAULT_ONSET_S)
    calm = host.collect().cpu_utilization_ratio
    run.advance(60.0)
    starved = host.collect().cpu_utilization_ratio
    assert calm is not None and calm < 0.5
    assert starved is not None and starved > 0.95


# the BMC's view: SDR threshold bits (0 LNC, 1 LC, 3 UNC, 4 UC) and supply offsets
LOWER_CRITICAL, UPPER_CRITICAL = 1 << 1, 1 << 4
PSU_PRESENT, PSU_FAILED = 1 << 0, 1 << 1
SETTLED_S = 600.0  # ten GPU thermal time constants, twenty of the exhaust's


def _gpus_in_slowdown() -> list[int]:
    return [
        i for i in range(8) if pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(i)) & THERMAL
    ]


def _value(run: Run, name: str) -> float:
    value = run.sensors()[name].value
    assert value is not None, f"{name} reads unavailable"
    return value


def _states(run: Run, name: str) -> int:
    states = run.sensors()[name].states
    assert states is not None, f"{name} reads unavailable"
    return states


@effect("hot-aisle")
def _heats_the_rack(simulate: Simulate) -> None:
    calm = simulate()  # a node whose aisle stays cool
    run = simulate("hot-aisle@35")  # installed last: pynvml reads this one
    for node in (calm, run):
        node.advance(scenarios.FAULT_ONSET_S + HOT_AISLE_RAMP_S + SETTLED_S)
    rise = _value(run, "Inlet Temp") - _value(calm, "Inlet Temp")
    assert rise == pytest.approx(35, abs=1)
    assert _states(run, "Inlet Temp") & UPPER_CRITICAL and _states(calm, "Inlet Temp") == 0
    assert _value(run, "Exhaust Temp") > _value(calm, "Exhaust Temp") + rise / 2
    # the GPUs breathe the inlet air: every one is held down by heat, none on the cool node
    assert _gpus_in_slowdown() == list(range(8))
    assert all(gpu.reasons & THERMAL == 0 for gpu in calm.node.nvml.gpus)


@effect("fan-failure")
def _stops_a_fan(simulate: Simulate) -> None:
    run = simulate("fan-failure@2")
    inlet, exhaust = _value(run, "Inlet Temp"), _value(run, "Exhaust Temp")
    run.advance(scenarios.FAULT_ONSET_S + SETTLED_S)
    assert _value(run, "FAN2") == 0 and _states(run, "FAN2") & LOWER_CRITICAL
    others = [name for name in run.sensors() if name.startswith("FAN") and name != "FAN2"]
    assert others and all(_value(run, f) > 0 and _states(run, f) == 0 for f in others)
    assert _value(run, "Inlet Temp") == inlet  # the room is fine ...
    assert _value(run, "Exhaust Temp") > exhaust + 2  # ... the node is not
    # the GPUs behind the stopped fan, and only they, run into slowdown
    slowed = _gpus_in_slowdown()
    assert slowed and len(slowed) < 8 and slowed == list(range(slowed[0], slowed[-1] + 1))


@effect("psu-failure")
def _fails_a_supply(simulate: Simulate) -> None:
    calm = simulate()
    run = simulate("psu-failure@3")
    for node in (calm, run):
        node.advance(scenarios.FAULT_ONSET_S + 5.0)
    supplies = sorted(name for name in run.sensors() if name.endswith(" Status"))
    assert _states(run, "PSU3 Status") == PSU_PRESENT | PSU_FAILED
    assert all(_states(run, s) == PSU_PRESENT for s in supplies if s != "PSU3 Status")
    assert all(_states(calm, s) == PSU_PRESENT for s in supplies)
    # the other supplies carry the load: the node draws what its twin draws
    assert run.read_bmc().dcmi_watts == calm.read_bmc().dcmi_watts


@effect("bmc-unreachable")
def _silences_the_bmc(simulate: Simulate) -> None:
    run = simulate("bmc-unreachable")
    assert run.read_bmc().sensors
    run.advance(scenarios.FAULT_ONSET_S + 1.0)
    with pytest.raises(BmcError, match=r"no answer from 127\.1\.0\.1:623"):
        run.read_bmc()
    assert pynvml.nvmlDeviceGetPowerUsage(handle(0)) > 0  # the node runs on


def test_targeted_workload_scenario_leaves_the_rest_of_the_node_alone(
    simulate: Simulate,
) -> None:
    # whatever the order, a targeted workload sets only its GPU's
    simulate("idle", "healthy-training@7").advance(60.0)
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(6)).gpu == 0
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(7)).gpu >= 85


def test_every_registered_scenario_has_an_effect_check() -> None:
    registered = set(known_scenarios())
    assert not registered - set(EFFECTS), "scenarios without a check of their effect"
    assert not set(EFFECTS) - registered, "checks for scenarios no longer registered"


@pytest.mark.parametrize("name", known_scenarios())
def test_scenario_has_its_documented_effect(name: str, simulate: Simulate) -> None:
    if name not in EFFECTS:
        pytest.fail(f"scenario {name!r} has no effect check in EFFECTS")
    EFFECTS[name](simulate)


def test_unknown_scenarios_are_refused_with_the_known_names() -> None:
    with pytest.raises(ValueError, match="unknown scenario 'meltdown'") as excinfo:
        SimulatedNvml("dgx-h100", scenario="meltdown")
    assert all(name in str(excinfo.value) for name in scenario_names.GPU_SCENARIOS)
    with pytest.raises(UnknownScenario) as node_error:
        SimulatedNode("dgx-h100", [parse_scenario("meltdown")])
    assert all(name in str(node_error.value) for name in known_scenarios())
    with pytest.raises(ValueError, match="unknown scenario"):
        SimulatedNvml("dgx-h100", gpu_scenarios={1: "meltdown"})
    with pytest.raises(ValueError, match="no GPU 8"):
        SimulatedNvml("dgx-h100", gpu_scenarios={8: "idle"})


# --- single scenarios in detail ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_healthy_training_stays_below_every_alert(name: str) -> None:
    _, clock = start(name, scenario="healthy-training")
    clock.advance(900.0)
    for index, model in enumerate(PROFILES[name].gpus):
        h = handle(index)
        assert pynvml.nvmlDeviceGetTemperature(h, 0) < model.temp_slowdown_c - 10
        assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu >= 85
        assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) & (THERMAL | 0x4) == 0
        assert pynvml.nvmlDeviceGetPowerUsage(h) <= model.tdp_watts * 1000


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_thermal_runaway_crosses_slowdown_within_minutes(name: str) -> None:
    lib, clock = start(name, gpu_scenarios={3: "thermal-runaway"})
    model = PROFILES[name].gpus[3]
    crossed_at = None
    for _ in range(int(400 / 5)):
        clock.advance(5.0)
        if pynvml.nvmlDeviceGetTemperature(handle(3), 0) > model.temp_slowdown_c:
            crossed_at = clock() - scenarios.FAULT_ONSET_S
            break
    assert crossed_at is not None and 90.0 <= crossed_at <= 270.0
    clock.advance(120.0)
    victim, healthy = handle(3), handle(2)
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(victim) & THERMAL == THERMAL
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(healthy) & THERMAL == 0
    sm_clock = pynvml.nvmlDeviceGetClockInfo(victim, pynvml.NVML_CLOCK_SM)
    assert sm_clock < 0.9 * pynvml.nvmlDeviceGetClockInfo(healthy, pynvml.NVML_CLOCK_SM)
    assert lib.gpus[3].power_w < 0.9 * lib.gpus[2].power_w  # same load phase, less power
    if model.violation_counters:
        thermal_ns = pynvml.nvmlDeviceGetViolationStatus(victim, 1).violationTime
        assert thermal_ns > 60e9
        assert pynvml.nvmlDeviceGetViolationStatus(healthy, 1).violationTime == 0


def test_power_capped_pins_power_at_sixty_percent_of_tdp() -> None:
    lib, clock = start("dgx-h100", scenario="power-capped")
    clock.advance(10.0)
    h = handle(0)
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 700_000
    clock.advance(scenarios.FAULT_ONSET_S)
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 420_000
    assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) == 700_000
    capped = 0
    for _ in range(40):
        clock.advance(0.3)
        power = pynvml.nvmlDeviceGetPowerUsage(h)
        assert power <= 420_000
        if pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) & 0x4:
            capped += 1
            assert power == 420_000
    assert capped >= 20
    first = pynvml.nvmlDeviceGetViolationStatus(h, 0).violationTime
    clock.advance(60.0)
    assert pynvml.nvmlDeviceGetViolationStatus(h, 0).violationTime > first + 30e9
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(handle(1)) == 700_000
    assert lib.gpus[1].power_limit_w == 700.0


def test_nvlink_degraded_drops_a_link_and_errors_climb() -> None:
    lib, clock = start("dgx-h100", scenario="nvlink-degraded")
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle(0), 0x8, event_set)
    h = handle(0)
    clock.advance(scenarios.FAULT_ONSET_S + 10.0)
    assert pynvml.nvmlDeviceGetNvLinkState(h, 0) == 1
    flapping = pynvml.nvmlDeviceGetNvLinkErrorCounter(h, 0, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)
    assert flapping > 100
    clock.advance(scenarios.NVLINK_FAIL_AFTER_S)
    assert pynvml.nvmlDeviceGetNvLinkState(h, 0) == 0
    assert pynvml.nvmlEventSetWait_v2(event_set, 10).eventData == 74
    dead_tx = lib.gpus[0].links[0].tx_bytes
    errors_before = [
        pynvml.nvmlDeviceGetNvLinkErrorCounter(h, link, counter)
        for link in (0, 5)
        for counter in range(5)
    ]
    clock.advance(120.0)
    errors_after = [
        pynvml.nvmlDeviceGetNvLinkErrorCounter(h, link, counter)
        for link in (0, 5)
        for counter in range(5)
    ]
    assert errors_after[:5] == errors_before[:5]  # the down link's counters stop
    assert all(a > b for a, b in zip(errors_after[5:], errors_before[5:], strict=True))
    (tx_dead, tx_live) = pynvml.nvmlDeviceGetFieldValues(
        h,
        [
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 1),
        ],
    )
    assert tx_dead.value.ullVal == int(dead_tx) // 1024
    assert tx_live.value.ullVal > tx_dead.value.ullVal
    # other GPUs are untouched
    assert pynvml.nvmlDeviceGetNvLinkErrorCounter(handle(1), 0, 0) == 0
    assert all(pynvml.nvmlDeviceGetNvLinkState(handle(1), link) for link in range(18))


def test_nvlink_degraded_picks_a_gpu_that_has_nvlink() -> None:
    lib, clock = start("geforce-workstation", scenario="nvlink-degraded")
    clock.advance(scenarios.FAULT_ONSET_S + scenarios.NVLINK_FAIL_AFTER_S + 1.0)
    assert pynvml.nvmlDeviceGetNvLinkState(handle(2), 0) == 0
    assert pynvml.nvmlDeviceGetNvLinkState(handle(3), 0) == 1
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetNvLinkErrorCounter(handle(2), 1, 4)  # no data ECC before NVLink3
    assert lib.gpus[2].links[1].errors["replay"] > 0


def _xids(event_set: object) -> list[int]:
    found = []
    while True:
        try:
            found.append(pynvml.nvmlEventSetWait_v2(event_set, 0).eventData)
        except pynvml.NVMLError_Timeout:
            return found


@pytest.mark.parametrize(("name", "remapping"), [("dgx-h100", True), ("dgx1-v100", False)])
def test_ecc_double_bit_error(name: str, remapping: bool) -> None:
    _, clock = start(name, gpu_scenarios={5: "ecc-dbe"})
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle(5), 0x8 | 0x2, event_set)
    h = handle(5)
    uncorrected = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,)
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, *uncorrected, pynvml.NVML_VOLATILE_ECC) == 0
    clock.advance(scenarios.FAULT_ONSET_S + 5.0)
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, *uncorrected, pynvml.NVML_VOLATILE_ECC) == 1
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, *uncorrected, pynvml.NVML_AGGREGATE_ECC) == 1
    assert (
        pynvml.nvmlDeviceGetMemoryErrorCounter(
            h, *uncorrected, pynvml.NVML_VOLATILE_ECC, pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY
        )
        == 1
    )
    events = []
    while True:
        try:
            data = pynvml.nvmlEventSetWait_v2(event_set, 0)
        except pynvml.NVMLError_Timeout:
            break
        events.append((data.eventType, data.eventData))
    assert events == [(0x2, 0), (0x8, 48), (0x8, 63)]
    if remapping:
        assert pynvml.nvmlDeviceGetRemappedRows(h) == (0, 1, 1, 0)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetRetiredPages(h, 1)
    else:
        pages = pynvml.nvmlDeviceGetRetiredPages_v2(h, 1)
        assert len(pages) == 1 and pages[0]["address"] % 16 == 0
        assert pynvml.nvmlDeviceGetRetiredPages(h, 0) == []
        assert pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h) == 1
    corrected_then = pynvml.nvmlDeviceGetTotalEccErrors(h, 0, 0)
    clock.advance(200.0)
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, 0, 0) >= corrected_then + 5
    assert pynvml.nvmlDeviceGetTotalEccErrors(handle(4), 1, 1) == 0


def test_gpu_lost_only_takes_down_its_victim() -> None:
    _, clock = start("dgx1-p100", gpu_scenarios={6: "gpu-lost"})
    event_set = pynvml.nvmlEventSetCreate()
    victim = handle(6)
    pynvml.nvmlDeviceRegisterEvents(victim, 0x8, event_set)
    clock.advance(scenarios.FAULT_ONSET_S + scenarios.GPU_LOST_AFTER_XID_S + 1.0)
    assert _xids(event_set) == [79]
    for call in (pynvml.nvmlDeviceGetPowerUsage, pynvml.nvmlDeviceGetUUID):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call(victim)
    assert all(pynvml.nvmlDeviceGetPowerUsage(handle(i)) > 0 for i in range(8) if i != 6)


def test_xid_storm_repeats_bursts() -> None:
    _, clock = start("dgx-a100", scenario="xid-storm")
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle(0), 0x8, event_set)
    clock.advance(scenarios.FAULT_ONSET_S + 2 * scenarios.XID_STORM_PERIOD_S + 1.0)
    xids = _xids(event_set)
    assert xids == list(scenarios.XID_STORM_BURST) * 3
    assert set(xids) == {13, 31, 43}
    clock.advance(scenarios.XID_STORM_PERIOD_S)
    assert _xids(event_set) == list(scenarios.XID_STORM_BURST)


def test_idle_scenario_and_per_gpu_override() -> None:
    _, clock = start("dgx-h100", scenario="idle", gpu_scenarios={7: "healthy-training"})
    clock.advance(60.0)
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(0)).gpu == 0
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle(0)) & 0x1
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(7)).gpu >= 85
    assert pynvml.nvmlDeviceGetPowerUsage(handle(7)) > 2 * pynvml.nvmlDeviceGetPowerUsage(handle(0))
