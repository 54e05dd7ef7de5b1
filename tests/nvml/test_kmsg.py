"""XID history from the kernel log: recorded NVRM lines of several driver generations,
read as /dev/kmsg records and as dmesg text, counted per GPU and XID."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvwatch.agent.sources.nvml import kmsg
from nvwatch.agent.sources.nvml.kmsg import KmsgReader, KmsgUnreadable, XidRecord, parse_record
from nvwatch.agent.sources.nvml.xid import NO_KERNEL_LOG, XidListener, combine

# NVML's bus ids of the four GPUs this "node" has; a fifth GPU (0000:b7:00) belongs to
# the host but not to this container, so its lines must count nowhere.
BUS_IDS = ("00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0")

# Records as read() on /dev/kmsg returns them (one per read, continuation lines included).
RECORDS = [
    "6,0,0,-;Linux version 5.15.0-105-generic (buildd@lcy02-amd64-054) #115-Ubuntu SMP",
    "4,1012,13371042,-;nvidia: module license 'NVIDIA' taints kernel.",
    "6,1020,13520301,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.08  "
    "Tue Mar  5 22:42:15 UTC 2024",
    "6,1530,48213344,-;NVRM: GPU at PCI:0000:07:00: GPU-1d9d7c65-3a6f-5c3b-8e66-0f7f8ad2a1d4",
    "6,1531,48213351,-;NVRM: GPU Board Serial Number: 1321021034567",
    # R418 era: no process fields
    "3,1532,48213360,-;NVRM: Xid (PCI:0000:07:00): 31, Ch 00000010, intr 10000000. MMU Fault: "
    "ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_3a000000. Fault is of type FAULT_PDE "
    "ACCESS_TYPE_READ",
    # R470 on: pid= and name= of the process that caused it
    "4,2001,91234567,-;NVRM: Xid (PCI:0000:07:00): 13, pid=24117, name=python3, Graphics SM "
    "Warp Exception on (GPC 2, TPC 0, SM 1): Out Of Range Address",
    "4,2002,91234612,-;NVRM: Xid (PCI:0000:07:00): 13, pid=24117, name=python3, Graphics "
    "Exception: ESR 0x514648=0x1000000e 0x514650=0x20 0x514644=0xd3eff2 0x51464c=0x17f",
    # R535: hardware XIDs without a process
    "4,2050,99000000,-;NVRM: Xid (PCI:0000:0f:00): 48, pid='<unknown>', name=<unknown>, An "
    "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
    "partition 6, subpartition 0.",
    "4,2051,99000101,-;NVRM: Xid (PCI:0000:0f:00): 63, pid='<unknown>', name=<unknown>, Row "
    "Remapper: New row (0x000000003fe1c2a0) marked for remapping, reset gpu to activate.",
    # pid= without name=
    "3,2100,120500000,-;NVRM: Xid (PCI:0000:47:00): 79, pid=0, GPU has fallen off the bus.",
    # continuation lines: the record's dictionary, " KEY=value"
    "3,2101,120500007,-;NVRM: Xid (PCI:0000:47:00): 79, pid=1734, name=nv-hostengine, GPU has "
    "fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:47:00.0\n",
    # the driver's other fallen-off-the-bus message is no Xid line
    "3,2102,120500020,-;NVRM: GPU 0000:47:00.0: GPU has fallen off the bus.",
    # a kernel with CONFIG_PRINTK_CALLER adds a field before the ';'
    "4,2200,150000000,-,caller=T24117;NVRM: Xid (PCI:0000:4e:00): 43, pid=24117, "
    "name=python3, Ch 00000008",
    "4,2201,150000100,-;NVRM: Xid (PCI:0000:4e:00): 74, pid='<unknown>', name=<unknown>, "
    "NVLink: fatal error detected on link 4(0x0, 0x0, 0x0, 0x0, 0x10000, 0x0, 0x0)",
    # R3xx: no "PCI:" before the address
    "4,2300,160000000,-;NVRM: Xid (0000:4e:00): 13, Graphics Exception: Class 0xc3c0",
    # a GPU this node's NVML does not list
    "4,2400,170000000,-;NVRM: Xid (PCI:0000:b7:00): 79, pid='<unknown>', name=<unknown>, GPU "
    "has fallen off the bus.",
    # NVSwitch SXids are not GPU XIDs
    "4,2401,170000100,-;nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 12028, Non-fatal, Link 38 "
    "egress non-posted PRIV error (First)",
    # truncated and garbage records
    "4,2402,170000200,-;NVRM: Xid (PCI:0000:07:0",
    "4,2403,170000300,-;NVRM: Xid (PCI:0000:07:00): 7",  # cut inside "79": not XID 7
    "\x00\x01\x02garbage 4,,;",
    "4,2404",
    "6,2405,170000400,-;mlx5_core 0000:0c:00.0: Port module event: module 0, Cable plugged",
]
EXPECTED = {0: {13: 2, 31: 1}, 1: {48: 1, 63: 1}, 2: {79: 2}, 3: {13: 1, 43: 1, 74: 1}}


def _dmesg(record: str) -> str:
    """The record as `dmesg` prints it: "[seconds.micros] message", no dictionary."""
    header, _, message = record.partition(";")
    fields = header.split(",")
    if len(fields) < 4 or not message:
        return record.split("\n")[0]
    usec = int(fields[2])
    return f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] {message.split(chr(10))[0]}"


def _write(path: Path, lines: list[str]) -> None:
    with path.open("a") as log:
        for line in lines:
            log.write(line if line.endswith("\n") else line + "\n")


@pytest.fixture
def listeners() -> Iterator[list[XidListener]]:
    made: list[XidListener] = []
    yield made
    for listener in made:
        listener.stop()


def _listener(made: list[XidListener], path: Path) -> XidListener:
    # no NVML handles: only the kernel log is read (plus record() for NVML events)
    listener = XidListener([], kmsg_path=path, bus_ids=lambda: BUS_IDS, wait_ms=50)
    made.append(listener)
    listener.start()
    return listener


def _all_counts(listener: XidListener) -> dict[int, dict[int, int]]:
    return {gpu: c for gpu in range(len(BUS_IDS)) if (c := listener.counts(gpu))}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (RECORDS[5], XidRecord("0000:07:00", 31, seq=1532, usec=48213360)),
        (RECORDS[6], XidRecord("0000:07:00", 13, seq=2001, usec=91234567)),
        (RECORDS[8], XidRecord("0000:0f:00", 48, seq=2050, usec=99000000)),
        (RECORDS[10], XidRecord("0000:47:00", 79, seq=2100, usec=120500000)),
        (RECORDS[11], XidRecord("0000:47:00", 79, seq=2101, usec=120500007)),
        (RECORDS[13], XidRecord("0000:4e:00", 43, seq=2200, usec=150000000)),
        (RECORDS[15], XidRecord("0000:4e:00", 13, seq=2300, usec=160000000)),
        # dmesg and journal text lines, as a container's mounted log file has them
        (
            "[ 1843.308145] NVRM: Xid (PCI:0000:b3:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.",
            XidRecord("0000:b3:00", 79, usec=1843308145),
        ),
        (
            "Feb 14 05:03:41 gpu-1 kernel: NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off "
            "the bus.",
            XidRecord("0000:44:00", 79),
        ),
        # a VMD domain keeps its fifth digit; an upper-case bus matches the lower-case one
        ("NVRM: Xid (PCI:10000:3B:00): 94, Contained ECC error", XidRecord("10000:3b:00", 94)),
        (RECORDS[12], None),
        (RECORDS[17], None),
        (RECORDS[18], None),
        (RECORDS[19], None),
        (RECORDS[20], None),
        (RECORDS[21], None),
        ("NVRM: Xid (PCI:0000:3b:40): 79, device 0x40 is beyond a PCI bus's 32", None),
    ],
)
def test_parse_record(line: str, expected: XidRecord | None) -> None:
    assert parse_record(line) == expected


def test_combine_never_counts_one_xid_twice() -> None:
    # log readable: events only cover the moment before their line is read
    assert combine({79: 1}, {79: 1}, {79: 1}) == {79: 1}
    assert combine({}, {79: 1}, {79: 1}) == {79: 1}
    assert combine({13: 3}, {13: 1}, {13: 1}) == {13: 3}
    # no log at all: the events
    assert combine({}, {13: 2}, {}) == {13: 2}
    # log lost with 3 lines and 1 event counted; 2 events since
    assert combine({13: 3}, {13: 3}, {13: 1}) == {13: 5}


def test_kmsg_file_counts_per_gpu_and_xid(tmp_path: Path, listeners: list[XidListener]) -> None:
    log = tmp_path / "kmsg"
    _write(log, RECORDS)
    listener = _listener(listeners, log)
    assert listener.kmsg_unreadable is None
    assert _all_counts(listener) == EXPECTED


def test_dmesg_text_file_counts_the_same(tmp_path: Path, listeners: list[XidListener]) -> None:
    log = tmp_path / "dmesg.txt"
    _write(log, [_dmesg(r) for r in RECORDS])
    assert _all_counts(_listener(listeners, log)) == EXPECTED


def test_unknown_pci_counts_nowhere_and_is_logged_once(
    tmp_path: Path, listeners: list[XidListener], caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "kmsg"
    _write(log, RECORDS)
    listener = _listener(listeners, log)
    with caplog.at_level(logging.WARNING, logger="nvwatch.agent.sources.nvml.xid"):
        for _ in range(3):
            _all_counts(listener)
    unknown = [r for r in caplog.records if "0000:b7:00" in r.getMessage()]
    assert len(unknown) == 1


def test_restart_counts_history_and_new_records_once(
    tmp_path: Path, listeners: list[XidListener]
) -> None:
    log = tmp_path / "kmsg"
    _write(log, RECORDS)
    first = _listener(listeners, log)
    assert first.counts(2) == {79: 2}
    first.stop()
    # the agent restarts: a new listener reads the log from its start again
    second = _listener(listeners, log)
    assert _all_counts(second) == EXPECTED
    _write(log, ["3,2500,180000000,-;NVRM: Xid (PCI:0000:47:00): 79, pid=0, GPU has fallen off"])
    assert second.counts(2) == {79: 3}
    assert second.counts(2) == {79: 3}  # read again: nothing new


def test_nvml_event_and_its_log_line_count_once(
    tmp_path: Path, listeners: list[XidListener]
) -> None:
    log = tmp_path / "kmsg"
    _write(log, RECORDS[:3])
    listener = _listener(listeners, log)
    # the event arrives before its line is read, then the line: one XID either way
    listener.record(1, 79)
    assert listener.counts(1) == {79: 1}
    _write(log, ["4,3000,200000000,-;NVRM: Xid (PCI:0000:0f:00): 79, pid=0, GPU has fallen off"])
    assert listener.counts(1) == {79: 1}
    # the log is the authority: lines NVML never reported (before the start) count too
    _write(log, ["4,3001,200000100,-;NVRM: Xid (PCI:0000:0f:00): 79, pid=0, GPU has fallen off"])
    assert listener.counts(1) == {79: 2}


def test_incomplete_last_line_waits_for_its_newline(
    tmp_path: Path, listeners: list[XidListener]
) -> None:
    log = tmp_path / "kmsg"
    log.write_text("4,1,1000,-;NVRM: Xid (PCI:0000:07:00): 79, pid=0, GPU has fal")
    listener = _listener(listeners, log)
    assert listener.counts(0) == {}
    with log.open("a") as f:
        f.write("len off the bus.\n")
    assert listener.counts(0) == {79: 1}


def test_rotated_file_is_read_from_its_start_without_recounting(
    tmp_path: Path, listeners: list[XidListener]
) -> None:
    log = tmp_path / "kmsg"
    _write(log, RECORDS)
    listener = _listener(listeners, log)
    assert listener.counts(0) == EXPECTED[0]
    # rotated: a new file that repeats the last records (by seq) and adds one
    log.unlink()
    _write(log, [*RECORDS[6:8], "4,2600,190000000,-;NVRM: Xid (PCI:0000:07:00): 13, pid=1, x"])
    assert listener.counts(0) == {13: 3, 31: 1}


@pytest.mark.parametrize("kind", ["directory", "missing"])
def test_unreadable_kernel_log_counts_nvml_events_only(
    tmp_path: Path, listeners: list[XidListener], kind: str
) -> None:
    path = tmp_path / "kmsg"
    if kind == "directory":
        path.mkdir()  # root reads any file whatever its mode: a directory cannot be read
    listener = _listener(listeners, path)
    reason = listener.kmsg_unreadable
    assert reason is not None and str(path) in reason
    assert ("is a directory" if kind == "directory" else "does not exist") in reason
    assert kmsg.probe(path) == reason  # what `nvwatch doctor` prints
    listener.record(0, 13)
    listener.record(0, 13)
    assert listener.counts(0) == {13: 2}


def test_no_kernel_log_configured_is_nvml_only(listeners: list[XidListener]) -> None:
    listener = XidListener([], bus_ids=lambda: BUS_IDS)
    listeners.append(listener)
    listener.start()
    assert listener.kmsg_unreadable == NO_KERNEL_LOG
    listener.record(3, 74)
    assert listener.counts(3) == {74: 1}


def test_kernel_log_lost_while_running_keeps_its_count_and_adds_events(
    tmp_path: Path, listeners: list[XidListener]
) -> None:
    log = tmp_path / "kmsg"
    _write(log, RECORDS)
    listener = _listener(listeners, log)
    listener.record(2, 79)  # one of the two lines, seen as an event as well
    assert listener.counts(2) == {79: 2}
    log.unlink()
    log.mkdir()  # replaced by something unreadable
    assert listener.counts(2) == {79: 2}
    assert listener.kmsg_unreadable is not None
    listener.record(2, 79)
    assert listener.counts(2) == {79: 3}


def test_device_records_eagain_and_epipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A character device gives one record per read; EPIPE skips to the oldest record
    left, EAGAIN ends a read; records already read (by seq) are not yielded again."""
    script: list[bytes | OSError] = [
        b"4,10,100,-;NVRM: Xid (PCI:0000:07:00): 13, pid=1, name=a, x\n",
        BrokenPipeError(errno.EPIPE, "overwritten"),
        b"4,14,140,-;NVRM: Xid (PCI:0000:07:00): 31, Ch 00000001\n SUBSYSTEM=pci\n",
        BlockingIOError(errno.EAGAIN, "no more"),
        # after a reopen the device starts at its oldest record again
        b"4,14,140,-;NVRM: Xid (PCI:0000:07:00): 31, Ch 00000001\n",
        b"4,15,150,-;NVRM: Xid (PCI:0000:07:00): 43, Ch 00000002\n",
        BlockingIOError(errno.EAGAIN, "no more"),
    ]
    real_read = os.read

    def scripted(fd: int, size: int) -> bytes:
        if fd != reader._fd:
            return real_read(fd, size)
        step = script.pop(0)
        if isinstance(step, OSError):
            raise step
        return step

    reader = KmsgReader(Path("/dev/null"))  # a character device, as /dev/kmsg is
    monkeypatch.setattr(os, "read", scripted)
    first = list(reader.read())
    assert [parse_record(r).xid for r in first] == [13, 31]  # type: ignore[union-attr]
    assert reader.overwritten == 1 and reader.last_seq == 14
    reader.open()
    assert [parse_record(r).xid for r in list(reader.read())] == [43]  # type: ignore[union-attr]
    reader.close()


