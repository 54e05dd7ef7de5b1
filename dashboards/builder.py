"""Small helpers over grafanalib: panels with unit, thresholds and description, laid out
on Grafana's 24-column grid, and the template variables every dashboard shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from grafanalib import core as g

from nvwatch.common.durations import parse_duration
from nvwatch.dashboards.links import DataLink, field_config_links, from_label, label_value
from nvwatch.dashboards.thresholds import OK, Steps
from nvwatch.mixin.config import MixinConfig

# Info-style series (value always 1) shown as a table of their labels only.
HIDE_TIME_AND_VALUE: list[dict[str, Any]] = [
    {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True}}}
]
# Series of one panel stacked into a total, e.g. GPUs per throttle reason.
STACKED: dict[str, Any] = {"drawStyle": "line", "fillOpacity": 20, "stacking": {"mode": "normal"}}


@dataclass(frozen=True)
class Q:
    """One PromQL target."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


_KINDS: dict[str, Any] = {
    "timeseries": g.TimeSeries,
    "stat": g.Stat,
    "gauge": g.GaugePanel,
    "bargauge": g.BarGauge,
    "heatmap": g.Heatmap,
    "table": g.Table,
    "state-timeline": g.StateTimeline,
}


@dataclass
class Grid:
    """Places panels left to right, wrapping at 24 columns, so nothing overlaps."""

    x: int = 0
    y: int = 0
    row_height: int = 0
    panels: list[Any] = field(default_factory=list)

    def add(
        self,
        kind: str,
        title: str,
        description: str,
        unit: str,
        queries: Sequence[Q],
        *,
        w: int = 12,
        h: int = 8,
        steps: Steps = OK,
        min_: float | None = None,
        max_: float | None = None,
        options: dict[str, Any] | None = None,
        custom: dict[str, Any] | None = None,
        mappings: list[dict[str, Any]] | None = None,
        transformations: list[dict[str, Any]] | None = None,
        links: Sequence[DataLink] = (),
    ) -> None:
        if self.x + w > 24:
            self.newline()
        defaults: dict[str, Any] = {"unit": unit, "thresholds": _thresholds(steps)}
        # unset (or empty) keys stay out so Grafana applies its own defaults
        optional = {"min": min_, "max": max_, "custom": custom, "mappings": mappings}
        optional = {k: v for k, v in optional.items() if v is not None and v != {} and v != []}
        defaults.update(optional)
        data_links, overrides = field_config_links(links)
        if data_links:
            defaults["links"] = data_links
        extra: dict[str, Any] = {"fieldConfig": {"defaults": defaults}}
        if overrides:
            extra["fieldConfig"]["overrides"] = overrides
        if options:
            extra["options"] = options
        panel = _KINDS[kind](
            title=title,
            description=description,
            targets=_targets(queries),
            gridPos=g.GridPos(h=h, w=w, x=self.x, y=self.y),
            transformations=transformations or [],
            extraJson=extra,
        )
        self.panels.append(panel)
        self.x += w
        self.row_height = max(self.row_height, h)

    def newline(self) -> None:
        self.y += self.row_height
        self.x = 0
        self.row_height = 0


def _targets(queries: Sequence[Q]) -> list[g.Target]:
    return [
        g.Target(
            expr=q.expr,
            legendFormat=q.legend,
            refId=chr(ord("A") + i),
            instant=q.instant,
            format="table" if q.table else "time_series",
        )
        for i, q in enumerate(queries)
    ]


def _thresholds(steps: Steps) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def variable(
    cfg: MixinConfig, name: str, label: str, *, multi: bool = True, offer_all: bool | None = None
) -> g.Template:
    """A label_values() variable scoped by the variables before it. `offer_all` (by
    default as `multi`) adds "All", which Grafana then selects when the dashboard opens;
    without it Grafana selects the first value."""
    include_all = multi if offer_all is None else offer_all
    scope = [cfg.job_selector]
    if name != cfg.cluster_label:
        scope.append(f'{cfg.cluster_label}=~"$cluster"')
    if name not in (cfg.cluster_label, cfg.instance_label):
        scope.append(f'{cfg.instance_label}=~"$instance"')
    metric = "up" if name in (cfg.cluster_label, cfg.instance_label) else "nvwatch_gpu_up"
    var_name = {cfg.cluster_label: "cluster", cfg.instance_label: "instance"}.get(name, name)
    return g.Template(
        name=var_name,
        label=label,
        query=f"label_values({metric}{{{', '.join(scope)}}}, {name})",
        multi=multi,
        includeAll=include_all,
        allValue=".*" if include_all else None,
        refresh=2,
        sort=1,
    )


