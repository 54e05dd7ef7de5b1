"""The BMC reader: one read of one BMC over IPMI 2.0 (RMCP+) with python-ipmi.

A read opens a session (ipmi_session.py), takes the sensor records (sdr.py, kept per BMC
while its repository's stamp holds), reads each sensor (Get Sensor Reading) for the
`ipmi` collector and the system's power (DCMI Get Power Reading, mode 1) for `dcmi`,
and closes the session. Its wall time is bounded by the module's timeout: every wait
ends at the deadline, so a read returns or fails within the timeout plus the time of
one request's parsing (measured against ipmi_sim: tests/bmc/test_ipmi_reader.py).

One bad sensor costs that sensor: a completion code, a reply that does not parse, a
reading the BMC calls unavailable, or a request unanswered while time is left give the
sensor no value (absent, never 0). A BMC without DCMI power gives `dcmi_watts=None`.
The read as a whole fails, with BmcError and one line saying why, when there is no
session (no answer, a refused port, wrong credentials, garbage) or no time left.
"""

from __future__ import annotations

import time
from typing import Any

from pyipmi.errors import CompletionCodeError, RetryError

from nvwatch.agent.sources.bmc.ipmi_session import MALFORMED_REPLY, Session, failure_reason
from nvwatch.agent.sources.bmc.reading import (
    READING_TYPE_THRESHOLD,
    BmcError,
    BmcReading,
    Module,
    SensorReading,
    Target,
)
from nvwatch.agent.sources.bmc.sdr import SdrCache, SensorRecord

# Get Power Reading mode 1: system power statistics (DCMI 1.5, table 6-16)
DCMI_SYSTEM_POWER = 1
DCMI_MEASUREMENT_ACTIVE = 0x40  # reading state bit 6: power measurement active
# Get Sensor Reading, byte 3 (IPMI 2.0 table 35-15): bit 5 set = reading unavailable,
# bit 6 clear = scanning disabled. python-ipmi names them initial_update_in_progress
# and (inverted) sensor_scanning_disabled.
THRESHOLD_STATE_BITS = 0x3F  # byte 4 bits 0-5; byte 5 is reserved for threshold sensors
DISCRETE_STATE_BITS = 0x7FFF  # offsets 0-14 over bytes 4 and 5


class IpmiReader:
    """Reads BMCs with python-ipmi (the BmcReader protocol). Thread-safe: a read holds
    its own session; what is shared is the SDR cache, which locks."""

    def __init__(self) -> None:
        self._sdr = SdrCache()

    def read(self, target: Target, module: Module) -> BmcReading:
        started = time.monotonic()
        session = Session(target, module, started + module.timeout_s)
        try:
            session.open()
            sensors = self._sensors(session, module) if "ipmi" in module.collectors else ()
            watts = _dcmi_watts(session) if "dcmi" in module.collectors else None
        except BmcError:
            raise
        except Exception as exc:  # every failure of the read is its reason, in words
            raise BmcError(failure_reason(exc, session, module, started)) from exc
        finally:
            session.close()
        return BmcReading(sensors, watts, time.monotonic() - started)

    def _sensors(self, session: Session, module: Module) -> tuple[SensorReading, ...]:
        records = self._sdr.records(session)
        return tuple(
            _read_sensor(session, record)
            for record in records
            if record.record_id not in module.exclude_sensor_ids
        )


def _read_sensor(session: Session, record: SensorRecord) -> SensorReading:
    """The sensor's reading; None values when this sensor alone cannot be read."""
    value: float | None = None
    states: int | None = None
    try:
        reply = session.ipmi.send_message_by_name(
            "GetSensorReading", sensor_number=record.number, lun=record.lun
        )
        value, states = _reading(record, reply)
    except (CompletionCodeError, RetryError, TimeoutError, ArithmeticError, *MALFORMED_REPLY):
        if session.expired:  # out of time: the read as a whole failed
            raise
    return SensorReading(
        name=record.name,
        record_id=record.record_id,
        sensor_type=record.sensor_type,
        reading_type=record.reading_type,
        entity_id=record.entity_id,
        unit=record.unit,
        value=value,
        states=states,
    )


def _reading(record: SensorRecord, reply: Any) -> tuple[float | None, int | None]:
    """(value, state bits) from a Get Sensor Reading reply; (None, None) when the BMC
    says the reading is unavailable or the sensor is not scanned."""
    unavailable = reply.config.initial_update_in_progress
    scanned = reply.config.sensor_scanning_disabled  # python-ipmi's name for "enabled"
    if unavailable or not scanned:
        return None, None
    threshold = record.reading_type == READING_TYPE_THRESHOLD
    states = None
    if reply.states1 is not None:
        states = reply.states1 | ((reply.states2 or 0) << 8)
        states &= THRESHOLD_STATE_BITS if threshold else DISCRETE_STATE_BITS
    value = None
    if record.convert is not None and reply.sensor_reading is not None:
        value = record.convert(reply.sensor_reading)
    return value, states


def _dcmi_watts(session: Session) -> float | None:
    """DCMI's current system power; None from a BMC without it (an error code, no
    answer while time is left, or the measurement not active)."""
    session.without_retries()
    try:
        reply = session.ipmi.get_power_reading(DCMI_SYSTEM_POWER)
    except (CompletionCodeError, RetryError, TimeoutError, *MALFORMED_REPLY):
        if session.expired:
            raise
        return None
    if not reply.reading_state & DCMI_MEASUREMENT_ACTIVE:
        return None
    return float(reply.current_power)
