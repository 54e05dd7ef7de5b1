"""The capacity report's part of the 1,000-node section: its time and memory over the
history, over a quarter of it, over the whole at a coarser step and over 30 days (the
report rules' series standing in before the history), where the time went (`nvwatch
report --timings`), and a month estimated from how each part grew, beside the month
measured.

What grows how: reading the store (choosing the source and the queries) costs a part per
point of each answer (the whole range at two steps tells it) and a part per hour of range
(the samples read: the two ranges at one step); the analysis, the plots and the files
work on each series' points, so they grow with the number of points (720 at most: a
month at one hour), and so does the report's memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.thousand.measure import COARSER, MONTH_DAYS
from nvwatch.common.durations import parse_duration
from nvwatch.report.window import choose_step

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


def _bmc_words(figures: dict[str, Any]) -> str:
    if figures["generation"].get("bmc_series"):
        return ""
    return (
        " This run's fleet had no BMCs (the bulk history gained them later): its BMC reads "
        "found no series, and what they cost at this size is not in these figures."
    )


def _month_words(figures: dict[str, Any]) -> str:
    """Which engines' months the run made, where it says (`--month-engines`)."""
    if "month_engines" not in figures:
        return ""
    made = " and ".join(ENGINES[e] for e in figures["month_engines"]) or "no engine"
    return (
        f": {made}, `--month-engines`; for another engine the run would stand in the "
        "same month of series again, and VictoriaMetrics took most of its turn to import it"
    )


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
        "says it read its GPU, power, thermal, fabric, health and BMC figures (the report "
        "rules' series, one sample per series and `report_interval`, when they hold every "
        "GPU and BMC over the window, as the stand-in above does). This machine holds "
        f"{hours:g} h of {figures['nodes']:,} nodes' samples, not {MONTH_DAYS} days. The "
        f"{MONTH_DAYS}-day report (where measured{_month_words(figures)}) reads the report "
        f"rules' series for {MONTH_DAYS} days, standing in before the history as over "
        "it, and the scraped samples its other reads need (Slurm queue, stragglers' "
        f"alerts) over the history only.{_bmc_words(figures)} Each report is also made "
        f"over a quarter of the range and over the whole range at {COARSER} times its "
        "step, and the month is "
        "estimated from how each part grew: reading the store (choosing the source and the "
        "queries) as a part per point of a series (its answer: the whole range at two "
        "steps) and a part per hour of range (the samples read: the two ranges at one "
        "step); the analysis, plots and files, and the memory, in proportion to the points "
        f"per series. A month has 720 points (one an hour). Target: "
        f"{REPORT_TARGET_S / 60:g} minutes.",
        "",
        "| engine | read | range | wall (s) | reading the store (s) | peak RSS (MiB) | result |",
        "|---|---|---|---|---|---|---|",
    ]
    estimates = []
    for engine in engines:
        r = figures["engines"][engine]["report"]
        for run in (r.get("shorter"), r, r.get("coarser"), r.get("month")):
            if run is not None:
                lines.append(_run_row(ENGINES[engine], run, run.get("hours", hours)))
        month = estimate(figures, r)
        if month is not None:
            estimates.append(_month_row(ENGINES[engine], month, r.get("month")))
    if estimates:
        lines += [
            "",
            f"| engine | {MONTH_DAYS} days, estimated: reading (min) | the rest (min) "
            f"| whole (min) | peak RSS (MiB) | measured (min) "
            f"| within {REPORT_TARGET_S / 60:g} min |",
            "|---|---|---|---|---|---|---|",
            *estimates,
        ]
    for engine in engines:
        lines += _slowest(ENGINES[engine], figures["engines"][engine]["report"], hours)
    return [*lines, ""]


