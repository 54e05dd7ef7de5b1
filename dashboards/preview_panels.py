"""Drawing one Grafana panel's query results onto a matplotlib Axes, as Grafana would.

Each panel type nvwatch's dashboards use gets a small drawer: timeseries (lines, with
threshold lines when the panel shows them), stat and gauge (the last value, coloured by
the panel's thresholds; a gauge also as a bar against its max), bargauge (one bar per
series), heatmap (series x time), table (the instant result's labels and value) and
state-timeline (one band per series, coloured by value). Units are Grafana's unit ids
(percentunit, watt, Bps ...) formatted with nvwatch.agent.report.units.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nvwatch.agent.report import units
from nvwatch.agent.report.style import LIMIT_COLOUR, NEUTRAL, OK_COLOUR, WARN_COLOUR

if TYPE_CHECKING:
    from matplotlib.axes import Axes

MAX_LINES = 12  # series drawn per panel; the legend says how many more there were
MAX_LEGEND = 6
MAX_TABLE_ROWS = 8
# labels a preview's table leaves out: the metric and job, and the UUID (the gpu index
# names the GPU, and 40 characters would squeeze every other column)
_HIDDEN_COLUMNS = ("__name__", "job", "uuid")
_TEMPLATE = re.compile(r"\{\{\s*(\w+)\s*\}\}")
# Grafana's named colours -> what they look like here
_COLOURS = {
    "green": OK_COLOUR,
    "dark-green": OK_COLOUR,
    "yellow": "#D4AC0D",
    "orange": WARN_COLOUR,
    "dark-orange": WARN_COLOUR,
    "red": LIMIT_COLOUR,
    "dark-red": "#922B21",
    "blue": "#2471A3",
    "text": NEUTRAL,
}


@dataclass(frozen=True)
class Series:
    """One series of a panel: its legend, and (Unix time, value) points."""

    legend: str
    labels: dict[str, str]
    points: list[tuple[float, float]]

    @property
    def last(self) -> float:
        return self.points[-1][1]


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legendFormat: `{{label}}` replaced by the series' label value."""
    if not template:
        shown = {k: v for k, v in labels.items() if k != "__name__"}
        return ", ".join(f"{k}={v}" for k, v in shown.items()) or "value"
    return _TEMPLATE.sub(lambda m: labels.get(m.group(1), ""), template).strip()


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


_UNITS: dict[str, Callable[[float], str]] = {
    "percentunit": units.percent,
    "watt": units.watts,
    "celsius": units.celsius,
    "Bps": units.bytes_per_second,
    "kwatth": units.kilowatt_hours,
    "h": units.hours,
    "bytes": lambda v: _si(v, "B"),
    "hertz": lambda v: _si(v, "Hz"),
    "s": lambda v: f"{_number(v)} s",
    "cps": lambda v: f"{_number(v)}/s",
    "rotrpm": lambda v: f"{_number(v)} rpm",
}


def format_value(value: float, unit: str) -> str:
    """`value` as Grafana shows it in `unit` (a Grafana unit id); NaN as a dash."""
    if math.isnan(value):
        return units.MISSING
    return _UNITS.get(unit, _number)(value)


def _number(value: float) -> str:
    """As Grafana prints a unit without prefixes: whole from 1000 up (a fan at 10300 rpm
    is "10300 rpm"; `.4g` wrote "1.03e+04"), three significant digits below."""
    if 1000 <= abs(value) < 1e15:
        return f"{value:.0f}"
    return f"{value:.3g}"


def threshold_steps(panel: dict[str, Any]) -> list[tuple[float | None, str]]:
    """(from value, colour) of each threshold step; the first starts at None (-inf)."""
    thresholds = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {})
    return [
        (step.get("value"), _COLOURS.get(step.get("color", ""), step.get("color", NEUTRAL)))
        for step in thresholds.get("steps", [])
    ]


def colour_for(value: float, steps: Sequence[tuple[float | None, str]]) -> str:
    colour = NEUTRAL
    for start, step_colour in steps:
        if start is None or value >= start:
            colour = step_colour
    return colour


def _unit_formatter(axes: Axes, unit: str, axis: str = "y") -> None:
    from matplotlib.ticker import FuncFormatter

    target = axes.yaxis if axis == "y" else axes.xaxis
    target.set_major_formatter(FuncFormatter(lambda v, _pos: format_value(v, unit)))


def _dates(points: Sequence[tuple[float, float]]) -> list[float]:
    """Unix times as matplotlib date numbers (days since its 1970 epoch), UTC."""
    return [t / 86400.0 for t, _ in points]


