"""XID history from the kernel log: the driver's "NVRM: Xid" lines, since boot.

NVML hands an XID only to a process that is listening when it happens, so an agent that
starts (or restarts) late never sees the earlier ones. The driver prints every XID to the
kernel log as well, and the kernel keeps that log in its ring buffer since boot, so
reading it gives counts that cover the boot and survive agent restarts.

/dev/kmsg (root, or CAP_SYSLOG where kernel.dmesg_restrict=1) serves one record per
read(): ``<prio>,<seq>,<usec since boot>,<flags>[,<more>];<message>\\n`` followed by
optional continuation lines `` KEY=value``. Opened non-blocking, a read past the newest
record fails with EAGAIN, and one whose record was overwritten before we read it fails
with EPIPE (the next read goes on from the oldest record left). A plain file (tests,
containers that mount a log file, `--kmsg-path`) is read line by line: lines in the same
record format, or dmesg/syslog text lines that carry the NVRM message.

The Xid line, over driver generations:
  ``NVRM: Xid (0000:03:00): 14, Channel 00000001``                        (R3xx era)
  ``NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, ...``  (no process)
  ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has ...``  (R450 on)
  ``NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, ...``
The kernel names the GPU domain:bus:device, without the PCI function.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nvwatch.agent.sources.pci_address import sysfs_bus_id

log = logging.getLogger(__name__)

DEFAULT_PATH = Path("/dev/kmsg")

# A record is at most ~1 KiB of text plus its dictionary; a shorter buffer makes
# read() on /dev/kmsg fail with EINVAL instead of truncating.
_READ_SIZE = 16384
# What one read() of the log takes at most; the rest waits for the next one. A kernel
# ring buffer is 128 KiB to about 1 MiB on a DGX (log_buf_len grows with the CPUs), so
# the first read still takes the whole boot; a log that never runs dry (a flooding
# driver, a large file, /dev/zero given by mistake) costs a bounded slice per read
# instead of a core for as long as it lasts, and the poll that reads it returns.
MAX_BYTES_PER_READ = 1 << 20
# The driver always follows the code with ", <details>": requiring the comma keeps a
# record cut short inside the code ("79" cut to "7") from counting as another XID.
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
    r"(?:\.[0-7])?\): (?P<xid>\d{1,5}),"
)
# seq and usec are u64 in the kernel (20 digits at most): a longer number is not a
# record header, and int() is never asked to convert thousands of digits.
_RECORD = re.compile(
    r"(?P<prio>\d{1,5}),(?P<seq>\d{1,20}),(?P<usec>\d{1,20}),[^;]*;(?P<message>.*)"
)
_DMESG_TIME = re.compile(r"^\[\s*(?P<seconds>\d{1,14})\.(?P<fraction>\d{1,9})\]")


class KmsgUnreadable(Exception):
    """The kernel log cannot be read; the message is the operator-facing reason."""


@dataclass(frozen=True)
class XidRecord:
    """One Xid line: which GPU (by PCI address), which XID, and when, if the line says."""

    pci: str  # "0000:3b:00": domain:bus:device, the form pci_key() gives
    xid: int
    seq: int | None = None  # kmsg sequence number; None for a plain text line
    usec: int | None = None  # microseconds since boot, where the line carries them


def pci_key(address: str) -> str:
    """domain:bus:device in sysfs form, from the kernel's "0000:3b:00" or any bus id.

    NVML's "00000000:3B:00.0" and the kernel's "0000:3b:00" both become "0000:3b:00";
    raises ValueError for anything that is not a PCI address.
    """
    text = address.strip()
    if text.count(":") == 2 and "." not in text:
        text += ".0"  # the kernel leaves the function out; any function parses the same
    return sysfs_bus_id(text).rsplit(".", 1)[0]


def parse_record(text: str) -> XidRecord | None:
    """The Xid in one kmsg record or log line, or None (not an Xid, or malformed)."""
    line = text.split("\n", 1)[0]  # continuation lines (" KEY=value") carry no message
    header = _RECORD.fullmatch(line)
    seq = usec = None
    if header is not None:
        seq, usec, line = int(header["seq"]), int(header["usec"]), header["message"]
    elif (stamp := _DMESG_TIME.match(line)) is not None:
        usec = int(stamp["seconds"]) * 1_000_000 + int(stamp["fraction"].ljust(6, "0")[:6])
    match = _XID.search(line)
    if match is None:
        return None
    try:
        pci = pci_key(match["pci"])
    except ValueError:
        return None
    return XidRecord(pci=pci, xid=int(match["xid"]), seq=seq, usec=usec)


def _reason(path: Path, err: OSError) -> str:
    """Why `path` cannot be read, in words an operator can act on."""
    what = os.strerror(err.errno) if err.errno else str(err)
    if err.errno in (errno.EPERM, errno.EACCES):
        return (
            f"cannot read {path}: {what} (run the agent as root or with CAP_SYSLOG; "
            "kernel.dmesg_restrict limits the kernel log)"
        )
    if err.errno == errno.ENOENT:
        return f"cannot read {path}: it does not exist (in a container, mount /dev/kmsg)"
    return f"cannot read {path}: {what}"


class KmsgReader:
    """New records from /dev/kmsg or from a file of kernel log lines, oldest first.

    Remembers the last sequence number read, so a reopened device (or a rotated file)
    yields only records it has not yielded before.
    """

    def __init__(self, path: Path, max_bytes: int = MAX_BYTES_PER_READ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.last_seq = -1
        self.overwritten = 0  # EPIPE: records the ring buffer dropped before we read them
        self._fd: int | None = None
        self._device = False
        self._inode = 0
        self._offset = 0
        self._partial = b""  # a file's last line until its newline is written

    def open(self) -> None:
        """Open the log; KmsgUnreadable with the reason when it cannot be read."""
        self.close()
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            raise KmsgUnreadable(_reason(self.path, err)) from err
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISREG(mode)):
            os.close(fd)
            kind = "a directory" if stat.S_ISDIR(mode) else "not a file or character device"
            raise KmsgUnreadable(f"cannot read {self.path}: it is {kind}")
        self._fd, self._device = fd, stat.S_ISCHR(mode)
        self._inode, self._offset, self._partial = os.fstat(fd).st_ino, 0, b""

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def read(self) -> Iterator[str]:
        """Each complete record not read yet, as read (a log file of hundreds of MB is
        never held whole), up to `max_bytes` of the log: what is left is the next read's.
        KmsgUnreadable from the iteration if the log went away."""
        if self._fd is None:
            self.open()
        raw = self._device_records() if self._device else self._file_lines()
        try:
            for record in raw:
                text = record.decode("utf-8", "replace")
                if self._new(text):
                    yield text
        except OSError as err:
            self.close()
            raise KmsgUnreadable(_reason(self.path, err)) from err

    def _new(self, text: str) -> bool:
        header = _RECORD.match(text)
        if header is None:
            return True
        seq = int(header["seq"])
        if seq <= self.last_seq:
            return False
        self.last_seq = seq
        return True

    def _device_records(self) -> Iterator[bytes]:
        assert self._fd is not None
        budget = self.max_bytes
        while budget > 0:
            try:
                record = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:  # EAGAIN: nothing newer yet
                return
            except BrokenPipeError:  # EPIPE: overwritten; the next read is the oldest left
                self.overwritten += 1
                log.warning("kernel log: records overwritten before they were read")
                continue
            if not record:
                return
            budget -= len(record)
            yield record

    def _file_lines(self) -> Iterator[bytes]:
        assert self._fd is not None
        self._follow_rotation()
        budget = self.max_bytes
        while budget > 0 and (chunk := os.pread(self._fd, _READ_SIZE, self._offset)):
            budget -= len(chunk)
            self._offset += len(chunk)
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            if len(self._partial) > _READ_SIZE:
                self._partial = b""  # no newline in 16 KiB: garbage, not a record
            yield from (line for line in lines if line.strip())

    def _follow_rotation(self) -> None:
        """Start the file over if it was replaced or truncated (log rotation)."""
        assert self._fd is not None
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            return  # rotated away and not yet recreated: keep reading the old one
        if current.st_ino != self._inode or current.st_size < self._offset:
            self.open()


class KernelXidLog:
    """Xid lines in the kernel log, counted per (PCI address, XID), read incrementally.

    Not thread-safe: its one owner (the XID listener) serialises calls. Once a read
    fails the log stays unreadable: reopening would yield records the NVML event path
    has counted in the meantime, and a counter must never count one XID twice.
    """

    def __init__(self, path: Path, max_bytes: int = MAX_BYTES_PER_READ) -> None:
        self.path = path
        self.unreadable: str | None = None
        self._reader = KmsgReader(path, max_bytes)
        self._counts: dict[tuple[str, int], int] = {}
        self.records = 0  # Xid lines counted, for the start-up log line

    def read(self) -> bool:
        """Count the records written since the last read; False once unreadable."""
        if self.unreadable is not None:
            return False
        try:
            for text in self._reader.read():
                record = parse_record(text)
                if record is not None:
                    key = (record.pci, record.xid)
                    self._counts[key] = self._counts.get(key, 0) + 1
                    self.records += 1
        except KmsgUnreadable as err:
            # lines counted before the failure stay counted: they were read once
            self.unreadable = str(err)
            return False
        return True

    def counts(self) -> dict[tuple[str, int], int]:
        """(PCI address as pci_key gives it, XID) -> Xid lines read so far."""
        return dict(self._counts)

    def close(self) -> None:
        self._reader.close()


def probe(path: Path) -> str | None:
    """None if the kernel log at `path` can be read, else why not (for `nvwatch doctor`)."""
    reader = KmsgReader(path)
    try:
        next(reader.read(), None)  # one record proves it; the rest is the agent's to read
    except KmsgUnreadable as err:
        return str(err)
    finally:
        reader.close()
    return None
