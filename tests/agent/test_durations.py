"""The one duration grammar, shared by agent flags and the mixin config."""

from __future__ import annotations

import pytest

from nvwatch.agent.durations import (
    DurationBounds,
    DurationError,
    parse_duration,
    prometheus_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30.0),
        ("2.5", 2.5),
        ("500ms", 0.5),
        ("2.5s", 2.5),
        ("1.5m", 90.0),
        ("1h30m", 5400.0),
        ("1d12h", 129600.0),
        ("1w", 604800.0),
        ("1y", 31536000.0),
        ("1m30s500ms", 90.5),
        (" 5s ", 5.0),
        (7, 7.0),
    ],
)
def test_accepts_agent_and_prometheus_forms(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "s", "5x", "30m1h", "5s5s", "1h 30m", "-5s", "0", "0s", "five", "5S", True]
)
def test_rejects_with_one_line(text: object) -> None:
    with pytest.raises(DurationError) as info:
        parse_duration(text, "interval")  # type: ignore[arg-type]
    message = str(info.value)
    assert "interval" in message and "\n" not in message


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.5, "2s500ms"), (5400, "1h30m"), (60, "1m"), (0.001, "1ms"), (86400 * 8, "1w1d")],
)
def test_prometheus_form_is_whole_units_largest_first(seconds: float, text: str) -> None:
    assert prometheus_duration(seconds) == text
    # and it reads back to the same number of seconds
    assert parse_duration(text) == pytest.approx(seconds)


def test_prometheus_form_refuses_sub_millisecond() -> None:
    with pytest.raises(DurationError):
        prometheus_duration(0.0001)


@pytest.mark.parametrize(
    "value", ["9" * 400, "9" * 400 + "y", float("inf"), float("nan"), [5], {"every": 5}, None]
)
def test_rejects_what_is_no_finite_duration(value: object) -> None:
    # "9"*400 reads as float infinity; lists, mappings and null come from YAML files
    with pytest.raises(DurationError) as info:
        parse_duration(value, "interval")  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_bounds_are_inclusive_and_stated_in_the_error() -> None:
    bounds = DurationBounds(0.1, 3600.0)
    assert str(bounds) == "100ms to 1h"
    assert parse_duration("100ms", "interval", bounds) == 0.1
    assert parse_duration("1h", "interval", bounds) == 3600.0
    for text in ("99ms", "1h1ms", "99999999999h"):
        with pytest.raises(DurationError, match=f"invalid interval '{text}': must be from 100ms"):
            parse_duration(text, "interval", bounds)


def test_prometheus_form_refuses_what_it_cannot_write() -> None:
    for seconds in (float("inf"), float("nan"), 1e306):
        with pytest.raises(DurationError):
            prometheus_duration(seconds)
