"""The capacity report's part of the 1,000-node section: its time and memory over the
history and over a quarter of it, where the time went (`nvwatch report --timings`), and
a month estimated from how each part grew between the two.

What grows how: choosing the source and the queries read samples in proportion to the
range (both reports have the same step below a day, so their points grow with it too: a
line through the two is an upper bound for a month, whose step is coarser); the analysis,
the plots and the files work on each series' points, so they grow with the number of
points (720 at most: a month at one hour), and so does the report's memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nvwatch.common.durations import parse_duration
from nvwatch.report.window import choose_step

MONTH_DAYS = 30
REPORT_TARGET_S = 300.0
ENGINES = {"prometheus": "Prometheus", "victoria-metrics": "VictoriaMetrics"}
RANGE_PHASES = ("source", "queries")  # read the store in proportion to the range
SLOWEST_SHOWN = 8


@dataclass(frozen=True)
class Month:
    reading_s: float  # choosing the source and the queries
    rest_s: float  # analysis, plots, files, the process' start
    peak_rss_mb: float

    @property
    def seconds(self) -> float:
        return self.reading_s + self.rest_s


def report_lines(figures: dict[str, Any]) -> list[str]:
    engines = [e for e in ENGINES if "report" in figures["engines"].get(e, {})]
    if not engines:
        return []
    hours = figures["hours"]
    lines = [
        f"### The capacity report at {figures['nodes']:,} nodes",
        "",
        f"`nvwatch report --range {hours:g}h` over the whole history, end to end (queries, "
        "analysis, plots, files), its memory sampled every 5 s; `read` is where the report "
        "says it read its GPU, power, thermal, fabric and health figures (the report "
        "rules' series, one sample per series and `report_interval`, when they hold every "
        "GPU over the window, as the stand-in above does). This machine holds "
        f"{hours:g} h of {figures['nodes']:,} nodes, not {MONTH_DAYS} days: each report is "
        "also made over a quarter of the range, and the month is estimated from how each "
        "part grew between the two: reading the store (choosing the source and the "
        "queries) in proportion to the range, an upper bound since a month's step is "
        "coarser; the analysis, plots and files, and the memory, in proportion to the "
        f"points per series (a month has 720). Target: {REPORT_TARGET_S / 60:g} minutes.",
        "",
        "| engine | read | range | wall (s) | reading the store (s) | peak RSS (MiB) | result |",
        "|---|---|---|---|---|---|---|",
    ]
    estimates = []
    for engine in engines:
        r = figures["engines"][engine]["report"]
        for run in (r.get("shorter"), r):
            if run is not None:
                lines.append(_run_row(ENGINES[engine], run, run.get("hours", hours)))
        month = estimate(figures, r)
        if month is not None:
            estimates.append(_month_row(ENGINES[engine], month))
    if estimates:
        lines += [
            "",
            f"| engine | {MONTH_DAYS} days, estimated: reading (min) | the rest (min) "
            f"| whole (min) | peak RSS (MiB) | within {REPORT_TARGET_S / 60:g} min |",
            "|---|---|---|---|---|---|",
            *estimates,
        ]
    for engine in engines:
        lines += _slowest(ENGINES[engine], figures["engines"][engine]["report"], hours)
    return [*lines, ""]


def _run_row(engine: str, r: dict[str, Any], hours: float) -> str:
    error = r["error"] if len(r["error"]) <= 240 else r["error"][:237] + "..."
    result = f"failed: {error}" if r["returncode"] else f"{len(r['files'])} files"
    if r.get("apart"):
        result += (
            f" (measured apart on {r['apart']}, on the run's Prometheus data kept aside, "
            "over the history's day: `python -m benchmarks.thousand.report_again`)"
        )
    reading = _reading_s(r)
    return (
        f"| {engine} | {r.get('read_from') or 'n/a'} | {hours:g} h | {r['seconds']:.0f} "
        f"| {'' if reading is None else f'{reading:.0f}'} | {r['peak_rss_mb']:.0f} "
        f"| {result} |"
    )


def _month_row(engine: str, month: Month) -> str:
    within = "yes" if month.seconds <= REPORT_TARGET_S else "**no**"
    return (
        f"| {engine} | {month.reading_s / 60:.1f} | {month.rest_s / 60:.1f} "
        f"| {month.seconds / 60:.1f} | {month.peak_rss_mb:.0f} | {within} |"
    )


def _reading_s(r: dict[str, Any]) -> float | None:
    phases = r.get("timings", {}).get("phases")
    return None if not phases else sum(phases.get(p, 0.0) for p in RANGE_PHASES)


def estimate(figures: dict[str, Any], r: dict[str, Any]) -> Month | None:
    """The month from the two reports, None where either failed or has no timings."""
    shorter = r.get("shorter")
    if shorter is None or r["returncode"] or shorter["returncode"]:
        return None
    reading, reading_short = _reading_s(r), _reading_s(shorter)
    if reading is None or reading_short is None:
        return None
    interval_s = parse_duration(figures["report_interval"], "report_interval")
    hours, hours_short, month_h = figures["hours"], shorter["hours"], MONTH_DAYS * 24.0
    points = [_points(h, interval_s) for h in (hours_short, hours, month_h)]
    return Month(
        reading_s=_through(hours_short, reading_short, hours, reading, month_h),
        rest_s=_through(
            points[0],
            shorter["seconds"] - reading_short,
            points[1],
            r["seconds"] - reading,
            points[2],
        ),
        peak_rss_mb=_through(
            points[0], shorter["peak_rss_mb"], points[1], r["peak_rss_mb"], points[2]
        ),
    )


def _points(hours: float, interval_s: float) -> float:
    range_s = hours * 3600.0
    return range_s / choose_step(range_s, interval_s)


def _through(x0: float, y0: float, x1: float, y1: float, x: float) -> float:
    """The line through (x0, y0) and (x1, y1) at x, never falling: a part measured
    faster over the longer range is taken as not growing."""
    slope = max(0.0, (y1 - y0) / (x1 - x0)) if x1 != x0 else 0.0
    return y1 + slope * (x - x1)


def _slowest(engine: str, r: dict[str, Any], hours: float) -> list[str]:
    """The queries that took longest over the whole range, beside the shorter one's."""
    queries = r.get("timings", {}).get("queries")
    if not queries:
        return []
    short_hours = r.get("shorter", {}).get("hours")
    before = {q["name"]: q for q in r.get("shorter", {}).get("timings", {}).get("queries", [])}
    lines = [
        "",
        f"{engine}: the {SLOWEST_SHOWN} slowest of the report's {len(queries)} queries over "
        f"{hours:g} h (each query's own time; four run at once).",
        "",
        f"| query | series | {hours:g} h (s) | "
        + (f"{short_hours:g} h (s) |" if short_hours else "|"),
        "|---|---|---|" + ("---|" if short_hours else ""),
    ]
    for q in queries[:SLOWEST_SHOWN]:
        earlier = before.get(q["name"])
        cells = [q["name"], f"{q['series']:,}", f"{q['seconds']:.1f}"]
        if short_hours:
            cells.append(f"{earlier['seconds']:.1f}" if earlier else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines
