"""A simulated node's Sensor Data Records, and its readings as a BMC reports them.

The records describe the chassis of sim/bmc/model.py the way an IPMI BMC does (IPMI 2.0
tables 42-3, 43-13, 43-15): an SDR name, a sensor type, an entity, a unit, thresholds.
A reading is what a client gets from Get Sensor Reading, already converted: a whole
number of the record's step (its linearisation's M: 1 °C, 10-100 RPM, 4-40 W), and the
event state bits, thresholds crossed or the discrete offsets asserted. The interpreter of
the `bmc` source turns them into metrics exactly as it does a real BMC's.

Names follow common BMC usage ("Inlet Temp", "FAN1", "PSU1 Status"); they are not
copied from a DGX's SDR. Thresholds are ~ estimates except the inlet's: its upper
non-critical threshold is the class's operating envelope (sim/bmc/classes.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from nvwatch.agent.sources.bmc.reading import (
    READING_TYPE_THRESHOLD,
    SENSOR_TYPE_CURRENT,
    SENSOR_TYPE_FAN,
    SENSOR_TYPE_POWER_SUPPLY,
    SENSOR_TYPE_TEMPERATURE,
    UNIT_DEGREES_C,
    UNIT_RPM,
    UNIT_WATTS,
    SensorReading,
)
from nvwatch.sim.bmc.classes import (
    ENTITY_FAN,
    ENTITY_POWER_SUPPLY,
    ENTITY_POWER_UNIT,
    ENTITY_PROCESSOR,
    ENTITY_SYSTEM_BOARD,
    BmcClass,
)
from nvwatch.sim.bmc.model import BmcState, SimulatedBmc

SENSOR_TYPE_POWER_UNIT = 0x09  # IPMI 2.0 table 42-3
READING_TYPE_SENSOR_SPECIFIC = 0x6F  # the power supply's own offsets
READING_TYPE_REDUNDANCY = 0x0B  # IPMI 2.0 table 42-2, generic redundancy offsets
# power supply offsets (table 42-3, sensor type 08h)
PSU_PRESENT = 1 << 0
PSU_FAILED = 1 << 1
# redundancy offsets (table 42-2, 0Bh)
FULLY_REDUNDANT = 1 << 0
REDUNDANCY_LOST = 1 << 1
REDUNDANCY_DEGRADED = 1 << 2
NON_REDUNDANT_SUFFICIENT = 1 << 3
NON_REDUNDANT_INSUFFICIENT = 1 << 5
DEGRADED_FROM_FULLY_REDUNDANT = 1 << 6

FIRST_RECORD_ID = 2  # record 1 is the BMC's own management controller locator
# thresholds (~): the inlet's upper ones at and above the class's envelope
INLET_CRITICAL_OVER_C = 5.0
INLET_NON_RECOVERABLE_OVER_C = 10.0
EXHAUST_UPPER_C = (60.0, 70.0, 80.0)  # UNC, UC, UNR
CPU_UPPER_C = (85.0, 95.0, None)
FAN_NON_CRITICAL_SHARE = 0.15  # LNC, of full speed
FAN_CRITICAL_SHARE = 0.08  # LC
# the linearisation steps a record may use: the smallest that fits its range in a byte
POWER_STEPS_W = (1, 2, 4, 5, 8, 10, 16, 20, 25, 40, 50, 80, 100)
FAN_STEPS_RPM = (10, 20, 50, 100, 200)

Limits = tuple[float | None, float | None, float | None]  # non-critical, critical, non-recoverable


@dataclass(frozen=True)
class SensorRecord:
    """One SDR, and where the model holds its value (or its discrete state)."""

    name: str
    record_id: int
    sensor_type: int
    reading_type: int
    entity_id: int
    unit: int | None
    step: float = 1.0  # a reading is a whole number of steps
    upper: Limits = (None, None, None)  # UNC, UC, UNR
    lower: Limits = (None, None, None)  # LNC, LC, LNR
    value: Callable[[BmcState], float | None] | None = None  # analog records
    offsets: Callable[[BmcState], int] | None = None  # discrete records

    def read(self, state: BmcState) -> SensorReading:
        value: float | None = None
        states: int | None = None
        if self.offsets is not None:
            states = self.offsets(state)
        else:
            raw = self.value(state) if self.value is not None else None
            value = None if raw is None else round(raw / self.step) * self.step
            states = None if value is None else self.thresholds_crossed(value)
        return SensorReading(
            self.name, self.record_id, self.sensor_type, self.reading_type, self.entity_id,
            self.unit, value, states,
        )  # fmt: skip

    def thresholds_crossed(self, value: float) -> int:
        """Threshold state bits: 0 LNC, 1 LC, 2 LNR at or below; 3 UNC, 4 UC, 5 UNR at
        or above."""
        bits = 0
        for bit, limit in enumerate(self.lower):
            if limit is not None and value <= limit:
                bits |= 1 << bit
        for bit, limit in enumerate(self.upper):
            if limit is not None and value >= limit:
                bits |= 1 << (bit + 3)
        return bits


def sensor_records(bmc: SimulatedBmc) -> tuple[SensorRecord, ...]:
    """The node's SDR repository, in record id order."""
    chassis = bmc.chassis
    records = [*_temperatures(chassis), *_fans(chassis), *_supplies(chassis), _power(bmc)]
    return tuple(replace(r, record_id=FIRST_RECORD_ID + i) for i, r in enumerate(records))


