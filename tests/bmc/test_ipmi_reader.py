"""IpmiReader against a real BMC (OpenIPMI's ipmi_sim on loopback): every value it reads
is what the BMC holds, as set through its console, before and after injected faults;
every way a read fails is one line within the module's timeout.

Expected values come from the test bed: the raw value the console set, times the SDR's
conversion factor (tests/bmc/ipmi_sim.py), never from the reader's own tables.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nvwatch.agent.sources.bmc.ipmi import IpmiReader
from nvwatch.agent.sources.bmc.reading import BmcError, BmcReading, Module, SensorReading, Target
from tests.bmc import responders
from tests.bmc.ipmi_sim import IpmiSim, running_ipmi_sim
from tests.bmc.sim_sensors import (
    CPU,
    EXHAUST,
    FAN1,
    FAN2,
    INLET,
    NAMES,
    POWER,
    POWER_M,
    PSU1,
    PSU2,
    PSU3,
    PSU4,
    PSU_AC_LOST,
    PSU_FAILURE,
    PSU_PRESENT,
    RECORD_IDS,
    SENSORS,
    SimSensor,
)
from tests.conftest import require_tool

# how far past the module's timeout a failing read may end: one request's parsing and
# the socket's close, measured at a few milliseconds; the margin is for a busy CI core
OVERRUN_S = 0.25
# threshold state bits as Get Sensor Reading reports them (IPMI 2.0 table 35-15)
LNC, LC, UNC, UC = 1 << 0, 1 << 1, 1 << 3, 1 << 4


def _by_name(reading: BmcReading) -> dict[str, SensorReading]:
    return {sensor.name: sensor for sensor in reading.sensors}


def _sim(number: int) -> SimSensor:
    return next(sensor for sensor in SENSORS if sensor.number == number)


def test_every_sensor_reads_what_the_bmc_holds(target: Target, module: Module) -> None:
    reading = IpmiReader().read(target, module)
    sensors = _by_name(reading)
    assert set(sensors) == set(NAMES.values())
    for sim in SENSORS:
        for name in sim.names.values():  # a shared record's sensors each read
            got = sensors[name]
            assert got.record_id == RECORD_IDS[sim.number], name
            if not sim.scanning:
                assert (got.value, got.states) == (None, None), "unavailable must read as absent"
            elif sim.unit is None:  # a power supply: present, nothing else
                assert (got.value, got.unit, got.states) == (None, None, 1 << PSU_PRESENT), name
            else:
                assert got.value == sim.raw * sim.m, name
                assert got.states == 0, name
    assert reading.dcmi_watts == _sim(POWER).raw * POWER_M
    assert 0 < reading.duration_s < module.timeout_s


def test_sdr_fields_are_the_records(target: Target, module: Module) -> None:
    """Entity ids, types and units as the SDR compiled from the test bed's table says."""
    sensors = _by_name(IpmiReader().read(target, module))
    assert sensors["Inlet Temp"].entity_id == 0x37  # air inlet
    assert sensors["CPU Temp"].entity_id == 0x03  # processor
    assert sensors["Exhaust Temp"].entity_id == 0x07  # system board: exhaust has no entity
    assert {sensors[n].sensor_type for n in ("Fan1", "Fan2")} == {0x04}
    assert sensors["PSU1 Status"].reading_type == 0x6F  # sensor-specific
    assert sensors["Pwr Consumption"].unit == 6  # watts
    assert sensors["Fan1"].unit == 18  # RPM


def test_faults_read_as_injected(bmc: IpmiSim, target: Target, module: Module) -> None:
    bmc.set_raw(INLET, 42)  # above UNC 35 and UC 40
    bmc.set_raw(EXHAUST, 65)  # above UNC 60 only
    bmc.set_raw(FAN2, 3)  # 300 RPM: below LNC and LC
    bmc.set_bit(PSU1, PSU_FAILURE, True)
    bmc.set_bit(PSU2, PSU_AC_LOST, True)
    bmc.set_bit(PSU4, PSU_FAILURE, True)  # the second sensor of a shared record
    bmc.set_dcmi_watts(452)  # and the power sensor follows, 113 x 4 W
    sensors = _by_name(reading := IpmiReader().read(target, module))
    assert (sensors["Inlet Temp"].value, sensors["Inlet Temp"].states) == (42, UNC | UC)
    assert (sensors["Exhaust Temp"].value, sensors["Exhaust Temp"].states) == (65, UNC)
    assert (sensors["Fan2"].value, sensors["Fan2"].states) == (300, LNC | LC)
    assert sensors["Fan1"].states == 0
    assert sensors["PSU1 Status"].states == (1 << PSU_PRESENT) | (1 << PSU_FAILURE)
    assert sensors["PSU2 Status"].states == (1 << PSU_PRESENT) | (1 << PSU_AC_LOST)
    assert sensors[NAMES[PSU4]].states == (1 << PSU_PRESENT) | (1 << PSU_FAILURE)
    assert sensors[NAMES[PSU3]].states == 1 << PSU_PRESENT
    assert reading.dcmi_watts == 452
    assert sensors["Pwr Consumption"].value == 452


def test_a_pulled_supply_reads_absent_from_its_bay(
    bmc: IpmiSim, target: Target, module: Module
) -> None:
    bmc.set_bit(PSU2, PSU_PRESENT, False)
    assert _by_name(IpmiReader().read(target, module))["PSU2 Status"].states == 0