def draw_timeseries(axes: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    from nvwatch.agent.report.style import time_axis

    for one in series[:MAX_LINES]:
        axes.plot(_dates(one.points), [v for _, v in one.points], linewidth=1.2, label=one.legend)
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
    if custom.get("thresholdsStyle", {}).get("mode", "off") != "off":
        for start, colour in threshold_steps(panel):
            if start is not None:
                axes.axhline(start, color=colour, linestyle="--", linewidth=1)
    _unit_formatter(axes, unit)
    time_axis(axes)
    axes.xaxis.get_offset_text().set_fontsize(5)
    _legend(axes, len(series))


def _legend(axes: Axes, total: int) -> None:
    handles, labels = axes.get_legend_handles_labels()
    if not handles:
        return
    shown = min(len(handles), MAX_LEGEND)
    handles, labels = handles[:shown], labels[:shown]
    if total > shown:
        labels[-1] += f" (+{total - shown} more)"
    axes.legend(handles, labels, loc="upper left", fontsize=6, ncol=2)


def draw_stat(axes: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    """The last value of each series (up to four), large, in its threshold colour."""
    axes.axis("off")
    steps = threshold_steps(panel)
    shown = series[:4]
    for i, one in enumerate(shown):
        x = (i + 0.5) / len(shown)
        colour = colour_for(one.last, steps)
        text = format_value(one.last, unit)
        axes.text(x, 0.5, text, ha="center", va="center", fontsize=16, color=colour, weight="bold")
        axes.text(x, 0.12, one.legend, ha="center", va="center", fontsize=7, color=NEUTRAL)


def draw_gauge(axes: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    """A bar from min to max filled to the last value, the value written over it."""
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    low = float(defaults.get("min", 0.0))
    high = float(defaults.get("max", 1.0 if unit == "percentunit" else max(s.last for s in series)))
    one = series[0]
    colour = colour_for(one.last, threshold_steps(panel))
    axes.barh([0], [high - low], left=low, color="#EEEEEE", height=0.5)
    axes.barh([0], [max(0.0, min(one.last, high) - low)], left=low, color=colour, height=0.5)
    axes.set_xlim(low, high if high > low else low + 1)
    axes.set_yticks([])
    axes.grid(False)
    _unit_formatter(axes, unit, "x")
    axes.set_title(format_value(one.last, unit), loc="center", fontsize=14, color=colour)


def draw_bargauge(axes: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    shown = series[:MAX_LINES]
    steps = threshold_steps(panel)
    values = [s.last for s in shown]
    positions = list(range(len(shown)))[::-1]
    axes.barh(positions, values, color=[colour_for(v, steps) for v in values], height=0.7)
    axes.set_yticks(positions, [s.legend for s in shown], fontsize=6)
    for y, v in zip(positions, values, strict=True):
        axes.text(v, y, " " + format_value(v, unit), va="center", fontsize=6)
    axes.grid(False)
    _unit_formatter(axes, unit, "x")


def draw_heatmap(axes: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    """Series as rows, time as columns, colour by value (Grafana's Oranges scheme)."""
    shown = series[: MAX_LINES * 2]
    times = sorted({t for s in shown for t, _ in s.points})
    column = {t: i for i, t in enumerate(times)}
    grid = [[math.nan] * len(times) for _ in shown]
    for row, one in zip(grid, shown, strict=True):
        for t, v in one.points:
            row[column[t]] = v
    dates = _dates([(t, 0.0) for t in times])
    extent = (dates[0], dates[-1], len(shown) - 0.5, -0.5)
    image = axes.imshow(grid, aspect="auto", cmap="Oranges", extent=extent, interpolation="nearest")
    axes.set_yticks(range(len(shown)), [s.legend for s in shown], fontsize=5)
    axes.xaxis_date()
    axes.grid(False)
    bar = axes.figure.colorbar(image, ax=axes, fraction=0.04)
    bar.ax.yaxis.set_major_formatter(_tick(unit))
    bar.ax.tick_params(labelsize=6)


def _tick(unit: str) -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: format_value(v, unit))


def draw_state_timeline(axes: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    """One band per series, coloured by its value over time (0 quiet, more louder)."""
    from nvwatch.agent.report.style import time_axis

    shown = series[:MAX_LINES]
    for row, one in enumerate(shown):
        for start, end, value in _runs(one.points):
            axes.barh(row, (end - start) / 86400.0, left=start / 86400.0, height=0.8,
                      color=_state_colour(panel, value))  # fmt: skip
    axes.set_yticks(range(len(shown)), [s.legend for s in shown], fontsize=5)
    axes.invert_yaxis()
    axes.grid(False)
    time_axis(axes)


def _runs(points: Sequence[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """(start, end, value) of each stretch of equal values: one bar each, not one per point."""
    runs: list[tuple[float, float, float]] = []
    for t, value in points:
        if runs and runs[-1][2] == value:
            runs[-1] = (runs[-1][0], t, value)
        else:
            if runs:
                runs[-1] = (runs[-1][0], t, runs[-1][2])
            runs.append((t, t, value))
    return runs


def _state_colour(panel: dict[str, Any], value: float) -> str:
    """0 quiet and 1 set, as the throttle reasons read; an IB port's 4 is ACTIVE."""
    if value == 4 and "state" in panel.get("title", "").lower():
        return OK_COLOUR
    return OK_COLOUR if value == 0 else WARN_COLOUR if value == 1 else LIMIT_COLOUR


def draw_table(axes: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    """The instant result as Grafana's table shows it: a column per label, then Value."""
    axes.axis("off")
    columns = sorted({k for s in series for k in s.labels if k not in _HIDDEN_COLUMNS})
    if len(series) > 1:  # a label every row shares says nothing about the rows
        columns = [c for c in columns if len({s.labels.get(c) for s in series}) > 1]
    rows = [[s.labels.get(c, "") for c in columns] + [format_value(s.last, unit)] for s in series]
    shown = rows[:MAX_TABLE_ROWS]
    if len(rows) > MAX_TABLE_ROWS:
        shown.append(["…"] * len(columns) + [f"+{len(rows) - MAX_TABLE_ROWS} rows"])
    table = axes.table(cellText=shown, colLabels=[*columns, "Value"], loc="upper center")
    table.auto_set_font_size(False)
    table.set_fontsize(5)
    table.scale(1, 0.9)


DRAWERS: dict[str, Callable[[Axes, dict[str, Any], list[Series], str], None]] = {
    "timeseries": draw_timeseries,
    "stat": draw_stat,
    "gauge": draw_gauge,
    "bargauge": draw_bargauge,
    "heatmap": draw_heatmap,
    "table": draw_table,
    "state-timeline": draw_state_timeline,
}