# Adds one row of panels to the grid; a dashboard is a list of these, top to bottom.
PanelRow = Callable[[Grid, MixinConfig], None]


def dashboard(
    cfg: MixinConfig,
    uid: str,
    title: str,
    description: str,
    rows: Sequence[PanelRow],
    variables: Sequence[g.Template],
    *,
    time_from: str = "now-6h",
) -> g.Dashboard:
    """The dashboard whose panels `rows` lay out, top to bottom, on one grid."""
    grid = Grid()
    for add_panels in rows:
        add_panels(grid, cfg)
    return g.Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=list(cfg.dashboard_tags),
        timezone="browser",
        refresh="1m",
        time=g.Time(time_from, "now"),
        panels=grid.panels,
        templating=g.Templating(list=list(variables)),
    )


# --- PromQL and legend pieces every dashboard uses -----------------------------------


def legend(label: str) -> str:
    """Grafana legend template showing one label: `{{instance}}`."""
    return "{{" + label + "}}"


def rate(series: str) -> str:
    """Per-second rate over Grafana's own window, which follows the scrape interval."""
    return f"rate({series}[$__rate_interval])"


def integral_in_range(cfg: MixinConfig, series: str) -> str:
    """`series` (a recording rule's gauge, or an expression over such rules) integrated
    over the dashboard's time range: the sum of its value x seconds, over the part of the
    range that has data (W -> J, GPUs -> GPU-seconds).

    The expression is read at every rule evaluation interval of the range (a subquery)
    and each value stands for one interval. Multiplying a mean by the whole range
    (`avg_over_time(x[$__range]) * $__range_s`) instead counts the range's hours without
    data as if they had the mean: a 24 h range over a fleet scraped for 6 h showed four
    times its energy. Summing the recorded samples (`sum_over_time(x[$__range])`) times
    the interval is the same integral only while the rules run at this config's
    interval; rules backfilled over a history (`alerts backfill-rules`) are recorded once
    per history step, and each point here takes the latest of them (Prometheus'
    lookback), where `sum_over_time` would count each 15-minute sample as one interval.
    Between points the value is held, not interpolated: what was sampled, no more. A
    recorded rate has no value across a scrape gap longer than its window, so energy
    used in such a gap is not counted."""
    interval = cfg.evaluation_interval
    seconds = parse_duration(interval, "evaluation_interval")
    return f"sum_over_time(({series})[$__range:{interval}]) * {seconds:g}"


def kwh_in_range(cfg: MixinConfig, watts: str) -> str:
    """Energy in kWh over the part of the dashboard's range that has data, from a power
    (W, or J/s from an energy counter's recorded rate)."""
    return f"{integral_in_range(cfg, watts)} / 3600000"


def peak_in_range(cfg: MixinConfig, series: str) -> str:
    """The highest value of `series` in the dashboard's range, read at every rule
    evaluation: a coarser step (`$__interval` is half an hour on a 30-day range) steps
    over a peak shorter than itself."""
    return f"max_over_time(({series})[$__range:{cfg.evaluation_interval}])"


def cluster_scope(cfg: MixinConfig) -> str:
    """Selector of the fleet dashboards: recording rules of the chosen clusters."""
    return f'{{{cfg.cluster_label}=~"$cluster"}}'


def node_matchers(cfg: MixinConfig) -> tuple[str, str]:
    """Matchers of the per-node dashboards: the chosen cluster and node(s)."""
    return f'{cfg.cluster_label}=~"$cluster"', f'{cfg.instance_label}=~"$instance"'


def node_series_link(
    cfg: MixinConfig, uid: str, what: str, *, ref_id: str | None = None
) -> DataLink:
    """A data link titled "`what` of NODE" from a series carrying cluster and node labels
    to dashboard `uid` for that node (the recording rules keep both labels, so fleet
    panels can drill down)."""
    return DataLink(
        uid,
        f"{what} of {label_value(cfg.instance_label)}",
        (from_label("cluster", cfg.cluster_label), from_label("instance", cfg.instance_label)),
        ref_id=ref_id,
    )
