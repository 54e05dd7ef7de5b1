"""Turn grafanalib 0.7.1's dashboard JSON into the shape Grafana 10-12 reads.

grafanalib still emits pre-Grafana-9 details: schemaVersion 12, `rows`/`style`/
`hideControls`, `span`/`height` on panels, and a legacy body for gauge, bargauge and
heatmap. Grafana migrates some of that on load and silently drops the rest, so the
dashboards are normalised here once, in one tested step.
"""

from __future__ import annotations

import copy
from typing import Any

JsonDict = dict[str, Any]

SCHEMA_VERSION = 39
# The Grafana versions the dashboards are written for, as the README states them; the
# lower bound is the import's `__requires`.
GRAFANA_VERSIONS = "10.4 to 12.x"
GRAFANA_MIN_VERSION = "10.4.0"
# grafana.com import: Grafana asks for a Prometheus data source for this input and writes
# its uid wherever "${DS_PROMETHEUS}" appears, which is only the `$datasource` variable's
# default; every panel, target and query variable reads the variable, so a viewer can
# switch data sources.
DATASOURCE_INPUT = "DS_PROMETHEUS"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
MODERN_PANEL_TYPES = frozenset(
    {"timeseries", "stat", "gauge", "bargauge", "heatmap", "table", "state-timeline"}
)
GRID_WIDTH = 24

_LEGACY_DASHBOARD_KEYS = ("rows", "style", "hideControls", "sharedCrosshair", "gnetId")
_LEGACY_PANEL_KEYS = (
    "span",
    "height",
    "minSpan",
    "error",
    "cacheTimeout",
    "editable",
    "hideTimeOverride",
    "repeat",
    "repeatDirection",
    "maxPerRow",
    "interval",
    "timeFrom",
    "timeShift",
)
_LEGACY_TARGET_KEYS = ("query", "target", "metric", "step", "intervalFactor")
_HEATMAP_LEGACY_KEYS = (
    "cards",
    "color",
    "dataFormat",
    "heatmap",
    "hideZeroBuckets",
    "highlightCards",
    "legend",
    "reverseYBuckets",
    "tooltip",
    "xAxis",
    "xBucketNumber",
    "xBucketSize",
    "yAxis",
    "yBucketBound",
    "yBucketNumber",
    "yBucketSize",
)


def _reduce_options(calc: str) -> JsonDict:
    return {"calcs": [calc], "fields": "", "values": False}


def _field_defaults(panel: JsonDict) -> JsonDict:
    defaults: JsonDict = panel.setdefault("fieldConfig", {}).setdefault("defaults", {})
    panel["fieldConfig"].setdefault("overrides", [])
    return defaults


def _modern_thresholds(defaults: JsonDict) -> None:
    """Legacy threshold entries carry op/yaxis/line/index; Grafana 10 wants color/value."""
    thresholds = defaults.get("thresholds") or {}
    steps = thresholds.get("steps") or []
    clean = []
    for step in steps:
        value = step.get("value")
        clean.append({"color": step["color"], "value": None if value == "null" else value})
    if not clean:
        clean = [{"color": "green", "value": None}]
    defaults["thresholds"] = {"mode": thresholds.get("mode", "absolute"), "steps": clean}


def _modernise_panel(panel: JsonDict) -> JsonDict:
    kind = panel["type"]
    if kind not in MODERN_PANEL_TYPES:
        raise ValueError(f"panel {panel.get('title')!r}: legacy panel type {kind!r}")
    for key in _LEGACY_PANEL_KEYS:
        panel.pop(key, None)
    defaults = _field_defaults(panel)
    if kind in ("gauge", "bargauge"):
        # grafanalib puts gauge/bargauge settings in the Grafana 6 shape
        for key in ("calcs", "title", "limit", "override", "values"):
            defaults.pop(key, None)
        if not defaults.get("links"):
            defaults.pop("links", None)
        for key in ("showThresholdLabels", "showThresholdMarkers"):
            panel.pop(key, None)
        options = panel.get("options") or {}
        options.pop("fieldOptions", None)
        options.setdefault("reduceOptions", _reduce_options("lastNotNull"))
        options.setdefault("orientation", "horizontal" if kind == "bargauge" else "auto")
        if kind == "bargauge":
            options.setdefault("displayMode", "gradient")
        options.setdefault("showThresholdMarkers", True)
        panel["options"] = options
    elif kind == "heatmap":
        for key in _HEATMAP_LEGACY_KEYS:
            panel.pop(key, None)
        options = panel.get("options") or {}
        if not isinstance(options, dict):
            options = {}
        options.update(
            {
                # the series are already one row per GPU/link; no bucketing by Grafana
                "calculate": False,
                "cellGap": 1,
                "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
                "yAxis": {"axisPlacement": "left", "unit": defaults.get("unit", "")},
                "tooltip": {"mode": "single", "yHistogram": False},
                "legend": {"show": True},
                "rowsFrame": {"layout": "auto"},
            }
        )
        panel["options"] = options
    elif kind == "stat":
        options = panel.setdefault("options", {})
        options["reduceOptions"] = _reduce_options("lastNotNull")
        defaults.pop("noValue", None)
    _modern_thresholds(defaults)
    for mapping in (defaults, defaults.get("custom") or {}):
        for key in [k for k, v in mapping.items() if v is None]:
            del mapping[key]
    panel["datasource"] = dict(DATASOURCE)
    for target in panel.get("targets", []):
        for key in _LEGACY_TARGET_KEYS:
            target.pop(key, None)
        target["datasource"] = dict(DATASOURCE)
        target["editorMode"] = "code"
        target["range"] = not target.get("instant", False)
    for key in [k for k, v in panel.items() if v is None]:
        del panel[key]
    return panel


