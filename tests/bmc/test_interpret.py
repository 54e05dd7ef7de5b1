"""Interpretation of what real BMCs report that the test BMC (ipmi_sim) does not: vendor
naming (an inlet sensor on the system board entity, DCMI's entity ids), Fahrenheit,
repeated names, a supply's other offsets, and compact records shared by several sensors.

The readings are built as a reader returns them (SensorReading, as the IPMI 2.0 spec
lays out the bits); the expected results follow from the spec and the metric contract.
"""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyipmi.sdr import SdrCompactSensorRecord

from nvwatch.agent.exposition.bmc import probe_exposition
from nvwatch.agent.sources.bmc.interpret import BmcSensor, interpret
from nvwatch.agent.sources.bmc.reading import BmcReading, Module, SensorReading
from nvwatch.agent.sources.bmc.sdr import sensor_records

MODULE = Module(
    name="m",
    user="u",
    password="p",
    privilege="operator",
    timeout_s=5.0,
    collectors=frozenset({"ipmi", "dcmi"}),
)
TEMPERATURE, FAN, POWER_SUPPLY = 0x01, 0x04, 0x08
DEGREES_C, DEGREES_F, RPM = 1, 2, 18
THRESHOLD, SENSOR_SPECIFIC = 0x01, 0x6F
SYSTEM_BOARD, AIR_INLET, DCMI_INLET, DCMI_CPU = 0x07, 0x37, 0x40, 0x41


def _temperature(name: str, entity: int, value: float | None = 25.0, **kw: object) -> SensorReading:
    fields: dict[str, object] = {
        "name": name,
        "record_id": 10,
        "sensor_type": TEMPERATURE,
        "reading_type": THRESHOLD,
        "entity_id": entity,
        "unit": DEGREES_C,
        "value": value,
        "states": 0,
        **kw,
    }
    return SensorReading(**fields)


def _supply(states: int | None, name: str = "PSU1") -> SensorReading:
    return SensorReading(name, 20, POWER_SUPPLY, SENSOR_SPECIFIC, 0x0A, None, None, states)


def _one(sensor: SensorReading, module: Module = MODULE) -> BmcSensor:
    (result,) = interpret(BmcReading((sensor,), None, 0.01), module).sensors
    return result


def test_inlet_by_entity_id_air_inlet_and_dcmi() -> None:
    assert _one(_temperature("Ambient", AIR_INLET)).entity == "inlet"
    assert _one(_temperature("Temp 1", DCMI_INLET)).entity == "inlet"
    assert _one(_temperature("Temp 2", DCMI_CPU)).entity == "cpu"


def test_a_vendor_inlet_on_the_system_board_needs_the_pattern() -> None:
    """Some vendors put "Inlet Temp" on the system board entity (0x07)."""
    sensor = _temperature("Inlet Temp", SYSTEM_BOARD)
    assert _one(sensor).entity == "board"
    with_pattern = dataclasses.replace(MODULE, inlet_pattern=r"(?i)\binlet\b")
    assert _one(sensor, with_pattern).entity == "inlet"


def test_exhaust_by_name_default_and_configured() -> None:
    assert _one(_temperature("Outlet Temp", SYSTEM_BOARD)).entity == "exhaust"
    rear = dataclasses.replace(MODULE, exhaust_pattern=r"(?i)^rear")
    assert _one(_temperature("Rear Temp", SYSTEM_BOARD), rear).entity == "exhaust"
    # the inlet entity wins over a name pattern
    assert _one(_temperature("Exhaust?", AIR_INLET)).entity == "inlet"


def test_fahrenheit_is_converted() -> None:
    assert _one(_temperature("Inlet", AIR_INLET, 98.6, unit=DEGREES_F)).celsius == pytest.approx(
        37.0
    )


def test_repeated_names_stay_apart() -> None:
    readings = (
        _temperature("Temp", 0x03, 40.0, record_id=5),
        _temperature("Temp", 0x03, 41.0, record_id=6),
    )
    body = probe_exposition(BmcReading(readings, None, 0.01), None, MODULE).decode()
    (family,) = [
        f for f in text_string_to_metric_families(body) if f.name.endswith("temperature_celsius")
    ]
    assert {s.labels["sensor"]: s.value for s in family.samples} == {"Temp": 40.0, "Temp #6": 41.0}


