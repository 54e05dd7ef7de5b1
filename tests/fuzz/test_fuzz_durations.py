"""Fuzz the duration grammar: DurationError or a positive finite number, nothing else."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from nvwatch.agent.config import FLEET_DURATION_BOUNDS, INTERVAL_BOUNDS, SETTLE_BOUNDS
from nvwatch.common.durations import DurationError, parse_duration, prometheus_duration

from .strategies import FUZZ, near

DURATIONS = near(["5s", "500ms", "1h30m", "2.5s", "7d", "1y2w3d4h5m6s7ms", "30", "0.1"])
BOUNDS = st.sampled_from([None, INTERVAL_BOUNDS, SETTLE_BOUNDS, FLEET_DURATION_BOUNDS])


@FUZZ
@given(DURATIONS, BOUNDS)
def test_parse_duration(text: str, bounds: object) -> None:
    try:
        seconds = parse_duration(text, "interval", bounds)  # type: ignore[arg-type]
    except DurationError as exc:
        assert "\n" not in str(exc).replace(repr(text), "")  # one line, for a user
        return
    assert math.isfinite(seconds) and seconds > 0
    assert text.strip(" \t\r\n\v\f").isascii()  # no '１s', no U+3000 around it
    if bounds is not None:
        assert bounds.low <= seconds <= bounds.high  # type: ignore[attr-defined]


@FUZZ
@given(st.one_of(st.floats(), st.integers(), st.booleans(), st.none(), st.lists(st.integers())))
def test_parse_duration_of_yaml_values(value: object) -> None:
    try:
        seconds = parse_duration(value)  # type: ignore[arg-type]
    except DurationError:
        return
    assert math.isfinite(seconds) and seconds > 0


@FUZZ
@given(st.integers(min_value=1, max_value=10**15))
def test_prometheus_duration_round_trips(milliseconds: int) -> None:
    text = prometheus_duration(milliseconds / 1000)
    assert round(parse_duration(text) * 1000) == milliseconds


@FUZZ
@given(st.floats())
def test_prometheus_duration_of_any_float(seconds: float) -> None:
    try:
        text = prometheus_duration(seconds)
    except DurationError:
        return
    assert parse_duration(text) > 0
