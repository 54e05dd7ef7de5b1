"""`nvwatch dashboards preview`: every generated dashboard drawn to a PNG from a live Prometheus.

No Grafana is needed to see what the dashboards show. For each dashboard (as built from
the mixin config, the same JSON `dashboards build` writes) the preview resolves its
template variables, runs each panel's own queries against Prometheus' HTTP API over the
chosen range, and draws the panels on a figure laid out by their `gridPos` on Grafana's
24-column grid, with the panels' units and thresholds (dashboards/preview_panels.py).

Variables, as Grafana would on first load: `$datasource` is the Prometheus asked; a
multi-value variable (All) is `.*`; a single-value one takes the first value its
`label_values(...)` query finds (resolved in order, so `$instance` sees `$cluster`);
`--var NAME=VALUE` chooses one. `$__range`, `$__range_s`, `$__interval` and
`$__rate_interval` follow the range and the scrape interval as in Grafana.

Every panel whose queries all come back empty is reported (`PanelResult.empty`): a
dashboard that shows "No data" somewhere is a finding, not a picture.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvwatch.common.durations import prometheus_duration
from nvwatch.dashboards.preview_maxima import Drawn
from nvwatch.dashboards.preview_panels import DRAWERS, Series, legend
from nvwatch.dashboards.preview_text import shorten

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

GRID_COLUMNS = 24
GRID_UNIT_INCHES = 0.42  # height of one gridPos unit (Grafana's 30 px row plus margin)
FIGURE_WIDTH_INCHES = 16.0
TITLE_INCHES = 0.6  # room for the dashboard's title above the panels
POINTS = 240  # points per range query, about a panel's width in Grafana
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*(\w+)\s*\)\s*$", re.DOTALL)


class PreviewError(Exception):
    """Prometheus unreachable or a query rejected; the message is one line."""


@dataclass(frozen=True)
class Window:
    end: float
    range_s: float
    scrape_s: float

    @property
    def start(self) -> float:
        return self.end - self.range_s

    @property
    def step(self) -> float:
        return max(self.scrape_s, math.ceil(self.range_s / POINTS))

    @property
    def rate_interval_s(self) -> float:
        """Grafana's $__rate_interval: a step plus a scrape, at least four scrapes."""
        return max(self.step + self.scrape_s, 4 * self.scrape_s)

    def builtins(self) -> dict[str, str]:
        """Grafana's built-in variables for this range."""
        rate = self.rate_interval_s
        return {
            "__range_s": str(int(self.range_s)),
            "__range": prometheus_duration(self.range_s),
            "__rate_interval": prometheus_duration(rate),
            "__interval": prometheus_duration(self.step),
        }


