"""Drawing one Grafana panel's query results onto a matplotlib Axes, as Grafana would.

Each panel type nvwatch's dashboards use gets a small drawer: timeseries (lines, with
threshold lines when the panel shows them), stat and gauge (the last value, coloured by
the panel's thresholds; a gauge also as a bar against its max), bargauge (one bar per
series), heatmap (series x time), table (the instant result's labels and value) and
state-timeline (one band per series, coloured by value). Units are Grafana's unit ids
(percentunit, watt, Bps ...) formatted with nvwatch.report.units.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nvwatch.dashboards.preview_fields import column_title, mapped_text, shown_columns
from nvwatch.dashboards.preview_text import axes_points, fitting_size, shorten, text_width
from nvwatch.report import units
from nvwatch.report.style import LIMIT_COLOUR, NEUTRAL, OK_COLOUR, WARN_COLOUR

if TYPE_CHECKING:
    from matplotlib.axes import Axes

MAX_LINES = 12  # series drawn per panel; the legend says how many more there were
MAX_LEGEND = 6
MAX_TABLE_ROWS = 8
# the smallest text a preview draws, in points: a size smaller than this gets a shorter
# text (an ellipsis) or fewer rows instead
FONT_FLOOR = 5.0
# the most of a panel's width a bar gauge's, timeline's or heatmap's row names take
NAME_SHARE = 0.35
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
    from nvwatch.report.style import time_axis

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
    """Two columns of entries, each shortened to its column's width."""
    handles, labels = axes.get_legend_handles_labels()
    if not handles:
        return
    shown = min(len(handles), MAX_LEGEND)
    handles, labels = handles[:shown], labels[:shown]
    more = [""] * shown
    if total > shown:
        more[-1] = f" (+{total - shown} more)"
    # a column's line sample, the gaps around it and the legend's border take 6 ems
    room = axes_points(axes)[0] / 2 - 6 * _LEGEND_SIZE
    labels = [
        shorten(label, room - text_width(tail, _LEGEND_SIZE), _LEGEND_SIZE) + tail
        for label, tail in zip(labels, more, strict=True)
    ]
    axes.legend(handles, labels, loc="upper left", fontsize=_LEGEND_SIZE, ncol=2)


_LEGEND_SIZE = 6.0


