"""The report's time window and the counter arithmetic behind its event counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nvwatch.report.errors import ReportError
from nvwatch.report.frame import counter_events
from nvwatch.report.window import choose_step, make_window, parse_time

NOW = 1_793_491_234.0  # 2026-11-01 00:00:34 UTC


@pytest.mark.parametrize(
    ("range_seconds", "step"),
    [
        (3600, 60),  # an hour: every minute
        (86400, 120),  # a day: 720 points exactly at 2 minutes
        (7 * 86400, 900),
        (30 * 86400, 3600),  # the capacity review: hourly, 720 points
        (90 * 86400, 10800),
        (400 * 86400, 86400),
    ],
)
def test_the_step_keeps_a_series_at_720_points_or_fewer(range_seconds: int, step: int) -> None:
    assert choose_step(range_seconds) == step
    assert range_seconds / step <= 720


def test_the_window_ends_on_a_whole_step_and_spans_the_range() -> None:
    window = make_window("30d", None, None, NOW)
    assert window.end == 1_793_491_200.0  # rounded down to the hour
    assert window.end - window.start == 30 * 86400
    assert window.steps == 720
    assert window.times()[0] == window.start + 3600 and window.times()[-1] == window.end
    assert window.weeks == 5 and window.week_of_step()[7 * 24] == 1
    assert window.range_words == "30 days"
    # TDPs and line rates: a day at a time, the first day reaching back to the start
    assert (window.static_step, window.static_first) == (86400.0, window.start + 86400)


def test_static_queries_of_a_short_range_take_it_whole() -> None:
    window = make_window("36h", None, None, NOW)
    assert window.static_step == 86400.0
    assert window.static_first == window.end - 86400  # its window reaches past the start
    short = make_window("6h", None, None, NOW)
    assert (short.static_step, short.static_first) == (6 * 3600.0, short.end)


def test_an_explicit_step_and_end() -> None:
    window = make_window("2d", "2026-10-15T12:00:00Z", "5m", NOW)
    assert (window.step, window.steps) == (300.0, 576)
    assert window.end == parse_time("2026-10-15T12:00:00Z", NOW)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("30x", None, None), "invalid --range '30x'"),
        (("30m", None, None), "must be from 1h"),
        (("2h", None, "3h"), "--step 3h is longer than --range 2h"),
        (("1d", "soon", None), "--end 'soon'"),
    ],
)
def test_bad_windows_are_one_line(args: tuple[str, str | None, str | None], message: str) -> None:
    with pytest.raises(ReportError, match=message.replace("(", r"\(")):
        make_window(*args, NOW)


def test_times_read_as_unix_seconds_or_iso_8601_in_utc() -> None:
    assert parse_time("1793491200", NOW) == 1_793_491_200.0
    assert parse_time("2026-11-01", NOW) == 1_793_491_200.0  # no zone: UTC
    assert parse_time("2026-11-01T01:00:00+01:00", NOW) == 1_793_491_200.0
    assert parse_time(None, NOW) == parse_time("now", NOW) == NOW


def test_counter_events_count_increases_and_survive_resets() -> None:
    nan = math.nan
    maxima = np.array(
        [
            [0, 0, 2, 2, nan, 5, 1, 3],  # +2, a gap (+3 across it), a reset to 1, +2
            [nan, nan, 1, 1, 1, nan, nan, nan],  # appears at 1 (an XID counter's start)
        ]
    )
    events = counter_events(maxima, np.array([False, True]))
    assert events[0].tolist() == [0, 0, 2, 0, 0, 3, 1, 2]
    assert events[1].tolist() == [0, 0, 1, 0, 0, 0, 0, 0]
    # without the flag a series' first value is history from before the range
    assert counter_events(maxima)[1].sum() == 0
