"""Parsers for sysfs InfiniBand attribute text: rate, state, phys_state, counters."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.sources.infiniband_parse import (
    NARROW_COUNTER_BITS,
    PHYS_STATES,
    PORT_STATES,
    NotAValue,
    format_rate,
    is_saturated,
    parse_counter,
    parse_rate,
    parse_state,
)

SPEEDS = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR")


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


@pytest.mark.parametrize("text", ["", "fast", "Gb/sec", "100 Mb/sec (4X EDR)", "-5 Gb/sec"])
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


@pytest.mark.parametrize(("code", "name"), sorted(PORT_STATES.items()))
def test_port_states(code: int, name: str) -> None:
    assert parse_state(f"{code}: {name}\n") == (code, name)


@pytest.mark.parametrize(("code", "name"), sorted(PHYS_STATES.items()))
def test_phys_states(code: int, name: str) -> None:
    # "Phy Test" and "PortConfigurationTraining" included: names with spaces survive
    assert parse_state(f"{code}: {name}\n") == (code, name)


def test_phys_state_names_are_the_kernels() -> None:
    assert PHYS_STATES == {
        1: "Sleep",
        2: "Polling",
        3: "Disabled",
        4: "PortConfigurationTraining",
        5: "LinkUp",
        6: "LinkErrorRecovery",
        7: "Phy Test",
    }


@given(code=st.integers(min_value=0, max_value=255), name=st.text(max_size=30))
def test_state_number_always_recovered(code: int, name: str) -> None:
    parsed_code, _ = parse_state(f"{code}: {name}")
    assert parsed_code == code


@pytest.mark.parametrize("text", ["", "ACTIVE", ": ACTIVE", "x: ACTIVE", "\n"])
def test_state_garbage(text: str) -> None:
    with pytest.raises(NotAValue):
        parse_state(text)


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_counter_exact_to_64_bits(value: int) -> None:
    assert parse_counter(f"{value}\n") == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("N/A (no PMA)\n", "not available"),
        ("", "empty"),
        ("\n", "empty"),
        ("-1\n", "not an integer"),
        ("12abc\n", "not an integer"),
        ("0x10\n", "not an integer"),
        ("\ufffd\ufffd\n", "not an integer"),
        ("١٢\n", "not an integer"),  # non-ASCII digits that int() would accept
    ],
)
def test_counter_not_a_value(text: str, reason: str) -> None:
    with pytest.raises(NotAValue) as excinfo:
        parse_counter(text)
    assert excinfo.value.reason == reason


def test_narrow_counter_widths_match_iba_portcounters() -> None:
    assert NARROW_COUNTER_BITS == {
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
        "port_xmit_wait": 32,
    }


@given(name=st.sampled_from(sorted(NARROW_COUNTER_BITS)), data=st.data())
def test_saturated_exactly_at_max(name: str, data: st.DataObject) -> None:
    top = (1 << NARROW_COUNTER_BITS[name]) - 1
    below = data.draw(st.integers(min_value=0, max_value=top - 1))
    assert is_saturated(name, top) is True
    assert is_saturated(name, below) is False


def test_wide_counters_have_no_saturation() -> None:
    assert is_saturated("port_xmit_data", (1 << 32) - 1) is None
