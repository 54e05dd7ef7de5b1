"""Parsers for the text files under /sys/class/infiniband, kept apart from file access.

Like prometheus/procfs `sysfs/class_infiniband.go`: pure functions from the string a
sysfs attribute returns to a typed value, or `None` when the text is not a value (the
kernel's "N/A (no PMA)", an empty read, garbage). Nothing here touches the disk, so every
parser is tested with hypothesis over the formats the kernel can print.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction

# Nominal Gb/s to bytes/s, as node_exporter does: 1 Gb/s = 10^9 bit/s = 125,000,000 B/s.
BYTES_PER_SECOND_PER_GBIT = 125_000_000

# Bit widths of the PortCounters (IBA vol 1, 16.1.3.5, attribute 0x12) fields the kernel
# shows in ports/N/counters/. Checked against drivers/infiniband/core/sysfs.c, where each
# file is declared as PORT_PMA_ATTR(name, counter, width, offset): symbol_error 16,
# link_error_recovery 8, link_downed 8, port_rcv_errors 16, ... port_xmit_wait 32.
# These counters stop at all-ones instead of wrapping (the IBA says saturate), so a value
# exactly at its maximum means "at least this many, and no longer counting": exported as
# nvwatch_ib_port_reading_saturated. The width says where a counter saturates, not how
# large a file may read: PortXmitWait also has a 64-bit PortCountersExtended form, tools
# that read it over MADs show values above 2^32, and a vendor or a later kernel may serve
# any of these from a wider field; a reading above the width is a wider counter counting,
# so it is kept (up to 64 bits, like every counter) and not flagged. The data and packet
# counters are left out on purpose: the kernel serves them from PortCountersExtended
# (64-bit) when the HCA has it, as every mlx5 does, and from the 32-bit PortCounters
# otherwise, and the file does not say which, so a width table entry for them would be
# a guess.
NARROW_COUNTER_BITS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_wait": 32,  # PortCounters offset 0 of the second block in sysfs.c
}

# counters/ file -> the `type` label of nvwatch_ib_port_errors_total (catalogue contract).
ERROR_COUNTER_TYPES: dict[str, str] = {
    "symbol_error": "symbol",
    "link_error_recovery": "link_error_recovery",
    "link_downed": "link_downed",
    "port_rcv_errors": "receive",
    "port_rcv_remote_physical_errors": "receive_remote_physical",
    "port_rcv_switch_relay_errors": "receive_switch_relay",
    "port_xmit_discards": "transmit_discards",
    "port_xmit_constraint_errors": "transmit_constraint",
    "port_rcv_constraint_errors": "receive_constraint",
    "local_link_integrity_errors": "local_link_integrity",
    "excessive_buffer_overrun_errors": "excessive_buffer_overrun",
    "VL15_dropped": "vl15_dropped",
}

# Older kernels put the 64-bit PortCountersExtended values in counters_ext/<name>_64 and
# left counters/<name> at 32 bits; when both exist the _64 file wins.
EXTENDED_COUNTERS: dict[str, str] = {
    "port_xmit_data_64": "port_xmit_data",
    "port_rcv_data_64": "port_rcv_data",
    "port_xmit_packets_64": "port_xmit_packets",
    "port_rcv_packets_64": "port_rcv_packets",
    "unicast_xmit_packets_64": "unicast_xmit_packets",
    "unicast_rcv_packets_64": "unicast_rcv_packets",
    "multicast_xmit_packets_64": "multicast_xmit_packets",
    "multicast_rcv_packets_64": "multicast_rcv_packets",
}

# The counters/ files a poll reads (by counter name, counters_ext applied): the ones a
# series exports (data, packets, transmit wait, the error counters). unicast_* and
# multicast_* packets are in no series, and an open/read of a sysfs counter is a PMA
# query in the kernel: not read at all.
READ_COUNTERS = frozenset(
    {
        "port_xmit_data",
        "port_rcv_data",
        "port_xmit_packets",
        "port_rcv_packets",
        *NARROW_COUNTER_BITS,
    }
)

# hw_counters files that are settings, not counters: mlx5's `lifespan` is the counter
# cache lifetime in milliseconds and is writable.
HW_COUNTER_NOT_COUNTERS = frozenset({"lifespan"})

# PortCounters fields the IBA defines for switch ports only (PortRcvSwitchRelayErrors:
# packets the switch relay could not forward; Port{Xmit,Rcv}ConstraintErrors: raw-packet
# filtering and partition enforcement on a switch physical port). On the channel
# adapters an agent finds in /sys/class/infiniband they never count, so they can never
# saturate: no saturation flag for them (their nvwatch_ib_port_errors_total stays, the
# node_exporter-compatible set).
SWITCH_ONLY_COUNTERS = frozenset(
    {"port_rcv_switch_relay_errors", "port_xmit_constraint_errors", "port_rcv_constraint_errors"}
)

# The narrow counters that get nvwatch_ib_port_reading_saturated: every one that can fill.
SATURATION_FLAGGED: tuple[str, ...] = tuple(
    name for name in NARROW_COUNTER_BITS if name not in SWITCH_ONLY_COUNTERS
)

# mlx5 hw_counters exported by default (--ib-hw-counters=default): the ones that say the
# fabric loses or congests RDMA traffic. out_of_sequence: packets lost on the way (the
# responder saw a gap in the PSNs); local_ack_timeout_err: the requester's ACK timer ran
# out and it retransmitted (loss, or a dead peer). RoCE ports add the congestion-control
# trio: np_ecn_marked_roce_packets (ECN-marked arrivals), np_cnp_sent and rp_cnp_handled
# (CNPs sent, and acted on by the sender's rate limiter). No alert or dashboard reads any
# hw_counter; the rest are opt-in with --ib-hw-counters=all: rx_*_requests count
# operations the byte and packet counters already cover; packet_seq_err,
# implied_nak_seq_err and duplicate_request are the NAKs and retries of the same loss
# the two above count; out_of_buffer, rnr_nak_retry_err, *_cqe_*, remote_access,
# invalid_request and local_length errors are a consumer's receive queue or a QP's
# application error, read per QP with `rdma statistic` when debugging a job; on RoCE,
# rp_cnp_ignored and roce_adp_retrans/roce_slow_restart tune congestion control.
DEFAULT_HW_COUNTERS = frozenset(
    {
        "out_of_sequence",
        "local_ack_timeout_err",
        "np_ecn_marked_roce_packets",
        "np_cnp_sent",
        "rp_cnp_handled",
    }
)
HW_COUNTER_CHOICES = ("default", "all")


def hw_counter_selection(choice: str) -> frozenset[str] | None:
    """The hw_counters names to read for --ib-hw-counters; None reads every file."""
    if choice == "all":
        return None
    if choice == "default":
        return DEFAULT_HW_COUNTERS
    raise ValueError(f"unknown hw_counters choice {choice!r}: {', '.join(HW_COUNTER_CHOICES)}")


class NotAValue(ValueError):
    """The text is not a value; `reason` is a short stable phrase for the once-only log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# Every counter file holds at most 64 bits: the PortCountersExtended fields and mlx5's
