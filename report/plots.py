"""The report's few kinds of plot, each with one message in its title and units on its axes.

Colours come from `style.class_colour`, so a node class looks the same in every plot,
and racks from `Context.rack_colour`, one each; limits and budgets are dashed red lines
labelled with their value. Each plot keeps its legend as drawn (label, colour).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from nvwatch.report import style, units
from nvwatch.report.model import Plot

if TYPE_CHECKING:
    from matplotlib.axes import Axes


@dataclass(frozen=True)
class Line:
    label: str
    times: Sequence[float]  # unix seconds
    values: Sequence[float]
    colour: str
    dashed: bool = False


@dataclass(frozen=True)
class Limit:
    label: str
    value: float


def _dates(times: Sequence[float]) -> npt.NDArray[np.datetime64]:
    """Unix seconds as datetime64 (UTC), which matplotlib's date axis reads directly."""
    return (np.asarray(times, dtype=np.float64) * 1000).astype("datetime64[ms]")


def _limits(axes: Axes, limits: Sequence[Limit], unit: str) -> None:
    for limit in limits:
        axes.axhline(limit.value, color=style.LIMIT_COLOUR, linestyle="--", linewidth=1)
        axes.annotate(
            f"{limit.label} {units.fmt(limit.value, unit)}",
            xy=(1.0, limit.value),
            xycoords=("axes fraction", "data"),
            ha="right",
            va="bottom",
            fontsize=7,
            color=style.LIMIT_COLOUR,
        )


def time_lines(
    name: str, title: str, lines: Sequence[Line], unit: str, limits: Sequence[Limit] = ()
) -> Plot:
    """Values over time, one line each (a class, a rack, a GPU), against limits."""
    fig = style.new_figure()
    axes = fig.add_subplot()
    for line in lines:
        axes.plot(
            _dates(line.times),
            line.values,
            label=line.label,
            color=line.colour,
            linewidth=1.2,
            linestyle="--" if line.dashed else "-",
        )
    _limits(axes, limits, unit)
    style.time_axis(axes)
    style.unit_axis(axes, unit)
    axes.set_title(title)
    if unit == "ratio":
        axes.set_ylim(0, 1.05)
    if lines:
        axes.legend(loc="upper left", ncols=min(4, len(lines)))
    return Plot(name, title, style.figure_png(fig), style.legend_of(axes))


def histogram(
    name: str,
    title: str,
    values_by_group: dict[str, Sequence[float]],
    unit: str,
    bins: Sequence[float],
    ylabel: str,
) -> Plot:
    """Stacked counts of values per group (per-GPU utilization, coloured by class)."""
    fig = style.new_figure()
    axes = fig.add_subplot()
    groups = [g for g, v in values_by_group.items() if len(v)]
    axes.hist(
        [list(values_by_group[g]) for g in groups],
        bins=list(bins),
        stacked=True,
        label=groups,
        color=[style.class_colour(g) for g in groups],
    )
    style.unit_axis(axes, unit, axis="x")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    if groups:
        axes.legend(loc="upper right")
    return Plot(name, title, style.figure_png(fig), style.legend_of(axes))


def bars(
    name: str,
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    colours: Sequence[str],
    unit: str,
    limits: Sequence[Limit] = (),
) -> Plot:
    """One bar per item (a rack, a node) against limits, largest first as given."""
    fig = style.new_figure(height=max(2.2, 0.22 * len(labels) + 1.0))
    axes = fig.add_subplot()
    positions = list(range(len(labels)))
    axes.barh(positions, values, color=list(colours))
    axes.set_yticks(positions, labels=list(labels))
    axes.invert_yaxis()  # largest at the top
    for limit in limits:
        axes.axvline(limit.value, color=style.LIMIT_COLOUR, linestyle="--", linewidth=1)
    style.unit_axis(axes, unit, axis="x")
    axes.set_title(title)
    axes.grid(axis="y", visible=False)
    return Plot(name, title, style.figure_png(fig))


def boxes(name: str, title: str, values_by_group: dict[str, Sequence[float]], unit: str) -> Plot:
    """Distribution per group (5th to 95th percentile whiskers), coloured by class."""
    fig = style.new_figure()
    axes = fig.add_subplot()
    groups = [g for g, v in values_by_group.items() if len(v)]
    parts = axes.boxplot(
        [list(values_by_group[g]) for g in groups],
        tick_labels=groups,
        whis=(5, 95),
        showfliers=False,
        patch_artist=True,
    )
    for patch, group in zip(parts["boxes"], groups, strict=True):
        patch.set_facecolor(style.class_colour(group))
    style.unit_axis(axes, unit)
    axes.set_title(title)
    return Plot(name, title, style.figure_png(fig))
