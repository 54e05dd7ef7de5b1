"""The report's time window: range, end and the step its queries are evaluated at.

Every series comes back as one value per step (an `*_over_time` over exactly that step),
so sums of value x step are integrals and each raw sample counts once.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from nvwatch.common.durations import DurationBounds, parse_duration, prometheus_duration
from nvwatch.report.errors import ReportError

RANGE_BOUNDS = DurationBounds(3600.0, 400 * 86400.0)
# Steps a reader can name; the report picks the smallest that keeps a series at or
# under TARGET_POINTS values (Prometheus refuses more than 11,000 per series).
NICE_STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
TARGET_POINTS = 720  # 30 days at 1 h: a week is 168 points, a peak hour stays visible
WEEK_SECONDS = 7 * 86400


@dataclass(frozen=True)
class Window:
    start: float  # unix seconds; the first step covers (start, start + step]
    end: float
    step: float

    @property
    def steps(self) -> int:
        return round((self.end - self.start) / self.step)

    @property
    def step_text(self) -> str:
        """The step as PromQL writes a range: `[1h]`."""
        return prometheus_duration(self.step)

    @property
    def read_span_text(self) -> str:
        """One step less a millisecond, as PromQL writes a range: a sample (or subquery
        point) on a step's edge falls in one step only, whether the server's ranges are
        closed (Prometheus 2) or left-open (3)."""
        return prometheus_duration(self.step - 0.001)

    @property
    def static_step(self) -> float:
        """Step of the "static" queries (TDPs, line rates, thresholds): a day, or the
        range when shorter. A `max_over_time` over a whole month would load every sample
        of every NVLink link at once, tens of millions on a large fleet, near
        Prometheus' default --query.max-samples; a day at a time stays far below it."""
        return min(max(self.step, 86400.0), self.end - self.start)

    @property
    def static_step_text(self) -> str:
        return prometheus_duration(self.static_step)

    @property
    def static_first(self) -> float:
        """First evaluation of a static query: whole static steps back from the end, the
        first of them reaching back to (or past) the start."""
        count = math.ceil((self.end - self.start) / self.static_step)
        return self.end - (count - 1) * self.static_step

    @property
    def range_words(self) -> str:
        """The range as a reader says it: '30 days', '36 hours'."""
        seconds = self.end - self.start
        if seconds % 86400 == 0:
            days = int(seconds // 86400)
            return f"{days} day{'s' if days != 1 else ''}"
        return f"{seconds / 3600:g} hours"

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600.0

    @property
    def step_hours(self) -> float:
        return self.step / 3600.0

    def times(self) -> list[float]:
        """Evaluation time of each step: the end of the window it summarises."""
        return [self.start + (i + 1) * self.step for i in range(self.steps)]

    def week_of_step(self) -> list[int]:
        """Week number (0 = the first 7 days of the range) of each step's window."""
        return [int(i * self.step // WEEK_SECONDS) for i in range(self.steps)]

    @property
    def weeks(self) -> int:
        return max(self.week_of_step(), default=0) + 1

    def week_label(self, week: int) -> str:
        """'week of 2026-10-26' (UTC date of the week's first day)."""
        return f"week of {iso_date(self.start + week * WEEK_SECONDS)}"


def choose_step(range_seconds: float, shortest: float = 0.0) -> float:
    """The smallest nice step of at most TARGET_POINTS over the range, and at least
    `shortest` (the recorded series' interval when the report reads them)."""
    for step in NICE_STEPS:
        if range_seconds / step <= TARGET_POINTS and step >= shortest:
            return float(step)
    return float(NICE_STEPS[-1])


def make_window(
    range_text: str,
    end_text: str | None,
    step_text: str | None,
    now: float,
    shortest_step: float = 0.0,
) -> Window:
    """The window `range_text` long ending at `end_text` (default now), aligned to the step.

    The end is rounded down to a whole step so the same arguments give the same numbers
    whenever the report is run. `shortest_step` bounds the chosen step, not a given one.
    """
    try:
        length = parse_duration(range_text, "--range", RANGE_BOUNDS)
        step = (
            choose_step(length, shortest_step)
            if step_text is None
            else parse_duration(step_text, "--step", DurationBounds(15.0, 86400.0))
        )
    except ValueError as err:
        raise ReportError(str(err)) from None
    if step > length:
        raise ReportError(f"--step {step_text} is longer than --range {range_text}")
    end = math.floor(parse_time(end_text, now) / step) * step
    steps = max(1, math.floor(length / step))
    return Window(start=end - steps * step, end=end, step=step)


def parse_time(text: str | None, now: float) -> float:
    """Unix seconds, RFC 3339 / ISO 8601 (2026-11-01T00:00:00Z, 2026-11-01) or 'now'."""
    if text is None or text == "now":
        return now
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ReportError(
            f"--end {text!r}: expected unix seconds or a time like 2026-11-01T00:00:00Z"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)  # a report speaks UTC
    return parsed.timestamp()


def iso_date(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d")


def iso_time(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
