"""Each fault scenario moves what an operator would alert on, and only on its victim."""

from __future__ import annotations

import pynvml
import pytest

from agent.sim import scenarios
from agent.sim.nvml_lib import SimulatedNvml
from agent.sim.profiles import PROFILES
from tests.sim.conftest import start

THERMAL = (
    pynvml.nvmlClocksEventReasonSwThermalSlowdown | pynvml.nvmlClocksEventReasonHwThermalSlowdown
)


def handle(index: int) -> object:
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def test_scenario_names_and_unknown_names() -> None:
    assert scenarios.GPU_SCENARIOS == (
        "healthy-training",
        "idle",
        "thermal-runaway",
        "power-capped",
        "nvlink-degraded",
        "ecc-dbe",
        "gpu-lost",
        "xid-storm",
    )
    with pytest.raises(ValueError, match="known: healthy-training, idle, thermal-runaway"):
        SimulatedNvml("dgx-h100", scenario="meltdown")
    with pytest.raises(ValueError, match="unknown scenario"):
        SimulatedNvml("dgx-h100", gpu_scenarios={1: "meltdown"})
    with pytest.raises(ValueError, match="no GPU 8"):
        SimulatedNvml("dgx-h100", gpu_scenarios={8: "idle"})


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