class Prometheus:
    """The few calls of Prometheus' HTTP API the preview makes."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: list[tuple[str, str]]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise PreviewError(f"Prometheus rejected {params[0][1]!r}: {_error(detail)}") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PreviewError(f"cannot reach Prometheus at {self.url}: {reason}") from exc
        return body["data"]

    def instant(self, expr: str, at: float) -> list[dict[str, Any]]:
        data = self._get("/api/v1/query", [("query", expr), ("time", repr(at))])
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def range(self, expr: str, window: Window) -> list[dict[str, Any]]:
        params = [("query", expr), ("start", repr(window.start)), ("end", repr(window.end))]
        return list(
            self._get("/api/v1/query_range", [*params, ("step", repr(window.step))])["result"]
        )

    def label_values(self, label: str, match: str, window: Window) -> list[str]:
        params = [("match[]", match), ("start", repr(window.start)), ("end", repr(window.end))]
        return sorted(self._get(f"/api/v1/label/{label}/values", params))


def _error(body: str) -> str:
    try:
        return str(json.loads(body).get("error", body)).splitlines()[0]
    except (ValueError, AttributeError):
        return body.strip().splitlines()[0] if body.strip() else "no detail"


def substitute(text: str, variables: Mapping[str, str]) -> str:
    """`$name`, `${name}` and `[[name]]` replaced; longest names first ($__range_s)."""
    for name in sorted(variables, key=len, reverse=True):
        value = variables[name]
        text = text.replace("${" + name + "}", value).replace("[[" + name + "]]", value)
        pattern = r"\$" + re.escape(name) + r"(?![A-Za-z0-9_])"
        # a function, so a backslash in the value is not read as a group reference
        text = re.sub(pattern, functools.partial(_literal, value), text)
    return text


def _literal(value: str, _match: re.Match[str]) -> str:
    return value


def resolve_variables(
    dashboard: dict[str, Any],
    prometheus: Prometheus,
    window: Window,
    chosen: Mapping[str, str],
) -> dict[str, str]:
    """Every template variable's value, in the dashboard's order (see module docstring)."""
    values = window.builtins()
    for variable in dashboard.get("templating", {}).get("list", []):
        name = variable["name"]
        if name in chosen:
            values[name] = chosen[name]
        elif variable.get("type") == "datasource":
            values[name] = prometheus.url
        elif variable.get("multi") or variable.get("includeAll"):
            values[name] = ".*"
        else:
            values[name] = _first_value(variable, prometheus, window, values)
    return values


def _first_value(
    variable: dict[str, Any], prometheus: Prometheus, window: Window, values: Mapping[str, str]
) -> str:
    query = variable.get("query")
    text = query.get("query", "") if isinstance(query, dict) else str(query or "")
    match = _LABEL_VALUES.match(substitute(text, values))
    if match is None:
        return ".*"
    found = prometheus.label_values(match.group(2), match.group(1), window)
    return found[0] if found else ".*"


@dataclass
class PanelResult:
    title: str
    kind: str
    series: list[Series] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    unit: str = "none"
    # the query each series came from, in the order of `series`
    series_queries: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.series


def query_panel(
    panel: dict[str, Any], prometheus: Prometheus, window: Window, variables: Mapping[str, str]
) -> PanelResult:
    """Run every target of `panel`; their series together, each with its legend."""
    result = PanelResult(panel.get("title", ""), panel.get("type", ""), unit=unit_of(panel))
    for target in panel.get("targets", []):
        if target.get("hide") or not target.get("expr"):
            continue
        expr = substitute(target["expr"], variables)
        result.queries.append(expr)
        template = target.get("legendFormat", "")
        before = len(result.series)
        if target.get("instant") or panel.get("type") in ("stat", "gauge", "bargauge", "table"):
            for item in prometheus.instant(expr, window.end):
                t, v = item["value"]
                labels = item["metric"]
                result.series.append(
                    Series(legend(template, labels), labels, [(float(t), float(v))])
                )
        else:
            for item in prometheus.range(expr, window):
                labels = item["metric"]
                points = [(float(t), float(v)) for t, v in item["values"]]
                result.series.append(Series(legend(template, labels), labels, points))
        result.series_queries.extend([expr] * (len(result.series) - before))
    return result


def drawn_series(drawn: Mapping[str, list[PanelResult]]) -> list[Drawn]:
    """Every series of every panel drawn, with its query and unit (preview_maxima.py)."""
    return [
        Drawn(name, panel.title, panel.unit, expr, series)
        for name, panels in drawn.items()
        for panel in panels
        for expr, series in zip(panel.series_queries, panel.series, strict=True)
    ]


def panels_of(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Drawable panels, those inside collapsed rows included; row headers are not."""
    found = []
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return [p for p in found if p.get("type") in DRAWERS]


def unit_of(panel: dict[str, Any]) -> str:
    return str(panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "none"))


def draw(dashboard: dict[str, Any], results: list[tuple[dict[str, Any], PanelResult]]) -> bytes:
    """The dashboard as one PNG: each panel at its gridPos, drawn or marked No data."""
    from nvwatch.report.style import figure_png

    return figure_png(build_figure(dashboard, results))


def figure_height(results: list[tuple[dict[str, Any], PanelResult]]) -> float:
    """The figure's height in inches: the panels' rows and the dashboard title above."""
    rows = max((p["gridPos"]["y"] + p["gridPos"]["h"] for p, _ in results), default=1)
    return rows * GRID_UNIT_INCHES + TITLE_INCHES


def panel_box(grid_pos: Mapping[str, int], height: float) -> tuple[float, float, float, float]:
    """(left, bottom, width, height) of a panel's cell on the grid, in figure fractions of
    a figure `height` inches tall: all that the panel may draw on."""
    left, width = grid_pos["x"] / GRID_COLUMNS, grid_pos["w"] / GRID_COLUMNS
    bottom = 1 - (TITLE_INCHES + (grid_pos["y"] + grid_pos["h"]) * GRID_UNIT_INCHES) / height
    return left, bottom, width, grid_pos["h"] * GRID_UNIT_INCHES / height


