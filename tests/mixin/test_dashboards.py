"""Dashboard lint and the Grafana 10-12 post-processing step."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvwatch.dashboards import thresholds as t
from nvwatch.dashboards.build import build_all
from nvwatch.dashboards.grafana import DATASOURCE, MODERN_PANEL_TYPES, SCHEMA_VERSION, modernise
from nvwatch.mixin.config import MixinConfig, NodeClass
from tests.mixin.conftest import REPO

LEGACY_KEYS = {"rows", "style", "hideControls", "sharedCrosshair"}
LEGACY_PANEL_KEYS = {"span", "height", "minSpan", "error", "cacheTimeout"}


def test_nine_dashboards(dashboards: dict[str, dict[str, Any]]) -> None:
    assert len(dashboards) == 9
    assert len({d["uid"] for d in dashboards.values()}) == 9


@pytest.mark.parametrize(
    "name",
    [
        "nvwatch-cluster-overview.json",
        "nvwatch-node.json",
        "nvwatch-nvlink.json",
        "nvwatch-infiniband.json",
        "nvwatch-thermal-power.json",
        "nvwatch-power-cooling.json",
        "nvwatch-capacity-review.json",
        "nvwatch-jobs.json",
        "nvwatch-queue.json",
    ],
)
def test_dashboard_lint(dashboards: dict[str, dict[str, Any]], name: str) -> None:
    dash = dashboards[name]
    assert dash["schemaVersion"] == SCHEMA_VERSION
    assert not LEGACY_KEYS & set(dash)
    assert dash["__inputs"][0]["pluginId"] == "prometheus"
    variables = dash["templating"]["list"]
    assert variables[0]["name"] == "datasource" and variables[0]["type"] == "datasource"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dash["panels"]:
        title = panel["title"]
        assert panel["type"] in MODERN_PANEL_TYPES, title
        assert not LEGACY_PANEL_KEYS & set(panel), title
        assert panel["datasource"] == DATASOURCE, title
        assert all(t["datasource"] == DATASOURCE for t in panel["targets"]), title
        assert panel["targets"], title
        assert len(panel["description"]) > 40, title
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults["unit"], title
        assert defaults["thresholds"]["steps"][0]["value"] is None, title
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, title
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{title} overlaps another panel"
                cells.add((x, y))
    for var in variables[1:]:
        assert var["datasource"] == DATASOURCE


def _legacy_dashboard(panels: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "title": "t",
        "rows": [],
        "style": "dark",
        "hideControls": False,
        "schemaVersion": 12,
        "templating": {"list": [{"name": "datasource", "type": "datasource", "current": {}}]},
        "panels": panels,
    }


def _panel(kind: str, x: int = 0, y: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "title": f"{kind}@{x},{y}",
        "span": 6,
        "height": None,
        "gridPos": {"h": 4, "w": 6, "x": x, "y": y},
        "targets": [{"expr": "up", "refId": "A", "step": 10, "intervalFactor": 2}],
        "fieldConfig": {
            "defaults": {
                "unit": "none",
                "thresholds": {
                    "mode": "absolute",
                    "steps": [{"op": "gt", "color": "green", "value": "null", "index": 0}],
                },
            }
        },
        **extra,
    }


def test_modernise_rewrites_legacy_shapes() -> None:
    legacy = _legacy_dashboard(
        [
            _panel("gauge", options={"fieldOptions": {"calcs": ["mean"]}}),
            _panel("heatmap", x=6, cards={}, xAxis={}, yBucketBound=None),
        ]
    )
    out = modernise(legacy, "Prom")
    assert out["schemaVersion"] == SCHEMA_VERSION
    assert not LEGACY_KEYS & set(out)
    assert "rows" in legacy, "the input must not be modified"
    gauge, heatmap = out["panels"]
    assert [gauge["id"], heatmap["id"]] == [1, 2]
    assert "fieldOptions" not in gauge["options"]
    assert gauge["options"]["reduceOptions"]["calcs"] == ["lastNotNull"]
    assert gauge["fieldConfig"]["defaults"]["thresholds"]["steps"] == [
        {"color": "green", "value": None}
    ]
    assert "cards" not in heatmap and "xAxis" not in heatmap
    assert heatmap["options"]["calculate"] is False
    assert gauge["targets"][0] == {
        "expr": "up",
        "refId": "A",
        "datasource": DATASOURCE,
        "editorMode": "code",
        "range": True,
    }
    assert "span" not in gauge and "height" not in gauge
    assert out["__inputs"][0]["label"] == "Prom"
    assert out["templating"]["list"][0]["current"]["value"] == "${DS_PROMETHEUS}"


def test_modernise_rejects_overlaps_and_legacy_types() -> None:
    with pytest.raises(ValueError, match="overlap"):
        modernise(_legacy_dashboard([_panel("stat"), _panel("stat", x=3, y=2)]), "P")
    with pytest.raises(ValueError, match="legacy panel type 'graph'"):
        modernise(_legacy_dashboard([_panel("graph")]), "P")
    with pytest.raises(ValueError, match="outside the grid"):
        modernise(_legacy_dashboard([_panel("stat", x=20)]), "P")


def _steps(dashboards: dict[str, dict[str, Any]]) -> dict[str, list[tuple[Any, str]]]:
    return {
        f"{name}: {panel['title']}": [
            (s["value"], s["color"])
            for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        ]
        for name, dash in dashboards.items()
        for panel in dash["panels"]
    }


def test_every_tunable_colour_threshold_follows_the_config(
    cfg: MixinConfig, dashboards: dict[str, dict[str, Any]]
) -> None:
    """Move every threshold the dashboards read; only steps that encode a meaning stay."""
    moved = cfg.with_overrides(
        dashboard_temperature_critical_celsius=90.0,
        gpu_temp_margin_celsius=3.0,
        dashboard_load_warn_ratio=0.7,
        dashboard_load_critical_ratio=0.9,
        dashboard_utilization_poor_ratio=0.4,
        dashboard_utilization_good_ratio=0.8,
        dashboard_headroom_low_ratio=0.15,
        dashboard_headroom_ample_ratio=0.4,
        dashboard_ib_rate_ok_gbps=200.0,
        node_power_budget_fraction=0.8,
        pcie_replay_rate_per_second=0.2,
        nvlink_error_rate_per_second=2.0,
        ib_error_rate_per_second=0.2,
        ib_transmit_wait_ratio=0.1,
        starvation_host_iowait=0.3,
        fan_stopped_rpm=800.0,
        node_power_max_fraction=0.8,
        dashboard_inlet_headroom_celsius=5.0,
        scheduler_wait_while_idle="1h",
        scheduler_short_of_gpus_fraction=0.6,
        node_classes=(
            NodeClass("x", gpus=8, nvlinks_per_gpu=6, ib_ports=8, ib_rate_bytes_per_second=None),
        ),
    )
    structural = [
        [(v, c) for v, c in steps]
        for steps in (
            t.OK,
            t.ANY_BAD,
            t.ANY_WARN,
            t.FLAG_ACTIVE,
            t.IB_PORT_ACTIVE,
            t.AT_LEAST_ONE,
            t.SENSOR_STATE,
            t.STANDS_OUT,
        )
    ]
    before, after = _steps(dashboards), _steps(build_all(moved))
    assert before.keys() == after.keys()
    for panel, steps in before.items():
        if steps == after[panel]:
            assert steps in structural, f"{panel}: colour steps {steps} ignore the mixin config"


TEMPERATURE_PANELS = (
    "nvwatch-node.json: GPU and HBM temperature vs thresholds",
    "nvwatch-cluster-overview.json: Hottest nodes (hottest GPU of each)",
)


def _colour(steps: list[tuple[Any, str]], value: float) -> str:
    """The colour Grafana draws `value` in: the last step at or below it."""
    return [colour for limit, colour in steps if limit is None or value >= limit][-1]


def _slowdowns() -> dict[str, float]:
    """Each simulated board's slowdown temperature (what NVML's threshold reads)."""
    from nvwatch.sim.profiles import PROFILES

    return {g.name: float(g.temp_slowdown_c) for p in PROFILES.values() for g in p.gpus}


@pytest.mark.parametrize("panel", TEMPERATURE_PANELS)
def test_temperature_colours_warn_where_the_alert_fires(
    cfg: MixinConfig,
    dashboards: dict[str, dict[str, Any]],
    promtool: str,
    tmp_path: Path,
    panel: str,
) -> None:
    """Prometheus evaluates NvwatchGpuTemperatureNearSlowdown's expression (from the
    generated rule file) on GPUs of every simulated board at temperatures around the
    margin, beside a series naming the GPUs the panel does not draw green: no GPU the
    alert selects is green, and on the board whose slowdown is the panel's red line
    every GPU drawn orange or red is selected, at exactly slowdown - margin too (NVML
    reports whole degrees, so a GPU can sit there: both the step and the alert include
    it)."""
    steps = _steps(dashboards)[panel]
    rules = yaml.safe_load((REPO / "alerts/generated/nvwatch-alerts.yaml").read_text())
    (expr,) = [
        r["expr"]
        for g in rules["groups"]
        for r in g["rules"]
        if r.get("alert") == "NvwatchGpuTemperatureNearSlowdown"
    ]
    critical = cfg.dashboard_temperature_critical_celsius
    margin = cfg.gpu_temp_margin_celsius
    assert critical in _slowdowns().values()  # a board slows down at the red line
    series = []
    for board, slowdown in _slowdowns().items():
        # every board is red from where it slows down
        assert _colour(steps, slowdown) == "red", (board, steps)
    for slowdown in sorted(set(_slowdowns().values())):
        for tenths in range(round((critical - margin - 2) * 10), round(slowdown * 10) + 11, 5):
            celsius = tenths / 10
            gpu = f'gpu="{slowdown:g}/{celsius:g}", slowdown="{slowdown:g}"'
            labels = f'job="nvwatch", instance="n1", {gpu}'
            series += [
                {"series": f"nvwatch_gpu_temperature_celsius{{{labels}, sensor=\"gpu\"}}",
                 "values": f"{celsius}x3"},
                {"series": f'nvwatch_gpu_temperature_threshold_celsius{{{labels}, '
                           f'threshold="slowdown"}}', "values": f"{slowdown}x3"},
            ]  # fmt: skip
            if _colour(steps, celsius) != "green":
                series.append({"series": f"not_green{{{gpu}}}", "values": "1x3"})
    selected = f"count by (gpu, slowdown) ({expr})"
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": f"{selected} unless on (gpu) not_green",
                        "eval_time": "1m",
                        "exp_samples": [],
                    },
                    {
                        "expr": f'not_green{{slowdown="{critical:g}"}} unless on (gpu) {selected}',
                        "eval_time": "1m",
                        "exp_samples": [],
                    },
                ],
            }
        ],
    }
    # the boundary itself, where a whole-degree GPU can sit, is among the cases
    at_boundary = f'gpu="{critical:g}/{critical - margin:g}"'
    assert any(at_boundary in case["series"] for case in series)
    path = tmp_path / "temperature.yaml"
    path.write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
