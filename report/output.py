"""Writing a report to its directory: report.html, report.json and a CSV per table."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from nvwatch.report.html import render_html
from nvwatch.report.model import Report, Table


def write_report(report: Report, out: Path) -> list[Path]:
    """The files written, report.html first."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "report.html", out / "report.json"]
    written[0].write_text(render_html(report), encoding="utf-8")
    written[1].write_text(json.dumps(report.as_json(), indent=2) + "\n", encoding="utf-8")
    for section in report.sections:
        for table in section.tables:
            path = out / f"{section.key}_{table.name}.csv"
            _write_csv(table, path)
            written.append(path)
    return written


def _write_csv(table: Table, path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        # keys name their unit (energy_kwh, p95_watts); values are raw, unformatted numbers
        writer.writerow([c.key for c in table.columns])
        for row in table.rows:
            writer.writerow(["" if _missing(v) else v for v in row])


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
