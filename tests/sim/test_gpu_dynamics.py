"""Physical behaviour of a simulated GPU, read through the real pynvml bindings."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pynvml
import pytest

from nvwatch.sim.clock import ManualClock
from nvwatch.sim.gpu.thermal import AMBIENT_C
from nvwatch.sim.nvml import SimulatedNvml, install, uninstall
from nvwatch.sim.profiles import H100_SXM5_80
from nvwatch.sim.workload import Workload


@pytest.fixture(autouse=True)
def _restore_pynvml() -> Iterator[None]:
    yield
    uninstall()


def start(profile: str = "dgx-h100", **kwargs: object) -> tuple[SimulatedNvml, ManualClock]:
    clock = ManualClock()
    lib = SimulatedNvml(profile, clock=clock, **kwargs)  # type: ignore[arg-type]
    install(lib)
    pynvml.nvmlInit()
    return lib, clock


def test_power_is_capped_at_the_enforced_limit_with_reason_and_violation_time() -> None:
    lib, clock = start()
    lib.gpus[0].power_limit_w = 350.0  # demand under training reaches ~670 W
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    capped_samples = 0
    for _ in range(40):
        clock.advance(0.25)
        power = pynvml.nvmlDeviceGetPowerUsage(h)
        reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
        assert power <= 350_000
        if reasons & pynvml.nvmlClocksEventReasonSwPowerCap:
            capped_samples += 1
            assert power == 350_000
            assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) < 1980
    assert capped_samples > 20
    violation = pynvml.nvmlDeviceGetViolationStatus(h, pynvml.NVML_PERF_POLICY_POWER)
    assert 5e9 < violation.violationTime <= 10e9  # ns, at most the 10 s simulated
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 350_000
    # an uncapped neighbour reports no cap and no power violation time
    other = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetViolationStatus(other, 0).violationTime == 0
    assert pynvml.nvmlDeviceGetPowerUsage(other) > 350_000 or not (
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(other) & 0x4
    )


def test_temperature_follows_power_with_first_order_lag() -> None:
    lib, clock = start(scenario="cold-start")  # idle-cold GPUs the job starts on
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    t0 = lib.gpus[0].temperature_c
    tau = H100_SXM5_80.thermal_time_constant_s
    clock.advance(tau)
    lib.advance()
    after_one_tau = lib.gpus[0].temperature_c
    clock.advance(10 * tau)
    lib.advance()
    steady = lib.gpus[0].temperature_c
    fraction = (after_one_tau - t0) / (steady - t0)
    assert 0.55 < fraction < 0.72  # 1 - 1/e = 0.632, the square-wave load adds ripple
    # steady state: ambient + R x mean power (energy over the last minute / 60 s)
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    clock.advance(60.0)
    mean_power = (pynvml.nvmlDeviceGetTotalEnergyConsumption(h) - e0) / 1000 / 60.0
    expected = AMBIENT_C + H100_SXM5_80.thermal_resistance_c_per_w * mean_power
    assert abs(lib.gpus[0].temperature_c - expected) < 2.5
    assert pynvml.nvmlDeviceGetTemperature(h, 0) == round(lib.gpus[0].temperature_c)


def test_energy_is_the_integral_of_power() -> None:
    _, clock = start()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    integral_mj = 0.0
    dt = 0.1
    for _ in range(600):
        clock.advance(dt)
        integral_mj += pynvml.nvmlDeviceGetPowerUsage(h) * dt  # mW x s = mJ
    energy = pynvml.nvmlDeviceGetTotalEnergyConsumption(h) - e0
    assert energy == pytest.approx(integral_mj, rel=0.02)
    assert 300 * 60 * 1000 < energy < 700 * 60 * 1000  # a minute of H100 training


def test_counters_are_monotonic_and_traffic_matches_the_workload() -> None:
    lib, clock = start()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    fields = [
        pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0),
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 5),
        pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
        pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
    ]
    previous = [v.value.ullVal for v in pynvml.nvmlDeviceGetFieldValues(h, fields)]
    for step in (0.3, 1.7, 5.0, 0.01, 60.0):
        clock.advance(step)
        current = [v.value.ullVal for v in pynvml.nvmlDeviceGetFieldValues(h, fields)]
        assert all(c >= p for c, p in zip(current, previous, strict=True))
        previous = current
    elapsed = clock()
    expected_bytes = lib.workload.mean_comm_intensity(0.0, elapsed, steps=4096) * 25e9 * elapsed
    assert previous[1] * 1024 == pytest.approx(expected_bytes, rel=0.02)
    assert pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES) > 0  # KB/s


def test_idle_gpu_parks_clocks_and_sets_the_idle_reason() -> None:
    _, clock = start("dgx-a100", scenario="idle")
    clock.advance(120.0)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu == 0
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) == pynvml.nvmlClocksEventReasonGpuIdle
    assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 210
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 55_000
    assert pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h) == 1
    assert pynvml.nvmlDeviceGetPerformanceState(h) == 8
    low_util = pynvml.nvmlDeviceGetViolationStatus(h, pynvml.NVML_PERF_POLICY_LOW_UTILIZATION)
    assert low_util.violationTime == pytest.approx(120e9, rel=0.01)


def test_geforce_fan_tracks_temperature() -> None:
    lib, clock = start("geforce-workstation", scenario="cold-start")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    cold = pynvml.nvmlDeviceGetFanSpeed(h)
    clock.advance(300.0)
    hot = pynvml.nvmlDeviceGetFanSpeed_v2(h, 0)
    assert 30 <= cold < hot <= 100
    assert pynvml.nvmlDeviceGetNumFans(h) == 1
    assert lib.gpus[0].temperature_c > 55


def test_big_clock_jump_is_stable_and_cheap() -> None:
    lib, clock = start(scenario="thermal-runaway")
    clock.advance(3600.0)
    began = time.perf_counter()
    lib.advance()
    assert time.perf_counter() - began < 1.0
    for gpu in lib.gpus:
        assert math.isfinite(gpu.temperature_c)
        assert AMBIENT_C < gpu.temperature_c < gpu.model.temp_shutdown_c
    # the throttled victim holds just above slowdown instead of oscillating
    victim = lib.gpus[0]
    assert victim.model.temp_slowdown_c < victim.temperature_c < victim.model.temp_slowdown_c + 5


def test_same_seed_and_clock_give_identical_readings() -> None:
    readings = []
    for _ in range(2):
        clock = ManualClock()
        lib = SimulatedNvml("dgx1-v100", scenario="nvlink-degraded", seed=5, clock=clock)
        install(lib)
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        series = []
        for step in (1.0, 7.5, 40.0, 0.2, 100.0):
            clock.advance(step)
            series.append(
                (
                    pynvml.nvmlDeviceGetPowerUsage(h),
                    pynvml.nvmlDeviceGetTemperature(h, 0),
                    pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
                    pynvml.nvmlDeviceGetNvLinkErrorCounter(h, 1, 2),
                    pynvml.nvmlDeviceGetUUID(h),
                )
            )
        readings.append(series)
        uninstall()
    assert readings[0] == readings[1]
    other = SimulatedNvml("dgx1-v100", seed=6, clock=ManualClock())
    assert other.gpus[0].uuid != readings[0][0][4]


def test_inference_workload_varies_per_gpu() -> None:
    lib, clock = start("inference-t4", workload=Workload(kind="inference"))
    clock.advance(100.0)
    utils = {
        pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(i)).gpu
        for i in range(4)
    }
    assert len(utils) > 1
    assert all(5 <= u <= 100 for u in utils)
    assert lib.workload.kind == "inference"
