"""Numbers as people read them in a report: W, kW, kWh, °C, bytes/s, ratios as %.

Pure Python (no matplotlib) so the tables, the summary and the axis formatters in
`nvwatch.report.style` print a value the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable

_SI_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
MISSING = "–"


def _si(value: float, unit: str, digits: int = 3) -> str:
    """`value` with the largest SI prefix that keeps it >= 1: 1.25e10 B/s -> '12.5 GB/s'."""
    for scale, prefix in _SI_PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def _large(value: float, unit: str) -> str:
    """Thousands separated and no decimals from 100 up (GPU-hours, kWh); 3 digits below."""
    return f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"


def _formatter(show: Callable[[float], str]) -> Callable[[float | None], str]:
    """`show` for a number; a dash for a value that is not there (None or NaN)."""

    def formatted(value: float | None) -> str:
        if value is None or math.isnan(value):
            return MISSING
        return show(float(value))

    return formatted


watts = _formatter(lambda v: _si(v, "W"))  # '312 W', '3.2 kW' (a DGX-1), '98.5 kW' (a row)
kilowatts = _formatter(lambda v: f"{v:,.1f} kW")  # a value already in kW, as budgets are
kilowatt_hours = _formatter(lambda v: _large(v, "kWh"))
celsius = _formatter(lambda v: f"{v:.1f} °C")
bytes_per_second = _formatter(lambda v: _si(v, "B/s"))
percent = _formatter(lambda v: f"{100 * v:.1f} %")  # a 0..1 ratio: 0.4567 -> '45.7 %'
hours = _formatter(lambda v: _large(v, "h"))
count = _formatter(lambda v: f"{v:,.0f}")
rpm = _formatter(lambda v: f"{v:,.0f} rpm")  # a fan's speed
# a 0..1 score that is no share of anything (Slurm's fair-share factor): three decimals,
# which tell two accounts apart where sshare's six would only be noise on a page
score = _formatter(lambda v: f"{v:.3f}")


def _duration(seconds: float) -> str:
    """A wait as people say it: '45 s', '12 min', '3.5 h', '2.1 d'."""
    for size, unit in ((86400.0, "d"), (3600.0, "h"), (60.0, "min")):
        if abs(seconds) >= size:
            return (
                f"{seconds / size:.2g} {unit}"
                if seconds < 10 * size
                else f"{seconds / size:.0f} {unit}"
            )
    return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


duration = _formatter(_duration)

# unit name (as plots and tables declare it) -> formatter
FORMATTERS: dict[str, Callable[[float | None], str]] = {
    "W": watts,
    "kW": kilowatts,
    "kWh": kilowatt_hours,
    "°C": celsius,
    "bytes/s": bytes_per_second,
    "ratio": percent,
    "h": hours,
    "count": count,
    "rpm": rpm,
    "score": score,
    "s": duration,
}


def fmt(value: float | None, unit: str) -> str:
    """`value` formatted for `unit` (a FORMATTERS key); other units print 3 digits."""
    formatter = FORMATTERS.get(unit)
    if formatter is not None:
        return formatter(value)
    return _formatter(lambda v: f"{v:.3g} {unit}".rstrip())(value)