def draw_stat(axes: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    """The last value of each series (up to four), large, in its threshold colour: sized
    to fit its share of the panel, as Grafana sizes a stat's value."""
    axes.axis("off")
    steps = threshold_steps(panel)
    shown = series[:4]
    width, height = axes_points(axes)
    slot = 0.9 * width / len(shown)
    texts = [format_value(one.last, unit) for one in shown]
    size = min(fitting_size(texts, slot, 16, 8, "bold"), 0.3 * height)
    for i, (one, text) in enumerate(zip(shown, texts, strict=True)):
        x = (i + 0.5) / len(shown)
        colour = colour_for(one.last, steps)
        axes.text(x, 0.5, shorten(text, slot, size, "bold"), ha="center", va="center",
                  fontsize=size, color=colour, weight="bold")  # fmt: skip
        axes.text(x, 0.12, shorten(one.legend, slot, 7), ha="center", va="center", fontsize=7,
                  color=NEUTRAL)  # fmt: skip


def draw_gauge(axes: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    """A bar from min to max filled to the last value, the value written above it inside
    the panel (under the title, not beside it), sized to the panel's width."""
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    low = float(defaults.get("min", 0.0))
    high = float(defaults.get("max", 1.0 if unit == "percentunit" else max(s.last for s in series)))
    one = series[0]
    colour = colour_for(one.last, threshold_steps(panel))
    axes.barh([0], [high - low], left=low, color="#EEEEEE", height=1.0)
    axes.barh([0], [max(0.0, min(one.last, high) - low)], left=low, color=colour, height=1.0)
    axes.set_xlim(low, high if high > low else low + 1)
    axes.set_ylim(-0.5, 3.0)  # the bar in the lower part, the value above it
    axes.set_yticks([])
    axes.spines["left"].set_visible(False)
    axes.grid(False)
    _unit_formatter(axes, unit, "x")
    _value_ticks(axes, unit)
    width, height = axes_points(axes)
    text = format_value(one.last, unit)
    size = min(fitting_size([text], 0.9 * width, 14, 8, "bold"), 0.25 * height)
    axes.text(0.5, 0.68, shorten(text, 0.9 * width, size, "bold"), transform=axes.transAxes,
              ha="center", va="center", fontsize=size, color=colour, weight="bold")  # fmt: skip


def _value_ticks(axes: Axes, unit: str) -> None:
    """As many ticks on a value axis (x) as its labels have room for, side by side."""
    from matplotlib.ticker import MaxNLocator

    low, high = axes.get_xlim()
    widest = max(text_width(format_value(v, unit), 6) for v in (low, high, (low + high) / 2))
    # a label's width of space between labels, at the least; MaxNLocator may put a tick
    # beyond either end
    fits = int(axes_points(axes)[0] / (2 * widest + 12)) - 1
    axes.xaxis.set_major_locator(MaxNLocator(nbins=max(1, fits)))


def _names(axes: Axes, names: Sequence[str], largest: float) -> float:
    """Row names on y, row i at y=i: sized to the rows within the floor, every k-th where
    even the floor is too tall, and each shortened to NAME_SHARE of the width, as
    Grafana shortens a bar gauge's names. Returns their size."""
    width, height = axes_points(axes)
    pitch = height / max(1, len(names))
    size = max(FONT_FLOOR, min(largest, pitch / 1.4))
    rows = range(0, len(names), math.ceil(size * 1.4 / pitch))
    axes.set_yticks(list(rows), [shorten(names[i], NAME_SHARE * width, size) for i in rows],
                    fontsize=size)  # fmt: skip
    return size


def draw_bargauge(axes: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    """A bar per series, top down: its name left of it, its value in a column right of
    the bars (where no bar reaches), in the names' size."""
    shown = series[:MAX_LINES]
    steps = threshold_steps(panel)
    values = [s.last for s in shown]
    rows = range(len(shown))
    axes.barh(rows, values, color=[colour_for(v, steps) for v in values], height=0.7)
    axes.set_ylim(len(shown) - 0.5, -0.5)
    size = _names(axes, [s.legend for s in shown], 6)
    right = axes.get_yaxis_transform()  # x across the axes, y in rows
    for y, v in zip(rows, values, strict=True):
        axes.text(1.0, y, " " + format_value(v, unit), transform=right, va="center",
                  fontsize=size)  # fmt: skip
    axes.grid(False)
    _unit_formatter(axes, unit, "x")
    _value_ticks(axes, unit)


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
    _names(axes, [s.legend for s in shown], 5)
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
    from nvwatch.report.style import time_axis

    shown = series[:MAX_LINES]
    for row, one in enumerate(shown):
        for start, end, value in _runs(one.points):
            axes.barh(row, (end - start) / 86400.0, left=start / 86400.0, height=0.8,
                      color=_state_colour(panel, value))  # fmt: skip
    axes.set_ylim(len(shown) - 0.5, -0.5)
    _names(axes, [s.legend for s in shown], 5)
    axes.grid(False)
    time_axis(axes)
    axes.xaxis.get_offset_text().set_fontsize(5)


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
    """The instant result as Grafana's table shows it: a column per label, then Value.

    Columns as wide as their text where the panel has the room; where it has not, the
    font shrinks to the floor and then the widest columns are cut to a common width,
    their long texts ending in an ellipsis as in Grafana. As many rows as the panel holds
    (MAX_TABLE_ROWS at most), the last one counting those left out."""
    axes.axis("off")
    labels = sorted({k for s in series for k in s.labels if k not in _HIDDEN_COLUMNS})
    columns = shown_columns(panel, labels)
    if len(series) > 1:  # a label every row shares says nothing about the rows
        columns = [c for c in columns if len({s.labels.get(c) for s in series}) > 1]
    rows = [[s.labels.get(c, "") for c in columns] + [_cell(panel, s.last, unit)] for s in series]
    header = [column_title(panel, c) for c in [*columns, "Value"]]
    width, height = axes_points(axes)
    measured = [header, *rows[:MAX_TABLE_ROWS]]
    if len(rows) > min(MAX_TABLE_ROWS, int(height / (2.0 * _TABLE_SIZE)) - 1):
        # a row that counts those left out, at its widest: fewer rows go at a smaller size
        measured.append(["…"] * len(columns) + [f"+{len(rows)} rows"])
    size, widths = _column_widths(measured, width)
    row_height = 2.0 * size
    room = max(1, int(height / row_height) - 1)  # rows under the header
    shown = rows[: min(MAX_TABLE_ROWS, room)]
    if len(rows) > len(shown):
        shown = shown[: max(0, min(len(shown), room - 1))]
        shown.append(["…"] * len(columns) + [f"+{len(rows) - len(shown)} rows"])
    cut = [[shorten(text, w - 2 * _CELL_PAD, size) for text, w in zip(row, widths, strict=True)]
           for row in [header, *shown]]  # fmt: skip
    table = axes.table(cellText=cut[1:], colLabels=cut[0], colWidths=[w / width for w in widths],
                       loc="upper center", cellLoc="left")  # fmt: skip
    table.auto_set_font_size(False)
    table.set_fontsize(size)
    for (_row, column), cell in table.get_celld().items():
        cell.set_height(row_height / height)
        cell.PAD = _CELL_PAD / widths[column]  # a fraction of the cell's width
        if column == len(header) - 1:  # numbers line up on the right, as in Grafana
            cell.get_text().set_horizontalalignment("right")


def _cell(panel: dict[str, Any], value: float, unit: str) -> str:
    return mapped_text(panel, value) or format_value(value, unit)


_TABLE_SIZE = 6.0
_CELL_PAD = 2.0  # points between a cell's text and its borders


def _column_widths(rows: list[list[str]], width: float) -> tuple[float, list[float]]:
    """The font size and each column's width (points) for these rows in `width` points."""
    size = _TABLE_SIZE
    while True:
        natural = [max(text_width(row[c], size) for row in rows) + 2 * _CELL_PAD
                   for c in range(len(rows[0]))]  # fmt: skip
        if sum(natural) <= width or size <= FONT_FLOOR:
            break
        size -= 0.5
    if sum(natural) <= width:  # the room left over, shared out
        extra = (width - sum(natural)) / len(natural)
        return size, [w + extra for w in natural]
    # the widest columns cut to the one width at which they all fit
    left, level = width, width / len(natural)
    for count, w in enumerate(sorted(natural)):
        level = left / (len(natural) - count)
        if w > level:
            break
        left -= w
    return size, [min(w, level) for w in natural]


DRAWERS: dict[str, Callable[[Axes, dict[str, Any], list[Series], str], None]] = {
    "timeseries": draw_timeseries,
    "stat": draw_stat,
    "gauge": draw_gauge,
    "bargauge": draw_bargauge,
    "heatmap": draw_heatmap,
    "table": draw_table,
    "state-timeline": draw_state_timeline,
}