# hw_counters are u64 (struct rdma_hw_stats), and no sysfs counter is wider.
COUNTER_BITS = 64
_COUNTER_DIGITS = len(str(1 << COUNTER_BITS))


def parse_counter(text: str) -> int:
    """A counter file: an unsigned decimal integer that fits 64 bits, and a newline.

    Raises NotAValue for "N/A (no PMA)" (no performance-management agent on the port),
    an empty read, anything that is not a non-negative integer, and a number of more
    than 64 bits: no counter the kernel prints (show_pma_counter in
    drivers/infiniband/core/sysfs.c, the hw_counters) is wider, so 2^64 + 1 is not a
    reading but a broken file, and a rate computed from it is junk. A narrow counter
    reading above its PortCounters width is kept: see NARROW_COUNTER_BITS.
    """
    value = text.strip()
    if not value:
        raise NotAValue("empty")
    if value.startswith("N/A"):
        raise NotAValue("not available")
    if not value.isascii() or not value.isdigit():
        raise NotAValue("not an integer")
    # the length test first: int() of thousands of digits is slow, and refused past 4300
    digits = value.lstrip("0") or "0"
    if len(digits) > _COUNTER_DIGITS or int(digits) >= 1 << COUNTER_BITS:
        raise NotAValue(f"wider than {COUNTER_BITS} bits")
    return int(digits)