def _run_row(engine: str, r: dict[str, Any], hours: float) -> str:
    error = r["error"] if len(r["error"]) <= 240 else r["error"][:237] + "..."
    result = f"failed: {error}" if r["returncode"] else f"{len(r['files'])} files"
    if not r["returncode"] and _no_straggler_alert(r):
        result += (
            " (no Stragglers files: no straggler alert in a whole step of its range; the "
            "alerts are the live minutes' alone, not stood in over the history)"
        )
    if r.get("apart"):
        result += (
            f" (measured apart on {r['apart']}, on the run's Prometheus data kept aside, "
            "over the history's day: `python -m benchmarks.thousand.report_again`)"
        )
    reading = _reading_s(r)
    return (
        f"| {engine} | {r.get('read_from') or 'n/a'} | {hours:g} h{_step(r)} | {r['seconds']:.0f} "
        f"| {'' if reading is None else f'{reading:.0f}'} | {r['peak_rss_mb']:.0f} "
        f"| {result} |"
    )


def _no_straggler_alert(r: dict[str, Any]) -> bool:
    """Whether the report read no straggler alert: then it writes no Stragglers files,
    and a report at a coarser step, whose last whole step ended before the first alert
    fired, has fewer files than one at a finer step of the same run."""
    queries = r.get("timings", {}).get("queries", [])
    return any(q["name"] == "straggler_alerts" and not q["series"] for q in queries)


def _step(r: dict[str, Any]) -> str:
    return f", step {r['step_s'] / 60:g} min" if r.get("step_s") else ""


def _unmeasured(measured: dict[str, Any] | None) -> str:
    return "not measured" if measured is None else "failed (above)"


def _month_row(engine: str, month: Month, measured: dict[str, Any] | None) -> str:
    """The estimate, beside the month measured where it was (that decides)."""
    ran = measured is not None and not measured["returncode"]
    seconds = measured["seconds"] if measured is not None and ran else month.seconds
    within = "yes" if seconds <= REPORT_TARGET_S else "**no**"
    return (
        f"| {engine} | {month.reading_s / 60:.1f} | {month.rest_s / 60:.1f} "
        f"| {month.seconds / 60:.1f} | {month.peak_rss_mb:.0f} "
        f"| {f'{seconds / 60:.1f}' if ran else _unmeasured(measured)} | {within} |"
    )


def _reading_s(r: dict[str, Any]) -> float | None:
    phases = r.get("timings", {}).get("phases")
    return None if not phases else sum(phases.get(p, 0.0) for p in RANGE_PHASES)


def estimate(figures: dict[str, Any], r: dict[str, Any]) -> Month | None:
    """The month from the reports, None where one failed or has no timings."""
    runs = [r, r.get("shorter"), *([r["coarser"]] if "coarser" in r else [])]
    if any(run is None or run["returncode"] or _reading_s(run) is None for run in runs):
        return None
    shorter = r["shorter"]
    interval_s = parse_duration(figures["report_interval"], "report_interval")
    month_h = MONTH_DAYS * 24.0
    points = [_points(h, interval_s) for h in (shorter["hours"], figures["hours"], month_h)]
    return Month(
        reading_s=_reading_month(figures["hours"], r, month_h, points[2]),
        rest_s=_through(
            points[0],
            shorter["seconds"] - _reading(shorter),
            points[1],
            r["seconds"] - _reading(r),
            points[2],
        ),
        peak_rss_mb=_through(
            points[0], shorter["peak_rss_mb"], points[1], r["peak_rss_mb"], points[2]
        ),
    )


def _reading(run: dict[str, Any]) -> float:
    found = _reading_s(run)
    assert found is not None
    return found


def _reading_month(hours: float, r: dict[str, Any], month_h: float, month_points: float) -> float:
    """Reading the store over a month: a + b x points + c x hours, b from the whole
    range at two steps, c from the two ranges at one step; without the coarser report,
    the line through the two ranges (points grow with them: an upper bound)."""
    shorter, whole = r["shorter"], _reading(r)
    if "coarser" not in r:
        return _through(shorter["hours"], _reading(shorter), hours, whole, month_h)
    coarser = r["coarser"]
    p_whole, p_coarser = hours * 3600 / r["step_s"], hours * 3600 / coarser["step_s"]
    p_short = shorter["hours"] * 3600 / shorter["step_s"]
    per_point = max(0.0, (whole - _reading(coarser)) / (p_whole - p_coarser))
    per_hour = max(
        0.0,
        (whole - _reading(shorter) - per_point * (p_whole - p_short)) / (hours - shorter["hours"]),
    )
    return whole + per_point * (month_points - p_whole) + per_hour * (month_h - hours)


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