def _check_layout(panels: list[JsonDict]) -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in panels:
        pos = panel.get("gridPos")
        if not pos:
            raise ValueError(f"panel {panel['title']!r} has no gridPos")
        if pos["x"] < 0 or pos["x"] + pos["w"] > GRID_WIDTH or pos["w"] <= 0 or pos["h"] <= 0:
            raise ValueError(f"panel {panel['title']!r}: gridPos {pos} outside the grid")
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                if (x, y) in taken:
                    raise ValueError(
                        f"panels {taken[(x, y)]!r} and {panel['title']!r} overlap at {x},{y}"
                    )
                taken[(x, y)] = panel["title"]


def _datasource_variable() -> JsonDict:
    # no fixed name or regex: any Prometheus data source; the import's choice by default
    # (provisioned from file, with "${DS_PROMETHEUS}" unreplaced, Grafana falls back to
    # the default Prometheus data source)
    default = "${" + DATASOURCE_INPUT + "}"
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {"selected": False, "text": default, "value": default},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }


def _modern_variable(var: JsonDict) -> JsonDict:
    out = {k: v for k, v in var.items() if v is not None}
    # an empty `current` makes Grafana show a blank selection instead of the first value
    for key in (
        "current",
        "useTags",
        "tagsQuery",
        "tagValuesQuery",
        "auto",
        "auto_min",
        "auto_count",
    ):
        out.pop(key, None)
    if out.get("type") == "query":
        out["datasource"] = dict(DATASOURCE)
        out["definition"] = out["query"]
        out["query"] = {
            "query": out["query"],
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        }
    return out


def _requires(panels: list[JsonDict]) -> list[JsonDict]:
    """What grafana.com import checks: the Grafana version, data source and panel plugins."""
    kinds = sorted({str(p["type"]) for p in panels})
    return [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_MIN_VERSION},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        *({"type": "panel", "id": kind, "name": kind, "version": ""} for kind in kinds),
    ]


def modernise(dashboard: JsonDict, datasource_name: str) -> JsonDict:
    """A Grafana 10-12 dashboard from grafanalib's JSON (the input is not modified).

    `datasource_name` is what the import dialog calls the data source it asks for.
    """
    out = copy.deepcopy(dashboard)
    for key in _LEGACY_DASHBOARD_KEYS:
        out.pop(key, None)
    out["schemaVersion"] = SCHEMA_VERSION
    out["graphTooltip"] = 1  # shared crosshair: compare GPUs of a node at one instant
    out["id"] = None
    out["__inputs"] = [
        {
            "name": DATASOURCE_INPUT,
            "label": datasource_name,
            "description": "Prometheus that scrapes the nvwatch agents",
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    variables = [
        _modern_variable(v)
        for v in out.get("templating", {}).get("list", [])
        if v.get("type") != "datasource"
    ]
    out["templating"] = {"list": [_datasource_variable(), *variables]}
    out["annotations"] = {
        "list": [
            {
                "builtIn": 1,
                "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            }
        ]
    }
    panels = [_modernise_panel(p) for p in out.get("panels", [])]
    for number, panel in enumerate(panels, start=1):
        panel["id"] = number
    _check_layout(panels)
    out["panels"] = panels
    out["__requires"] = _requires(panels)
    return out
