"""Parsers for sysfs InfiniBand attribute text, fed the strings the kernel prints.

Expectations are written from the kernel's and the IBA's documents, never read back from
the parser module's own tables: a test that copies a table cannot catch a wrong entry.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.agent.sources.infiniband_parse import (
    NotAValue,
    format_rate,
    parse_counter,
    parse_rate,
    parse_state,
)

from .exposition import scrape, value
from .sysfs_tree import add_device, healthy_port

SPEEDS = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR")
SATURATED = "nvwatch_ib_port_reading_saturated"

# --- rate ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bytes_per_second", "width", "speed"),
    [
        ("100 Gb/sec (4X EDR)\n", 12_500_000_000, 4, "EDR"),
        ("200 Gb/sec (4X HDR)", 25_000_000_000, 4, "HDR"),
        ("400 Gb/sec (4X NDR)", 50_000_000_000, 4, "NDR"),
        ("56 Gb/sec (4X FDR)", 7_000_000_000, 4, "FDR"),
        ("40 Gb/sec (4X FDR10)", 5_000_000_000, 4, "FDR10"),
        ("25 Gb/sec (1X EDR)", 3_125_000_000, 1, "EDR"),  # RoCE 25GbE
        ("2.5 Gb/sec (1X SDR)", 312_500_000, 1, "SDR"),
        ("10 Gb/sec (4X)", 1_250_000_000, 4, ""),  # no speed suffix
        ("0 GB/sec", 0, None, ""),  # empty cage
        ("800 Gb/sec (4X XDR)", 100_000_000_000, 4, "XDR"),
        ("300 Gb/sec (12X QDR)", 37_500_000_000, 12, "QDR"),
    ],
)
def test_rate_formats(text: str, bytes_per_second: int, width: int | None, speed: str) -> None:
    rate = parse_rate(text)
    assert rate.bytes_per_second == bytes_per_second
    assert rate.width == width
    assert rate.speed == speed


@pytest.mark.parametrize(
    "text", ["", "fast", "Gb/sec", "100 Mb/sec (4X EDR)", "-5 Gb/sec", "N/A (no PMA)\n"]
)
def test_rate_garbage(text: str) -> None:
    with pytest.raises(NotAValue):
        parse_rate(text)


@given(
    whole=st.integers(min_value=0, max_value=10_000),
    half=st.booleans(),
    width=st.sampled_from((1, 2, 4, 8, 12)),
    speed=st.sampled_from((*SPEEDS, "")),
)
def test_rate_roundtrip(whole: int, half: bool, width: int, speed: str) -> None:
    gbit = Fraction(whole) + (Fraction(1, 2) if half else 0)
    text = format_rate(gbit, width, speed)
    rate = parse_rate(text + "\n")
    assert rate.bytes_per_second == gbit * 125_000_000  # exact, no float rounding
    assert rate.width == width
    assert rate.speed == speed


# --- state and phys_state --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # what ports/N/state and phys_state read on a healthy port, newline included
        ("4: ACTIVE\n", (4, "ACTIVE")),
        ("5: LinkUp\n", (5, "LinkUp")),
        # a port with no cable, and one training
        ("1: DOWN\n", (1, "DOWN")),
        ("2: Polling\n", (2, "Polling")),
        ("4: PortConfigurationTraining\n", (4, "PortConfigurationTraining")),
        # a name with a space must come through whole, not cut at the space
        ("7: Phy Test\n", (7, "Phy Test")),
        # a code newer than the kernel's table: the number still counts
        ("9: <unknown>\n", (9, "<unknown>")),
        # no space after the colon, and stray whitespace around the number
        ("3:ARMED", (3, "ARMED")),
        ("  6 : LinkErrorRecovery  \n", (6, "LinkErrorRecovery")),
    ],
)
def test_state_text_from_sysfs(text: str, expected: tuple[int, str]) -> None:
    assert parse_state(text) == expected


@given(code=st.integers(min_value=0, max_value=255), name=st.text(max_size=30))
def test_state_number_always_recovered(code: int, name: str) -> None:
    parsed_code, _ = parse_state(f"{code}: {name}")
    assert parsed_code == code


@pytest.mark.parametrize(
    "text",
    [
        "",  # an empty read
        "\n",
        "ACTIVE",  # a name without its number
        ": ACTIVE",
        "x: ACTIVE",
        "-1: DOWN",
        "N/A (no PMA)\n",
        "\x00\x00\x00",
    ],
)
def test_state_garbage(text: str) -> None:
    with pytest.raises(NotAValue) as excinfo:
        parse_state(text)
    assert excinfo.value.reason == "not a state"


# --- counters --------------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_counter_exact_to_64_bits(number: int) -> None:
    assert parse_counter(f"{number}\n") == number


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("N/A (no PMA)\n", "not available"),
        ("", "empty"),
        ("\n", "empty"),
        ("-1\n", "not an integer"),
        ("12abc\n", "not an integer"),
        ("0x10\n", "not an integer"),
        ("1.5\n", "not an integer"),
        ("\ufffd\ufffd\n", "not an integer"),
        ("١٢\n", "not an integer"),  # non-ASCII digits that int() would accept
    ],
)
def test_counter_not_a_value(text: str, reason: str) -> None:
    with pytest.raises(NotAValue) as excinfo:
        parse_counter(text)
    assert excinfo.value.reason == reason


# --- saturation, from a sysfs file to the exported flag -------------------------------------

# Counters at the all-ones value of their PortCounters field (IBA vol 1, 16.1.3.5): the
# widths are the specification's, written here independently of the agent's table.
_AT_MAXIMUM = [
    ("port_xmit_wait", 2**32 - 1),
    ("symbol_error", 2**16 - 1),
    ("port_rcv_errors", 2**16 - 1),
    ("VL15_dropped", 2**16 - 1),
    ("link_downed", 2**8 - 1),
    ("link_error_recovery", 2**8 - 1),
    ("local_link_integrity_errors", 2**4 - 1),
    ("excessive_buffer_overrun_errors", 2**4 - 1),
]


def _flag(tmp_path: Path, counter: str, text: str) -> float | None:
    """The exported saturation flag of `counter` when its sysfs file reads `text`."""
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**{f"counters/{counter}": text})})
    source = InfinibandSource(tmp_path)
    try:
        _, samples = scrape(source.collect())
    finally:
        source.close()
    return value(samples, SATURATED, device="mlx5_0", port="1", counter=counter)


@pytest.mark.parametrize(("counter", "maximum"), _AT_MAXIMUM)
def test_counter_at_its_maximum_is_flagged_saturated(
    tmp_path: Path, counter: str, maximum: int
) -> None:
    assert _flag(tmp_path, counter, f"{maximum}\n") == 1


@pytest.mark.parametrize(("counter", "maximum"), _AT_MAXIMUM)
def test_counter_one_below_its_maximum_is_not_saturated(
    tmp_path: Path, counter: str, maximum: int
) -> None:
    # one below all-ones is still counting: no flag series (only pinned counters have one)
    assert _flag(tmp_path, counter, f"{maximum - 1}\n") is None


@pytest.mark.parametrize(("counter", "maximum"), _AT_MAXIMUM)
def test_counter_above_its_maximum_counts_on_in_a_wider_field(
    tmp_path: Path, counter: str, maximum: int
) -> None:
    # PortXmitWait's 64-bit extended form, or a file a vendor widened: still counting
    assert _flag(tmp_path, counter, f"{maximum + 1}\n") is None


def test_16_bit_maximum_does_not_saturate_the_32_bit_xmit_wait(tmp_path: Path) -> None:
    # port_xmit_wait is 32 bits wide: 65535 is an ordinary reading, not a pinned one
    assert _flag(tmp_path, "port_xmit_wait", f"{2**16 - 1}\n") is None


def test_wide_data_counter_has_no_saturation_flag(tmp_path: Path) -> None:
    # data counters may be 32- or 64-bit depending on the HCA, so no flag is exported for
    # them, even at the 32-bit maximum
    assert _flag(tmp_path, "port_xmit_data", f"{2**32 - 1}\n") is None


@pytest.mark.parametrize("text", ["N/A (no PMA)\n", "", "garbage\n"])
def test_unreadable_counter_has_no_saturation_flag(tmp_path: Path, text: str) -> None:
    # not a value: neither 1 nor 0 would be true, so the series is absent this poll
    assert _flag(tmp_path, "symbol_error", text) is None