def _analog(
    name: str, sensor_type: int, entity: int, unit: int, value: Callable[[BmcState], float | None]
) -> SensorRecord:
    return SensorRecord(name, 0, sensor_type, READING_TYPE_THRESHOLD, entity, unit, value=value)


def _temperatures(chassis: BmcClass) -> list[SensorRecord]:
    top = chassis.inlet_max_c
    inlet = _analog(
        "Inlet Temp", SENSOR_TYPE_TEMPERATURE, chassis.inlet_entity, UNIT_DEGREES_C,
        lambda s: s.inlet_c,
    )  # fmt: skip
    exhaust = _analog(
        "Exhaust Temp", SENSOR_TYPE_TEMPERATURE, ENTITY_SYSTEM_BOARD, UNIT_DEGREES_C,
        lambda s: s.exhaust_c,
    )  # fmt: skip
    records = [
        replace(inlet, upper=(top, top + INLET_CRITICAL_OVER_C, top + INLET_NON_RECOVERABLE_OVER_C),
                lower=(chassis.inlet_min_c, None, None)),
        replace(exhaust, upper=EXHAUST_UPPER_C),
    ]  # fmt: skip
    for cpu in range(chassis.cpus):
        record = _analog(
            f"CPU{cpu} Temp", SENSOR_TYPE_TEMPERATURE, ENTITY_PROCESSOR, UNIT_DEGREES_C,
            _cpu_celsius(cpu),
        )  # fmt: skip
        records.append(replace(record, upper=CPU_UPPER_C))
    return records


def _fans(chassis: BmcClass) -> list[SensorRecord]:
    step = _smallest_step(FAN_STEPS_RPM, 1.1 * chassis.fan_max_rpm)
    lower: Limits = (
        round(FAN_NON_CRITICAL_SHARE * chassis.fan_max_rpm / step) * step,
        round(FAN_CRITICAL_SHARE * chassis.fan_max_rpm / step) * step,
        None,
    )
    records = []
    for fan in range(chassis.fans + chassis.empty_fan_headers):
        # an empty header reads "unavailable": no fan, not a stopped one
        value = _fan_rpm(fan) if fan < chassis.fans else _unavailable
        record = _analog(f"FAN{fan + 1}", SENSOR_TYPE_FAN, ENTITY_FAN, UNIT_RPM, value)
        records.append(replace(record, step=step, lower=lower))
    return records


def _cpu_celsius(cpu: int) -> Callable[[BmcState], float | None]:
    return lambda state: state.cpu_c[cpu]


def _fan_rpm(fan: int) -> Callable[[BmcState], float | None]:
    return lambda state: state.fan_rpm[fan]


def _unavailable(_state: BmcState) -> float | None:
    return None


def _supply_offsets(psu: int) -> Callable[[BmcState], int]:
    return lambda state: PSU_PRESENT | (PSU_FAILED if state.psu_failed[psu] else 0)


def _supplies(chassis: BmcClass) -> list[SensorRecord]:
    supplies = chassis.supplies
    records = [
        SensorRecord(
            f"PSU{psu + 1} Status",
            0,
            SENSOR_TYPE_POWER_SUPPLY,
            READING_TYPE_SENSOR_SPECIFIC,
            ENTITY_POWER_SUPPLY,
            None,
            offsets=_supply_offsets(psu),
        )
        for psu in range(supplies.count)
    ]
    if supplies.count > 1:  # one supply has no redundancy to report

        def redundancy(state: BmcState) -> int:
            return redundancy_offsets(supplies.count - sum(state.psu_failed), chassis)

        records.append(
            SensorRecord(
                "PSU Redundancy",
                0,
                SENSOR_TYPE_POWER_UNIT,
                READING_TYPE_REDUNDANCY,
                ENTITY_POWER_UNIT,
                None,
                offsets=redundancy,
            )
        )
    return records


def redundancy_offsets(working: int, chassis: BmcClass) -> int:
    """The redundancy sensor's offsets with `working` supplies of the class's."""
    supplies = chassis.supplies
    if working >= supplies.count:
        return FULLY_REDUNDANT
    if working > supplies.carry_max:
        return REDUNDANCY_DEGRADED | DEGRADED_FROM_FULLY_REDUNDANT
    if working == supplies.carry_max:
        return REDUNDANCY_LOST | NON_REDUNDANT_SUFFICIENT
    return REDUNDANCY_LOST | NON_REDUNDANT_INSUFFICIENT


def _power(bmc: SimulatedBmc) -> SensorRecord:
    record = _analog(
        "Total Power", SENSOR_TYPE_CURRENT, ENTITY_SYSTEM_BOARD, UNIT_WATTS,
        lambda s: s.node_watts,
    )  # fmt: skip
    return replace(record, step=_smallest_step(POWER_STEPS_W, bmc.max_watts))


def _smallest_step(steps: tuple[float, ...], top: float) -> float:
    """The finest step whose 255 raw values reach `top` (a reading's byte)."""
    return next((s for s in steps if 255 * s >= top), steps[-1])


def dcmi_watts(state: BmcState) -> float:
    """DCMI Get Power Reading's current power: whole watts, 16 bits."""
    return float(min(0xFFFF, math.floor(state.node_watts + 0.5)))
