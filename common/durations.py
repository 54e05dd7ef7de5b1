"""The one duration grammar of nvwatch: agent flags, config files and the mixin config.

A duration is a bare number of seconds (`30`, `2.5`) or one or more `<number><unit>`
terms, largest unit first, as Prometheus writes them: `500ms`, `2.5s`, `1h30m`, `7d`.
Units: ms, s, m, h, d, w, y (a Prometheus year is 365 days). The mixin writes durations
into PromQL and rule files, which take only whole numbers per unit, so
`prometheus_duration()` renders any parsed value in that canonical form (`2.5s` ->
`2s500ms`, `90m` -> `1h30m`).

A flag also has bounds (`DurationBounds`), stated in its --help and enforced by
`parse_duration(..., bounds=...)`: a poll interval of 1ms busy-loops a core, and one of
99999999999h overflows the timer it is waited on; both are typos to refuse at start.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from nvwatch.common.yaml_safe import shown

UNIT_SECONDS: dict[str, float] = {
    "y": 365 * 86400.0,
    "w": 7 * 86400.0,
    "d": 86400.0,
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 0.001,
}
# Order matters: "ms" before "m" so that "500ms" is not read as 500 minutes + "s".
# ASCII digits only: \d would take "１s" (U+FF11) and "٣m", which float() reads too.
_TERM = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|y|w|d|h|m|s)")
_BARE = re.compile(r"[0-9]+(?:\.[0-9]+)?")
# str.strip() alone would also drop U+3000 and U+00A0 around the number: ASCII only
_SPACE = " \t\r\n\v\f"
_UNIT_ORDER = list(UNIT_SECONDS)


# How --help states the grammar next to a DURATION option.
# A bare number is seconds, as this grammar has always read it; --help says so rather
# than leave `--interval 5` to be guessed (Prometheus would refuse it, node_exporter's
# Go flags would too).
DURATION_FORMAT = (
    "a number and a unit (ms s m h d w y), e.g. 500ms, 5s, 1h30m, 2.5s; "
    "a number alone is seconds (5 = 5s)"
)


class DurationError(ValueError):
    """A duration that does not follow the grammar; the message is one line for a user."""


@dataclass(frozen=True)
class DurationBounds:
    """The range a duration option accepts, both ends included."""

    low: float
    high: float

    def __str__(self) -> str:
        """For --help and errors: "100ms to 1h"."""
        return f"{prometheus_duration(self.low)} to {prometheus_duration(self.high)}"


def parse_duration(
    text: str | float | int, what: str = "duration", bounds: DurationBounds | None = None
) -> float:
    """Seconds in `text`; DurationError unless it follows the grammar, is positive and
    finite, and lies within `bounds` when given."""
    # bool is an int, and YAML hands over lists and mappings: none of them is a duration
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise DurationError(
            f"invalid {what} {shown(text)}: use a number with a unit, e.g. 5s or 1h30m"
        )
    if isinstance(text, str):
        seconds = _parse_text(text.strip(_SPACE), what)
    else:
        # an int past a float's range is no finite duration (float() would overflow)
        seconds = float(text) if abs(text) < 1e308 else math.inf
    if not math.isfinite(seconds):
        raise DurationError(f"invalid {what} {shown(text)}: must be a finite duration")
    if not seconds > 0:
        raise DurationError(f"invalid {what} {shown(text)}: must be greater than zero")
    if bounds is not None and not bounds.low <= seconds <= bounds.high:
        raise DurationError(f"invalid {what} {shown(text)}: must be from {bounds}")
    return seconds


def _parse_text(text: str, what: str) -> float:
    if _BARE.fullmatch(text):
        return float(text)
    position, total, last_unit = 0, 0.0, -1
    # each term matched where the last one ended: finditer would search on from every
    # digit of a long number that lacks its unit, 100,000 digits taking minutes
    while match := _TERM.match(text, position):
        unit = _UNIT_ORDER.index(match.group(2))
        # Prometheus insists on largest unit first and each unit once: "30m1h" is a typo.
        if unit <= last_unit:
            break
        total += float(match.group(1)) * UNIT_SECONDS[match.group(2)]
        position, last_unit = match.end(), unit
    if position != len(text) or not text:
        raise DurationError(
            f"invalid {what} {shown(text)}: use a number with ms, s, m, h, d, w or y (5s, 1h30m)"
        )
    return total


def prometheus_duration(seconds: float) -> str:
    """`seconds` as Prometheus writes a duration: whole units, largest first ("1h30m")."""
    milliseconds = seconds * 1000  # Prometheus' resolution is the millisecond
    if not math.isfinite(milliseconds):
        raise DurationError(f"duration {seconds!r}s is too long to write down")
    remaining = round(milliseconds)
    if remaining <= 0:
        raise DurationError(f"duration {seconds!r}s is shorter than Prometheus' 1ms")
    parts: list[str] = []
    for unit, unit_seconds in UNIT_SECONDS.items():
        unit_ms = round(unit_seconds * 1000)
        count, remaining = divmod(remaining, unit_ms)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
