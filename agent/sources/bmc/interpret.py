"""What a BMC read means: its sensors turned into the probe's plain samples.

Whoever read the BMC (python-ipmi against a real one, the simulator's model), the same
rules apply here, and the exposition (agent/exposition/bmc.py) renders the result by
looping over the catalogue:

- by unit: degrees (C; F and K converted) are temperatures, RPM fan speeds, watts power
  (`method="sensor"`); DCMI's reading is power too (`method="dcmi"`, `sensor="dcmi"`);
- a temperature's `entity` comes from its IPMI entity id (inlet, cpu, board, ...), or
  from the module's name patterns where the vendor gives inlet air no entity of its own
  and exhaust air has none at all;
- a power supply (sensor type 0x08, sensor-specific offsets): present (offset 0) and
  failed (failure, AC lost, input lost or out of range: offsets 1, 3, 4);
- every threshold sensor and power supply gets a state, 0 nominal, 1 warning, 2
  critical, as ipmi_exporter counts them (see STATE_* below for the mapping);
- a value the BMC did not give is absent, never 0; the collectors and excluded record
  ids of the module apply whichever reader read it.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from nvwatch.agent.sources.bmc.reading import (
    READING_TYPE_THRESHOLD,
    SENSOR_TYPE_POWER_SUPPLY,
    UNIT_DEGREES_C,
    UNIT_RPM,
    UNIT_WATTS,
    BmcReading,
    Module,
    SensorReading,
)
from nvwatch.agent.sources.bmc.sensor_names import ENTITY_NAMES, sensor_type_name

DCMI_SENSOR = "dcmi"  # the `sensor` label of DCMI's power reading
UNIT_DEGREES_F = 2
UNIT_KELVIN = 3
OTHER_ENTITY = "other"

STATE_NOMINAL, STATE_WARNING, STATE_CRITICAL = 0, 1, 2
# Threshold state bits (Get Sensor Reading byte 4): 0 LNC, 1 LC, 2 LNR, 3 UNC, 4 UC, 5 UNR.
# Critical and non-recoverable crossings are critical, non-critical ones warnings.
# (FreeIPMI, and so ipmi_exporter, maps non-critical crossings to nominal.)
THRESHOLD_CRITICAL = 0b110110
THRESHOLD_WARNING = 0b001001
# Power supply offsets (IPMI 2.0 table 42-3, sensor type 0x08)
PSU_PRESENT = 1 << 0
PSU_FAILED = (1 << 1) | (1 << 3) | (1 << 4)  # failure; AC lost; input lost or out of range
# also critical, as FreeIPMI rates them: input out of range but present; configuration error
PSU_CRITICAL = PSU_FAILED | (1 << 5) | (1 << 6)
PSU_WARNING = 1 << 2  # predictive failure (FreeIPMI: critical; it still delivers power)


@dataclass(frozen=True)
class BmcSensor:
    """One sensor's series: at most one value is set (a temperature, a fan speed, ...),
    plus its state where the sensor has one. `name` is the SDR name as the BMC reports
    it, made unique within the read (a repeated name gets " #<record id>")."""

    name: str
    type_name: str  # the sensor type as FreeIPMI names it ("Temperature", "Power Supply")
    entity: str = OTHER_ENTITY  # a temperature's entity: inlet, exhaust, cpu, board, ...
    method: str = "sensor"  # a power reading's method: sensor or dcmi
    celsius: float | None = None
    rpm: float | None = None
    watts: float | None = None
    supply_present: int | None = None
    supply_failed: int | None = None
    state: int | None = None


@dataclass(frozen=True)
class BmcProbe:
    """One probe of one BMC: whether it was read, how long that took, what it said."""

    up: int
    duration_seconds: float | None
    sensors: tuple[BmcSensor, ...] = ()
    # per collector of the module, as ipmi_exporter's ipmi_up{collector=}: 1 read, 0 not;
    # None where the module does not run that collector
    ipmi_up: int | None = None
    dcmi_up: int | None = None


def interpret(reading: BmcReading, module: Module) -> BmcProbe:
    """The probe's samples from a successful read."""
    sensors: list[BmcSensor] = []
    if "ipmi" in module.collectors:
        kept = [s for s in reading.sensors if s.record_id not in module.exclude_sensor_ids]
        patterns = _Patterns(module)
        names = _unique_names(kept)
        sensors = [_sensor(s, name, patterns) for s, name in zip(kept, names, strict=True)]
    if "dcmi" in module.collectors and reading.dcmi_watts is not None:
        sensors.append(
            BmcSensor(DCMI_SENSOR, "Power", method="dcmi", watts=float(reading.dcmi_watts))
        )
    return BmcProbe(
        up=1,
        duration_seconds=reading.duration_s,
        sensors=tuple(sensors),
        ipmi_up=1 if "ipmi" in module.collectors else None,
        # a BMC without DCMI power (an error code, or the measurement not active) fails
        # this collector alone, as ipmi_exporter's dcmi collector does
        dcmi_up=(int(reading.dcmi_watts is not None) if "dcmi" in module.collectors else None),
    )


