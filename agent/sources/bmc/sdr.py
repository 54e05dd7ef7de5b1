"""The BMC's Sensor Data Records: which sensors it has and how to read them, kept per BMC.

Walking the SDR repository is most of a read's requests: a record takes two or three Get
SDR requests of 32 bytes, so a BMC with 200 sensors costs ~500 round trips before the
first reading, seconds on a slow BMC. The records change only with the BMC's firmware
or configuration, and the repository says when: Get SDR Repository Info carries the
record count and the times of the last addition and erase. So each BMC's records are
kept (FreeIPMI keeps an SDR cache for the same reason) and walked again when that stamp
changes, or after MAX_AGE_S in case a firmware keeps its stamp still.

Only full (type 0x01) and compact (0x02) sensor records describe readable sensors, and
only those the BMC owns (IPMB 0x20) are read: others sit behind a satellite controller,
which FreeIPMI too reads only with --bridge-sensors.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyipmi.sdr import SdrCompactSensorRecord, SdrFullSensorRecord

from nvwatch.agent.sources.bmc.ipmi_session import BMC_IPMB_ADDRESS, Session
from nvwatch.agent.sources.bmc.reading import READING_TYPE_THRESHOLD, Target

MAX_AGE_S = 3600.0  # walk again at least hourly, whatever the stamp says
MAX_BMCS = 4096  # BMCs whose records are kept; the least recently read goes first
WALK_LOCKS = 64
LAST_RECORD = 0xFFFF  # "next record id" of the repository's last record
MAX_RECORDS = 4096  # a walk longer than this is a BMC's loop, not its sensors
_NO_ANALOG_READING = 3  # analog data format "no analog reading" (IPMI 2.0 table 43-1)

Convert = Callable[[int], "float | None"]


@dataclass(frozen=True)
class SensorRecord:
    """One readable sensor as its SDR describes it."""

    record_id: int
    number: int
    lun: int
    name: str
    sensor_type: int
    reading_type: int
    entity_id: int
    unit: int | None  # base unit of an analog threshold sensor; None otherwise
    convert: Convert | None  # raw reading -> value, for an analog threshold sensor


# (record count, last addition, last erase) from Get SDR Repository Info
Stamp = tuple[int, int, int]


@dataclass(frozen=True)
class _Entry:
    stamp: Stamp
    walked_at: float
    records: tuple[SensorRecord, ...]


class SdrCache:
    """Each BMC's sensor records, by target, shared by the threads that read BMCs.

    One walk of a BMC at a time: a walk reserves the repository, and a second reservation
    cancels the first (the first walk then sleeps and starts over, python-ipmi's retry);
    so concurrent reads of one BMC wait for one walk and share its records."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Target, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        # a fixed set of walk locks, a target hashed onto one: bounded however many
        # targets come and go, and two BMCs rarely wait on each other
        self._walk_locks = tuple(threading.Lock() for _ in range(WALK_LOCKS))

    def records(self, session: Session) -> tuple[SensorRecord, ...]:
        """The sensor records of the session's BMC: kept ones while its stamp holds."""
        stamp = _stamp(session.ipmi)
        walk_lock = self._walk_locks[hash(session.target) % WALK_LOCKS]
        if not walk_lock.acquire(timeout=max(0.0, session.deadline - time.monotonic())):
            raise TimeoutError("another read of this BMC is still walking its SDR")
        try:
            kept = self._kept(session.target, stamp)
            if kept is not None:
                return kept
            records = tuple(walk(session.ipmi))
            if stamp is not None:
                self._keep(session.target, _Entry(stamp, time.monotonic(), records))
            return records
        finally:
            walk_lock.release()

    def _kept(self, target: Target, stamp: Stamp | None) -> tuple[SensorRecord, ...] | None:
        with self._lock:
            entry = self._entries.get(target)
        if entry is None or entry.stamp != stamp:
            return None
        return entry.records if time.monotonic() - entry.walked_at < MAX_AGE_S else None

    def _keep(self, target: Target, entry: _Entry) -> None:
        with self._lock:
            self._entries[target] = entry
            self._entries.move_to_end(target)
            while len(self._entries) > MAX_BMCS:
                self._entries.popitem(last=False)


def _stamp(ipmi: Any) -> Stamp | None:
    """The repository's change stamp, or None when the BMC will not say (then no record
    is kept: every read walks)."""
    try:
        info = ipmi.send_message_by_name("GetSdrRepositoryInfo")
    except Exception:  # optional: a BMC without it is walked every time
        return None
    return (int(info.record_count), int(info.most_recent_addition), int(info.most_recent_erase))


def walk(ipmi: Any) -> Iterator[SensorRecord]:
    """Every readable sensor of the repository, in record order."""
    reservation = ipmi.reserve_sdr_repository()
    record_id = 0
    for _ in range(MAX_RECORDS):
        record = ipmi.get_repository_sdr(record_id, reservation)
        yield from sensor_records(record)
        # python-ipmi leaves next_id unset when the BMC says 0: no record follows then
        next_id = getattr(record, "next_id", LAST_RECORD)
        if next_id in (LAST_RECORD, record_id):
            return
        record_id = next_id


def sensor_records(record: Any) -> list[SensorRecord]:
    """The sensors one SDR record describes: none, one, or (a compact record shared by
    several sensors) one per sensor."""
    if not isinstance(record, (SdrFullSensorRecord, SdrCompactSensorRecord)):
        return []
    if record.owner_id != BMC_IPMB_ADDRESS:
        return []
    threshold = record.event_reading_type_code == READING_TYPE_THRESHOLD
    analog = (
        isinstance(record, SdrFullSensorRecord)
        and threshold
        and record.analog_data_format != _NO_ANALOG_READING
    )
    base = SensorRecord(
        record_id=record.id,
        number=record.number,
        lun=record.owner_lun,
        # as the BMC reports it (trailing spaces too, as FreeIPMI shows it), less the NUL
        # padding some firmwares add
        name=str(record.device_id_string).rstrip("\x00"),
        sensor_type=record.sensor_type_code,
        reading_type=record.event_reading_type_code,
        entity_id=record.entity_id,
        unit=record.units_2 if analog else None,
        convert=record.convert_sensor_raw_to_value if analog else None,
    )
    if isinstance(record, SdrCompactSensorRecord):
        return _shared(base, record.record_sharing)
    return [base]


def _shared(base: SensorRecord, sharing: int) -> list[SensorRecord]:
    """A compact record's sensors (IPMI 2.0 table 43-2, bytes 24-25): `count` sensors
    numbered on from the record's, each named with an instance modifier (numeric or
    alpha) counting from `offset`, after a space as FreeIPMI names them ("PSU 3")."""
    count = sharing & 0x0F
    if count <= 1:
        return [base]
    alpha = (sharing >> 4) & 0x03 == 1
    offset = (sharing >> 8) & 0x7F
    return [
        SensorRecord(
            **{
                **base.__dict__,
                "number": base.number + index,
                "name": f"{base.name} {_modifier(offset + index, alpha)}",
            }
        )
        for index in range(count)
    ]


def _modifier(index: int, alpha: bool) -> str:
    """The instance modifier: 0 -> "0", or A..Z, AA.. for alpha modifiers."""
    if not alpha:
        return str(index)
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters
