"""What one read of a BMC returns: its sensors as the SDR describes them, and DCMI power.

The reader (python-ipmi against a real BMC, or the simulator's BMC model) fills these from
the Sensor Data Records and the readings; turning them into metric families is the
interpreter's job, so a simulated BMC goes through the same interpretation as a real one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# IPMI 2.0 table 42-3, sensor type codes nvwatch interprets.
SENSOR_TYPE_TEMPERATURE = 0x01
SENSOR_TYPE_VOLTAGE = 0x02
SENSOR_TYPE_CURRENT = 0x03
SENSOR_TYPE_FAN = 0x04
SENSOR_TYPE_POWER_SUPPLY = 0x08

# IPMI 2.0 table 43-15, sensor base unit codes.
UNIT_DEGREES_C = 1
UNIT_WATTS = 6
UNIT_RPM = 18

# Event/reading type code 0x01: a threshold sensor (its state bits are thresholds crossed).
READING_TYPE_THRESHOLD = 0x01


@dataclass(frozen=True)
class SensorReading:
    """One sensor: its SDR (name, type, entity, unit) and its current reading."""

    name: str  # the SDR id string as the BMC reports it
    record_id: int  # SDR record id (ipmi_exporter's `exclude_sensor_ids` name these)
    sensor_type: int  # IPMI sensor type code (SENSOR_TYPE_*)
    reading_type: int  # event/reading type code: READING_TYPE_THRESHOLD or discrete ones
    entity_id: int  # IPMI entity id (0x37 air inlet, 0x03 processor, ...)
    unit: int | None  # base unit code (UNIT_*) of an analog sensor; None for a discrete one
    # the converted reading; None when the BMC says "reading unavailable" (absent, not 0)
    value: float | None
    # event state bits: thresholds (bit 0 LNC, 1 LC, 2 LNR, 3 UNC, 4 UC, 5 UNR) for a
    # threshold sensor, the sensor-specific offsets for a discrete one (power supply: 0
    # presence, 1 failure, 2 predictive failure, 3 AC lost, ...); None when unavailable
    states: int | None


@dataclass(frozen=True)
class BmcReading:
    """A whole read of one BMC."""

    sensors: tuple[SensorReading, ...]
    # DCMI Get Power Reading's current power; None where the BMC has no DCMI power
    dcmi_watts: float | None
    duration_s: float  # wall time of the read, session set-up included


class BmcError(Exception):
    """The BMC could not be read; the message is the one-line reason the probe reports."""


DEFAULT_IPMI_PORT = 623  # RMCP's UDP port
# ipmi_exporter's name for the module a probe that names none uses
DEFAULT_MODULE = "default"
# Exhaust air has no IPMI entity id: vendors name it ("Exhaust Temp", "Outlet Temp")
DEFAULT_EXHAUST_PATTERN = r"(?i)exhaust|outlet"


@dataclass(frozen=True)
class Target:
    """A BMC's address as `/probe?target=` names it: `host`, `host:port`, `[v6]:port`."""

    host: str
    port: int = DEFAULT_IPMI_PORT

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Module:
    """One module of the BMC config (ipmi_exporter's format): how to talk to a BMC."""

    name: str
    user: str
    password: str = field(repr=False)  # `pass`, or the first line of our `password_file`
    privilege: str  # "admin", "operator" or "user": the session's maximum privilege
    timeout_s: float  # the whole read, session set-up included (ipmi_exporter: ms)
    # "ipmi": every sensor of the SDR; "dcmi": DCMI Get Power Reading. Others of
    # ipmi_exporter's collectors (bmc, chassis, sel, ...) are accepted and not read.
    collectors: frozenset[str]
    exclude_sensor_ids: frozenset[int] = frozenset()  # SDR record ids left out
    # sensors named like this are `entity="inlet"` when the vendor set no inlet entity
    inlet_pattern: str | None = None
    # temperature sensors named like this are `entity="exhaust"` (no entity id exists)
    exhaust_pattern: str = DEFAULT_EXHAUST_PATTERN


class BmcReader(Protocol):
    """Reads one BMC. Raises BmcError with the reason when it cannot (wrong password, no
    answer within the module's timeout, garbage); one bad sensor costs that sensor only."""

    def read(self, target: Target, module: Module) -> BmcReading: ...
