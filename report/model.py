"""What a report is made of: sections of numbers, tables and plots, before any rendering.

The HTML, report.json and the CSVs are three views of one `Report`, so a number in the
document is the number a script reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

Cell = str | float | int | None


@dataclass(frozen=True)
class Column:
    key: str  # CSV and JSON name
    heading: str  # what the HTML table shows
    unit: str = ""  # a units.FORMATTERS key; "" for text


@dataclass
class Table:
    name: str  # file stem of its CSV: <section>_<name>.csv
    title: str
    columns: list[Column]
    rows: list[list[Cell]]
    note: str = ""
    # the HTML shows this many rows (the CSV and JSON have them all); None: every row
    html_rows: int | None = 15

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": [{"key": c.key, "heading": c.heading, "unit": c.unit} for c in self.columns],
            "rows": [
                dict(zip((c.key for c in self.columns), map(_clean, row), strict=True))
                for row in self.rows
            ],
        }


@dataclass
class Plot:
    name: str
    title: str  # the one message of the plot, as a sentence
    png: bytes
    # (label, #rrggbb) of each legend entry, as drawn
    legend: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Number:
    """A headline figure: its value, unit and the words that introduce it."""

    label: str
    value: float | None
    unit: str


@dataclass
class Section:
    key: str  # utilization, usage, power, thermal, fabric, health
    title: str
    coverage: float  # share of expected samples present (NaN: nothing to expect)
    coverage_note: str  # what the coverage counts
    findings: list[str] = field(default_factory=list)  # sentences, most important first
    numbers: dict[str, Number] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    absent: str = ""  # why the section has no data, shown instead of its body

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "coverage": _clean(self.coverage),
            "coverage_note": self.coverage_note,
            "absent": self.absent or None,
            "findings": self.findings,
            "numbers": {
                k: {"label": n.label, "value": _clean(n.value), "unit": n.unit}
                for k, n in self.numbers.items()
            },
            "tables": {t.name: t.as_json() for t in self.tables},
            "plots": [
                {
                    "name": p.name,
                    "title": p.title,
                    "png_bytes": len(p.png),
                    "legend": [{"label": label, "colour": c} for label, c in p.legend],
                }
                for p in self.plots
            ],
        }


@dataclass
class Report:
    title: str
    prometheus: str
    read_from: str  # which of its series: recorded by the report rules, or scraped
    cluster: str | None
    start: float
    end: float
    step: float
    generated: float
    summary: list[str]
    sections: list[Section]

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "prometheus": self.prometheus,
            "read_from": self.read_from,
            "cluster": self.cluster,
            "start": self.start,
            "end": self.end,
            "step_seconds": self.step,
            "generated": self.generated,
            "summary": self.summary,
            "sections": {s.key: s.as_json() for s in self.sections},
        }


def _clean(value: Cell) -> Cell:
    """NaN is not JSON: a missing value is null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