def build_figure(
    dashboard: dict[str, Any], results: list[tuple[dict[str, Any], PanelResult]]
) -> Figure:
    """The figure `draw` renders: the dashboard's title, then every panel in its cell."""
    from matplotlib import rcParams
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from nvwatch.report.style import LIMIT_COLOUR, require

    require()
    from matplotlib.figure import Figure

    height = figure_height(results)
    # at the PNG's resolution, so that what is measured here is what the PNG shows
    dpi = rcParams["savefig.dpi"]
    figure = Figure(
        figsize=(FIGURE_WIDTH_INCHES, height),
        dpi=dpi if isinstance(dpi, (int, float)) else rcParams["figure.dpi"],
    )
    FigureCanvasAgg(figure)  # its renderer measures the panels' texts
    title_y = 1 - 0.12 / height  # in inches from the top, however tall the dashboard
    figure.suptitle(
        dashboard.get("title", ""), x=0.01, y=title_y, ha="left", va="top", fontsize=13,
        weight="bold",
    )  # fmt: skip
    for panel, result in results:
        cell = panel_box(panel["gridPos"], height)
        left, bottom, width, high = cell
        box = (left + 0.07 * width, bottom + 0.3 / height, 0.9 * width,
               high - 0.62 / height)  # fmt: skip
        first = len(figure.axes)
        axes = figure.add_axes(box)
        title = axes.set_title(result.title, fontsize=9, loc="left")
        axes.tick_params(labelsize=6)
        if result.empty:
            axes.axis("off")
            axes.text(0.5, 0.5, "No data", ha="center", va="center", color=LIMIT_COLOUR)
        else:
            DRAWERS[result.kind](axes, panel, result.series, unit_of(panel))
        # the drawer's axes and any it added (a heatmap's colour bar)
        fit_panel(figure.axes[first:], cell, title)
    return figure


_PAD_PX = 3.0  # between a panel's text and the edge of its cell


def fit_panel(group: list[Axes], cell: tuple[float, float, float, float], title: Text) -> None:
    """Move a panel's axes in until all they draw (tick labels, legends, texts) stays in
    the panel's cell, below the title; then the title, from where the axes began, cut
    to the cell's width with an ellipsis, as Grafana cuts a long panel title."""
    from matplotlib.transforms import Bbox

    figure = group[0].figure
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    wide, high = figure.bbox.width, figure.bbox.height
    left, bottom, width, _height = cell
    frame = Bbox.union([a.get_position() for a in group])
    title_left = frame.x0 * wide
    room = Bbox.from_extents(
        left * wide + _PAD_PX, bottom * high + _PAD_PX, (left + width) * wide - _PAD_PX,
        frame.y1 * high,
    )  # fmt: skip
    title.set_visible(False)
    for _ in range(3):  # tick labels change as the axes do: again until they settle
        drawn = Bbox.union([b for a in group if (b := a.get_tightbbox(renderer)) is not None])
        # pixels to take off each side: left, bottom, right, top
        cut = [max(0.0, room.x0 - drawn.x0), max(0.0, room.y0 - drawn.y0),
               max(0.0, drawn.x1 - room.x1), max(0.0, drawn.y1 - room.y1)]  # fmt: skip
        if max(cut) < 0.5:
            break
        frame = Bbox.union([a.get_position() for a in group])
        inside = Bbox.from_extents(frame.x0 + cut[0] / wide, frame.y0 + cut[1] / high,
                                   frame.x1 - cut[2] / wide, frame.y1 - cut[3] / high)  # fmt: skip
        for axes in group:
            axes.set_position(_moved(axes.get_position(), frame, inside))
    title.set_visible(True)
    axes = group[0]
    title.set_x((title_left - axes.bbox.x0) / axes.bbox.width)
    points = (room.x1 - title_left) * 72 / figure.dpi
    size, weight = float(title.get_fontsize()), str(title.get_fontweight())
    title.set_text(shorten(title.get_text(), points, size, weight))


def _moved(box: Bbox, frame: Bbox, inside: Bbox) -> Bbox:
    """`box`, a part of `frame`, as the same part of `inside`."""
    from matplotlib.transforms import Bbox, BboxTransform

    return Bbox(BboxTransform(frame, inside).transform(box.get_points()))


def preview(
    dashboards: Mapping[str, dict[str, Any]],
    prometheus: Prometheus,
    out: Path,
    *,
    range_s: float,
    scrape_s: float = 15.0,
    chosen: Mapping[str, str] | None = None,
    end: float | None = None,
) -> dict[str, list[PanelResult]]:
    """Draw every dashboard to `out`/<name>.png; returns each one's panel results."""
    window = Window(time.time() if end is None else end, range_s, scrape_s)
    out.mkdir(parents=True, exist_ok=True)
    drawn: dict[str, list[PanelResult]] = {}
    for name, dashboard in dashboards.items():
        variables = resolve_variables(dashboard, prometheus, window, chosen or {})
        results = [(p, query_panel(p, prometheus, window, variables)) for p in panels_of(dashboard)]
        (out / (Path(name).stem + ".png")).write_bytes(draw(dashboard, results))
        drawn[name] = [r for _, r in results]
    return drawn