def test_real_dev_kmsg_when_readable() -> None:
    """On this machine's own /dev/kmsg (root): records with rising seq, then only new."""
    if kmsg.probe(kmsg.DEFAULT_PATH) is not None:
        pytest.skip("/dev/kmsg is not readable here")
    reader = KmsgReader(kmsg.DEFAULT_PATH)
    try:
        records = list(reader.read())
        assert records and reader.last_seq >= 0
        seqs = [int(r.split(",", 2)[1]) for r in records]
        assert seqs == sorted(seqs)
        assert all(int(r.split(",", 2)[1]) > seqs[-1] for r in reader.read())
    finally:
        reader.close()


def test_reader_reports_permission_in_words(tmp_path: Path) -> None:
    err = OSError(errno.EPERM, os.strerror(errno.EPERM))
    reason = kmsg._reason(Path("/dev/kmsg"), err)
    assert "CAP_SYSLOG" in reason and "dmesg_restrict" in reason
    with pytest.raises(KmsgUnreadable, match="does not exist"):
        KmsgReader(tmp_path / "absent").open()


def test_a_log_larger_than_one_read_counts_lines_across_reads(
    tmp_path: Path, listeners: list[XidListener]
) -> None:
    """Lines that straddle the reader's 16 KiB reads are neither lost nor counted twice."""
    log = tmp_path / "kern.log"
    filler = "Mar  5 22:42:15 dgx01 kernel: mlx5_core 0000:0c:00.0: Port module event: x"
    xid = "Mar  5 22:42:16 dgx01 kernel: NVRM: Xid (PCI:0000:07:00): 13, pid=1, name=a, x"
    _write(log, [xid if i % 37 == 0 else filler for i in range(5000)])
    assert log.stat().st_size > 20 * 16384
    assert _listener(listeners, log).counts(0) == {13: len(range(0, 5000, 37))}


