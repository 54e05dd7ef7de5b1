"""Fuzz the kernel-log Xid parser: a record or None for any line, never an exception.

parse_record's contract is "None: not an Xid, or malformed"; the reader feeds it every
line of /dev/kmsg or a log file, so an exception would end the XID history.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from nvwatch.agent.sources.nvml.kmsg import parse_record, pci_key

from .strategies import FUZZ, near

LINES = near(
    [
        "4,1234,56789012,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has",
        "4,1,2,-,caller=T1;NVRM: Xid (0000:03:00): 14, Channel 00000001\n SUBSYSTEM=pci",
        "[ 1234.567890] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, x",
        "Nov 23 05:32:44 node kernel: NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask",
        "6,5,6,-;usb 1-1: new high-speed USB device",
    ]
)


@FUZZ
@given(LINES)
def test_parse_record(line: str) -> None:
    record = parse_record(line)
    if record is not None:
        assert record.xid >= 0
        assert pci_key(record.pci) == record.pci


@FUZZ
@given(near(["0000:3b:00", "00000000:3B:00.0", "3b:00.0"]))
def test_pci_key(text: str) -> None:
    try:
        pci_key(text)
    except ValueError:
        return


# Found by the fuzzer's huge numbers: \d+ then int() raised ValueError past 4,300 digits,
# and nothing between parse_record and the XID listener caught it.
@pytest.mark.parametrize(
    "line",
    [
        "4," + "9" * 5000 + ",0,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, y",
        "[ " + "9" * 5000 + ".5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, y",
    ],
)
def test_parse_record_with_a_number_of_thousands_of_digits(line: str) -> None:
    parse_record(line)  # a record or None; returning at all is the point