# where each narrow counter saturates: the all-ones value of its width
_SATURATES_AT = {name: (1 << bits) - 1 for name, bits in NARROW_COUNTER_BITS.items()}


def is_saturated(name: str, value: int) -> bool | None:
    """True when a narrow counter sits exactly at the all-ones value of its PortCounters
    width; None for counters with no known width. A value above it comes from a wider
    field that is still counting: not saturated."""
    maximum = _SATURATES_AT.get(name)
    if maximum is None:
        return None
    return value == maximum


# ASCII digits, a few of them: \d would take "١" (which int() reads) and 5,000 digits
# (which int() refuses with a ValueError that is not a NotAValue); codes are 0..7.
_STATE_RE = re.compile(r"^\s*([0-9]{1,9})\s*:(.*)$", re.DOTALL)


# state, phys_state and rate read the same few texts poll after poll: the parse of each
# is kept (bounded; a parse that fails raises and is not kept), so a poll skips the
# regular expressions and, for the rate, the exact rational arithmetic.
_PARSED_TEXTS = 64


@functools.lru_cache(maxsize=_PARSED_TEXTS)
def parse_state(text: str) -> tuple[int, str]:
    """ports/N/state or phys_state: "4: ACTIVE", "5: LinkUp" -> (4, "ACTIVE").

    The number is the contract: the names come from the kernel's own tables
    (ib_port_state_to_str / phys_state_to_str in drivers/infiniband/core/sysfs.c), some
    contain spaces ("7: Phy Test"), and codes it has no name for print as "<unknown>".
    So the name is kept for humans and never looked up.
    """
    match = _STATE_RE.match(text)
    if match is None:
        raise NotAValue("not a state")
    return int(match.group(1)), match.group(2).strip()


@dataclass(frozen=True)
class Rate:
    """ports/N/rate parsed: "100 Gb/sec (4X EDR)"."""

    bytes_per_second: int
    width: int | None  # lanes: 1, 2, 4, 8, 12; None when the kernel printed no width
    speed: str  # SDR, DDR, ..., NDR, XDR; "" when the kernel printed no suffix


_RATE_RE = re.compile(
    r"^\s*(?P<gbit>[0-9]{1,9}(?:\.[0-9]{1,9})?)\s*Gb/sec"
    r"(?:\s*\(\s*(?P<width>[0-9]{1,9})X\s*(?P<speed>[A-Za-z0-9]*)\s*\))?\s*$",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=_PARSED_TEXTS)
def parse_rate(text: str) -> Rate:
    """Kernel formats: "%d%s Gb/sec (%dX%s)" (%s is ".5" or "", then " EDR" etc. or ""),
    and "0 GB/sec" on a port with an empty cage. Bytes are exact: 2.5 Gb/s is
    312,500,000 B/s, computed in rationals so no float rounding creeps in.
    """
    match = _RATE_RE.match(text)
    if match is None:
        raise NotAValue("not a rate")
    gbit = Fraction(match.group("gbit"))
    width = match.group("width")
    return Rate(
        bytes_per_second=int(gbit * BYTES_PER_SECOND_PER_GBIT),
        width=int(width) if width is not None else None,
        speed=(match.group("speed") or "").upper(),
    )


def format_rate(gbit: Fraction | int, width: int, speed: str) -> str:
    """The kernel's rate text for a width and per-port Gb/s (inverse of parse_rate)."""
    whole = int(gbit)
    half = ".5" if Fraction(gbit) - whole else ""
    suffix = f" {speed}" if speed else ""
    return f"{whole}{half} Gb/sec ({width}X{suffix})"