def test_a_log_that_never_runs_dry_costs_one_bounded_slice_per_read() -> None:
    """/dev/zero as the kernel log (a flooding driver looks the same to the reader): each
    read() returns after about `max_bytes`, where it used to read for as long as the
    agent ran, with its poll stuck and a core busy."""
    reader = KmsgReader(Path("/dev/zero"), max_bytes=256 * 1024)
    try:
        for _ in range(3):  # and every read after the first, too
            taken = sum(len(record) for record in reader.read())
            assert 256 * 1024 <= taken <= 256 * 1024 + kmsg._READ_SIZE
    finally:
        reader.close()


def test_a_file_past_the_read_bound_is_counted_over_several_reads_exactly_once(
    tmp_path: Path,
) -> None:
    """A log file larger than one read's bound: each read takes at most the bound and
    goes on where the last stopped, so every Xid line is counted once, none lost."""
    path = tmp_path / "kern.log"
    filler = "Mar  5 22:42:15 dgx01 kernel: mlx5_core 0000:0c:00.0: Port module event: x"
    xid = "Mar  5 22:42:16 dgx01 kernel: NVRM: Xid (PCI:0000:07:00): 13, pid=1, name=a, x"
    _write(path, [xid if i % 37 == 0 else filler for i in range(5000)])
    bound = 64 * 1024
    history = kmsg.KernelXidLog(path, max_bytes=bound)
    reads = 0
    while True:
        before = history._reader._offset
        assert history.read()
        taken = history._reader._offset - before
        assert taken <= bound + kmsg._READ_SIZE
        reads += 1
        if taken == 0:
            break
    history.close()
    assert reads > path.stat().st_size // (bound + kmsg._READ_SIZE)
    assert history.counts() == {("0000:07:00", 13): len(range(0, 5000, 37))}
