"""The preview's numbers as a reader sees them: every unit a dashboard panel uses, over
the magnitudes the hardware gives (a fan at 10,300 rpm, a node at 10 kW, a link at
400 Gb/s), is printed without exponent notation and reads back as the value it stands
for."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from nvwatch.dashboards.build import build_all
from nvwatch.dashboards.preview_panels import format_value
from nvwatch.mixin.config import MixinConfig

MAGNITUDES = (0.5, 7.0, 42.0, 452.0, 1_236.0, 10_300.0, 87_500.0, 3.2e6, 5e10, 4e11)
# a number, then an optional SI prefix of the unit: what the value reads back as
_SHOWN = re.compile(r"(-?[0-9][0-9,]*(?:\.[0-9]+)?)\s*(%|[kMGT](?=[A-Za-z]))?")
_PREFIX = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, None: 1.0}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _units() -> set[str]:
    found = set()
    for dashboard in build_all(MixinConfig()).values():
        for panel in _panels(dashboard.get("panels", [])):
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
            if unit:
                found.add(unit)
    return found


UNITS = sorted(_units())


def test_the_dashboards_use_the_units_checked_here() -> None:
    assert {"rotrpm", "watt", "percentunit"} <= set(UNITS), UNITS


# a ratio above 1 is no percentage a panel shows
CASES = [(u, v) for u in UNITS for v in MAGNITUDES if not (u == "percentunit" and v > 1)]


@pytest.mark.parametrize(("unit", "value"), CASES)
def test_no_exponent_and_the_value_reads_back(unit: str, value: float) -> None:
    shown = format_value(value, unit)
    assert not re.search(r"[0-9]e[+-]?[0-9]", shown), f"{value} {unit}: {shown!r}"
    match = _SHOWN.match(shown)
    assert match, f"{value} {unit}: {shown!r} does not start with a number"
    number = float(match.group(1).replace(",", ""))
    if match.group(2) == "%":
        number /= 100
    else:
        number *= _PREFIX[match.group(2)]
    # kWh and hours are shown in their own unit; three significant digits at least
    assert number == pytest.approx(value, rel=0.01) or unit in {"kwatth", "h"}, (
        f"{value} {unit}: {shown!r} reads as {number}"
    )