def failed(duration_s: float | None, collectors: Collection[str] = ()) -> BmcProbe:
    """The probe of a BMC that could not be read: down, every collector of its module
    with it, and nothing else."""
    return BmcProbe(
        up=0,
        duration_seconds=duration_s,
        ipmi_up=0 if "ipmi" in collectors else None,
        dcmi_up=0 if "dcmi" in collectors else None,
    )


class _Patterns:
    def __init__(self, module: Module) -> None:
        self.inlet = re.compile(module.inlet_pattern) if module.inlet_pattern else None
        self.exhaust = re.compile(module.exhaust_pattern) if module.exhaust_pattern else None

    def entity(self, sensor: SensorReading) -> str:
        """inlet by entity id first (0x37, DCMI 0x40), then by the module's name
        patterns (a vendor's "Inlet Temp" on the system board), then by entity id."""
        named = ENTITY_NAMES.get(sensor.entity_id, OTHER_ENTITY)
        if named == "inlet":
            return named
        if self.inlet is not None and self.inlet.search(sensor.name):
            return "inlet"
        if self.exhaust is not None and self.exhaust.search(sensor.name):
            return "exhaust"
        return named


def _unique_names(sensors: list[SensorReading]) -> list[str]:
    """The SDR names, a repeated one suffixed with its record id: two series with the
    same labels would make the whole scrape invalid."""
    seen: set[str] = set()
    names = []
    for sensor in sensors:
        name = sensor.name if sensor.name not in seen else f"{sensor.name} #{sensor.record_id}"
        seen.add(name)
        names.append(name)
    return names


def _sensor(sensor: SensorReading, name: str, patterns: _Patterns) -> BmcSensor:
    type_name = sensor_type_name(sensor.sensor_type)
    if sensor.sensor_type == SENSOR_TYPE_POWER_SUPPLY and not _is_threshold(sensor):
        return _supply(sensor, name, type_name)
    state = _threshold_state(sensor.states) if _is_threshold(sensor) else None
    value = sensor.value
    if value is None:
        return BmcSensor(name, type_name, state=state)
    if sensor.unit in (UNIT_DEGREES_C, UNIT_DEGREES_F, UNIT_KELVIN):
        celsius = _celsius(value, sensor.unit)
        return BmcSensor(name, type_name, patterns.entity(sensor), celsius=celsius, state=state)
    if sensor.unit == UNIT_RPM:
        return BmcSensor(name, type_name, rpm=value, state=state)
    if sensor.unit == UNIT_WATTS:
        return BmcSensor(name, type_name, watts=value, state=state)
    return BmcSensor(name, type_name, state=state)


def _is_threshold(sensor: SensorReading) -> bool:
    return sensor.reading_type == READING_TYPE_THRESHOLD


def _celsius(value: float, unit: int) -> float:
    if unit == UNIT_DEGREES_F:
        return (value - 32.0) * 5.0 / 9.0
    if unit == UNIT_KELVIN:
        return value - 273.15
    return value


def _threshold_state(states: int | None) -> int | None:
    if states is None:
        return None
    if states & THRESHOLD_CRITICAL:
        return STATE_CRITICAL
    return STATE_WARNING if states & THRESHOLD_WARNING else STATE_NOMINAL


def _supply(sensor: SensorReading, name: str, type_name: str) -> BmcSensor:
    """A discrete power supply: present, failed, and a state. A supply pulled from its
    bay is a warning (FreeIPMI calls it nominal): redundancy is what it costs, and the
    alerts judge that per node class. So is a predictive failure (FreeIPMI: critical):
    the supply still delivers power."""
    bits = sensor.states
    if bits is None:
        return BmcSensor(name, type_name)
    present = int(bool(bits & PSU_PRESENT))
    failed = int(bool(bits & PSU_FAILED))
    if bits & PSU_CRITICAL:
        state = STATE_CRITICAL
    elif bits & PSU_WARNING or not present:
        state = STATE_WARNING
    else:
        state = STATE_NOMINAL
    return BmcSensor(name, type_name, supply_present=present, supply_failed=failed, state=state)