def test_excluded_sensors_and_collectors(target: Target, module: Module) -> None:
    reader = IpmiReader()
    excluded = dataclasses.replace(module, exclude_sensor_ids=frozenset({RECORD_IDS[CPU]}))
    assert "CPU Temp" not in _by_name(reader.read(target, excluded))
    dcmi_only = reader.read(target, dataclasses.replace(module, collectors=frozenset({"dcmi"})))
    assert (dcmi_only.sensors, dcmi_only.dcmi_watts) == ((), _sim(POWER).raw * POWER_M)
    ipmi_only = reader.read(target, dataclasses.replace(module, collectors=frozenset({"ipmi"})))
    assert ipmi_only.dcmi_watts is None
    assert len(ipmi_only.sensors) == len(NAMES)


def test_reads_from_many_threads_at_once_agree(target: Target, module: Module) -> None:
    """A read holds its own session: eight threads on one reader, five reads each."""
    reader = IpmiReader()
    expected = IpmiReader().read(target, module)

    def values(_: int) -> list[tuple[str, float | None, int | None]]:
        reading = reader.read(target, module)
        return [(s.name, s.value, s.states) for s in reading.sensors] + [
            ("dcmi", reading.dcmi_watts, None)
        ]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(values, range(40)))
    assert all(result == values(0) for result in results)
    assert values(0)[-1] == ("dcmi", expected.dcmi_watts, None)


def test_kept_records_still_read_live_values(bmc: IpmiSim, target: Target, module: Module) -> None:
    """The second read of a reader takes its SDR records from the first (the stamp is
    unchanged) and must still read each sensor anew."""
    reader = IpmiReader()
    assert _by_name(reader.read(target, module))["Fan1"].value == _sim(FAN1).raw * _sim(FAN1).m
    bmc.set_raw(FAN1, 20)
    assert _by_name(reader.read(target, module))["Fan1"].value == 20 * _sim(FAN1).m


def test_wrong_password_is_one_line_within_the_timeout(target: Target, module: Module) -> None:
    started = time.monotonic()
    with pytest.raises(BmcError, match=r"^authentication failed \(wrong user or password\?\)$"):
        IpmiReader().read(target, dataclasses.replace(module, password="wrong", timeout_s=2.0))
    assert time.monotonic() - started < 2.0 + OVERRUN_S


def test_unknown_user_is_an_authentication_failure(target: Target, module: Module) -> None:
    with pytest.raises(BmcError, match=r"^authentication failed .*unknown user"):
        IpmiReader().read(target, dataclasses.replace(module, user="nobody", timeout_s=2.0))


def _fails_within(target: Target, module: Module, reason: str) -> float:
    started = time.monotonic()
    with pytest.raises(BmcError, match=reason) as raised:
        IpmiReader().read(target, module)
    elapsed = time.monotonic() - started
    assert "\n" not in str(raised.value)
    assert elapsed < module.timeout_s + OVERRUN_S, (
        f"{elapsed:.2f} s for a {module.timeout_s} s timeout"
    )
    return elapsed


def test_nothing_listening_is_refused_at_once(module: Module) -> None:
    with responders.responder(responders.silent) as target:
        closed = target  # the responder's port, closed once the block ends
    _fails_within(closed, dataclasses.replace(module, timeout_s=2.0), "connection refused")


def test_a_silent_bmc_fails_at_the_timeout(module: Module) -> None:
    with responders.responder(responders.silent) as target:
        elapsed = _fails_within(target, dataclasses.replace(module, timeout_s=1.0), "no answer")
    assert elapsed >= 0.9, "it gave up before its timeout"


def test_a_silent_bmc_is_waited_for_the_whole_module_timeout(module: Module) -> None:
    """A module timeout longer than a few re-sends: the read goes on re-sending until it
    (as FreeIPMI does until its session timeout), and says how long it waited. It
    used to give up after 4 re-sends (4 s) whatever the module said."""
    started = time.monotonic()
    with (
        responders.responder(responders.silent) as target,
        pytest.raises(BmcError, match=r"^no answer within (6\.\d|7\.\d) s$"),
    ):
        IpmiReader().read(target, dataclasses.replace(module, timeout_s=6.0))
    assert time.monotonic() - started >= 5.9


@pytest.mark.parametrize("answer", [responders.garbage, responders.pong_then_garbage])
def test_garbage_fails_within_the_timeout(module: Module, answer: responders.Answer) -> None:
    with responders.responder(answer) as target:
        _fails_within(target, dataclasses.replace(module, timeout_s=1.0), "malformed|no answer")


def test_garbage_without_rmcp_is_malformed(module: Module) -> None:
    with responders.responder(responders.garbage) as target:
        _fails_within(target, dataclasses.replace(module, timeout_s=1.0), "^malformed reply: ")


@pytest.fixture(scope="module")
def bmc_without_dcmi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IpmiSim]:
    """Stock ipmi_sim: Get Power Reading answers 0xC1 (invalid command)."""
    require_tool("ipmi_sim")
    root: Path = tmp_path_factory.mktemp("ipmi-sim-stock")
    with running_ipmi_sim(root) as sim:
        yield sim


def test_a_bmc_without_dcmi_reads_without_dcmi(bmc_without_dcmi: IpmiSim, module: Module) -> None:
    reading = IpmiReader().read(Target(bmc_without_dcmi.host, bmc_without_dcmi.port), module)
    assert reading.dcmi_watts is None
    assert _by_name(reading)["Pwr Consumption"].value == _sim(POWER).raw * POWER_M