@pytest.mark.parametrize(
    ("bits", "present", "failed", "state"),
    [
        (0b0000001, 1, 0, 0),  # presence detected
        (0b0000101, 1, 0, 1),  # + predictive failure
        (0b0010001, 1, 1, 2),  # + input lost or out of range
        (0b0100001, 1, 0, 2),  # + input out of range, but present
        (0b1000001, 1, 0, 2),  # + configuration error
        (0b0001011, 1, 1, 2),  # + failure detected and AC lost
        (0b0000000, 0, 0, 1),  # not in its bay
    ],
)
def test_power_supply_offsets(bits: int, present: int, failed: int, state: int) -> None:
    sensor = _one(_supply(bits))
    assert (sensor.supply_present, sensor.supply_failed, sensor.state) == (present, failed, state)


def test_unavailable_is_absent_not_zero() -> None:
    sensor = _one(_supply(None))
    assert (sensor.supply_present, sensor.supply_failed, sensor.state) == (None, None, None)
    temperature = _one(_temperature("Inlet", AIR_INLET, None, states=None))
    assert (temperature.celsius, temperature.state) == (None, None)


def test_excluded_ids_apply_whoever_read_the_bmc() -> None:
    module = dataclasses.replace(MODULE, exclude_sensor_ids=frozenset({10}))
    reading = BmcReading((_temperature("Inlet", AIR_INLET), _supply(1)), 300.0, 0.01)
    assert [s.name for s in interpret(reading, module).sensors] == ["PSU1", "dcmi"]


def test_a_fan_reading_warning_and_critical() -> None:
    fan = SensorReading("Fan3", 30, FAN, THRESHOLD, 0x1D, RPM, 900.0, 0b000001)  # LNC
    assert (_one(fan).rpm, _one(fan).state) == (900.0, 1)
    stopped = dataclasses.replace(fan, value=0.0, states=0b000111)  # LNC, LC, LNR
    assert (_one(stopped).rpm, _one(stopped).state) == (0.0, 2)


def _compact_record(sharing: bytes, name: bytes) -> SdrCompactSensorRecord:
    """A compact sensor record as a BMC sends it (IPMI 2.0 table 43-2), decoded by
    python-ipmi: owner 0x20, sensor 0x30, power supply entity, sensor-specific."""
    body = (
        bytes([0x20, 0x00, 0x30, 0x0A, 0x01, 0x7F, 0x40, POWER_SUPPLY, SENSOR_SPECIFIC])
        + bytes(6)  # assertion, deassertion and reading masks
        + bytes(3)  # units
        + sharing
        + bytes(2 + 3 + 1)  # hysteresis, reserved, OEM
        + bytes([0xC0 | len(name)])
        + name
    )
    header = bytes([0x21, 0x00, 0x51, 0x02, len(body)])
    return SdrCompactSensorRecord(header + body)


def test_a_shared_record_is_one_sensor_per_instance() -> None:
    # share count 3, numeric modifier, counting from 1
    numeric = sensor_records(_compact_record(bytes([0x03, 0x01]), b"PSU"))
    assert [(r.number, r.name) for r in numeric] == [
        (0x30, "PSU 1"),
        (0x31, "PSU 2"),
        (0x32, "PSU 3"),
    ]
    # share count 2, alpha modifier (A = 0), from B
    alpha = sensor_records(_compact_record(bytes([0x12, 0x01]), b"Fan"))
    assert [r.name for r in alpha] == ["Fan B", "Fan C"]


def test_records_of_another_controller_are_not_read() -> None:
    record = _compact_record(bytes([0x01, 0x00]), b"PSU")
    assert len(sensor_records(record)) == 1
    record.owner_id = 0x2C  # a satellite controller's sensor: needs bridging
    assert sensor_records(record) == []
