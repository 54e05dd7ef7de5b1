"""Every PromQL expression of the mixin parses and reads only known metrics."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvwatch.agent.catalogue import SAMPLE_NAMES
from nvwatch.alerts.promql import cross_aggregated_names, metric_names
from nvwatch.alerts.recording import recorded_names, recording_groups
from nvwatch.alerts.rules import all_alerts
from nvwatch.mixin.config import MixinConfig

# Grafana's variables, replaced by values of the same syntactic kind before promtool
_GRAFANA_VARS = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range_s": "2592000",
    "$__range": "30d",
    "$cluster": "c1",
    "$instance": "n1",
    "$gpu": "0",
    "$user": "alice",
    "$job_id": "101",
    "$partition": "a100",
}


def _substitute(expr: str) -> str:
    for var, value in _GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unknown variable in {expr}"
    return expr


def _dashboard_exprs(dashboards: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for file, dash in dashboards.items():
        for panel in dash["panels"]:
            for target in panel["targets"]:
                out.append((f"{file}: {panel['title']}", target["expr"]))
    return out


def _allowed(cfg: MixinConfig) -> set[str]:
    return set(SAMPLE_NAMES) | set(recorded_names(cfg)) | {"up", "ALERTS"}


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('up{job="nvwatch"} == 0', {"up"}),
        (
            'sum by (cluster, instance) (rate(a_total{x=~"b|c"}[5m])) / on (instance) '
            "group_left () b:c:d offset 5m > 0.5",
            {"a_total", "b:c:d"},
        ),
        ("sum(x) without (gpu) + avg by (le) (y)", {"x", "y"}),
        ('label_replace(vector(8), "node_class", "dgx2", "", "")', set()),
        ("max_over_time((a / b)[$__range:1h]) * $__range_s / 3600000", {"a", "b"}),
        ("topk(10, m) or vector(0) unless n offset 1h30m", {"m", "n"}),
        ('{__name__="up", job="x"}', {"up"}),
        ("1 - nvwatch_gpu_up > bool 5e+10", {"nvwatch_gpu_up"}),
        ('count(ALERTS{alertstate="firing", alertname=~"Nvwatch.*"})', {"ALERTS"}),
    ],
)
def test_metric_name_tokenizer(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_dashboard_exprs_use_known_metrics(
    cfg: MixinConfig, dashboards: dict[str, dict[str, Any]]
) -> None:
    allowed = _allowed(cfg)
    for where, expr in _dashboard_exprs(dashboards):
        unknown = metric_names(expr) - allowed
        assert not unknown, f"{where}: unknown metrics {unknown} in {expr}"


def test_rule_exprs_use_known_metrics(cfg: MixinConfig) -> None:
    allowed = _allowed(cfg)
    exprs = [a.expr for a in all_alerts(cfg)]
    exprs += [r.expr for g in recording_groups(cfg) for r in g.rules]
    for expr in exprs:
        assert metric_names(expr) <= allowed, expr


def test_fleet_panels_read_recording_rules(dashboards: dict[str, dict[str, Any]]) -> None:
    """Cluster-wide dashboards must not aggregate raw per-GPU series at query time."""
    for file in ("nvwatch-cluster-overview.json", "nvwatch-thermal-power.json",
                 "nvwatch-power-cooling.json", "nvwatch-capacity-review.json"):  # fmt: skip
        for panel in dashboards[file]["panels"]:
            for target in panel["targets"]:
                raw = {n for n in metric_names(target["expr"]) if n.startswith("nvwatch_")}
                assert not raw, f"{file}: {panel['title']} reads raw {raw}"


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('count(nvwatch_nvlink_up{a="b"} == 0) or vector(0)', {"nvwatch_nvlink_up"}),
        ("sum by (instance, gpu) (nvwatch_nvlink_up)", set()),
        ("sum(rate(a_total[5m])) by (instance)", set()),
        ("sum without (gpu) (a) + topk(5, b:c:d > 0)", {"b:c:d"}),
        ("sum without (instance) (a)", {"a"}),
        ("max by (rack) (m) / on (instance) group_left () n", {"m"}),
    ],
)
def test_cross_node_aggregation_finder(expr: str, names: set[str]) -> None:
    assert cross_aggregated_names(expr, "instance") == names


def test_no_panel_aggregates_raw_series_across_nodes(
    cfg: MixinConfig, dashboards: dict[str, dict[str, Any]]
) -> None:
    """A cluster- or rack-level number is a recording rule's, never a query-time sum of
    raw per-link / per-port / per-GPU series: at 124 nodes an overview refresh would
    otherwise read every NVLink and IB series of the fleet.

    Fleet dashboards read no raw series at all (above); this covers the per-node
    dashboards too, whose node variable can select every node."""
    for where, expr in _dashboard_exprs(dashboards):
        raw = {
            n
            for n in cross_aggregated_names(expr, cfg.instance_label)
            if n in SAMPLE_NAMES or n == "up"
        }
        assert not raw, f"{where}: aggregates raw {raw} across nodes in {expr}"


def test_rack_panels_read_rack_rules(dashboards: dict[str, dict[str, Any]]) -> None:
    """Every panel that shows racks reads rack-level recording rules only."""
    rack_panels = 0
    for dash in dashboards.values():
        for panel in dash["panels"]:
            exprs = [t["expr"] for t in panel["targets"]]
            if not any("rack" in t["legendFormat"] for t in panel["targets"]):
                continue
            rack_panels += 1
            names = set().union(*(metric_names(e) for e in exprs))
            assert names and all(n.startswith("rack:") for n in names), panel["title"]
    assert rack_panels >= 2


def test_dashboard_exprs_parse_with_promtool(
    promtool: str, dashboards: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    rules = [
        {"record": f"dashboard:expr_{i}", "expr": _substitute(expr)}
        for i, (_, expr) in enumerate(_dashboard_exprs(dashboards))
    ]
    variables = [
        v["definition"]
        for d in dashboards.values()
        for v in d["templating"]["list"]
        if v["type"] == "query"
    ]
    for i, definition in enumerate(variables):
        # label_values(selector, label) is Grafana's; its selector must be valid PromQL
        match = re.fullmatch(r"label_values\((.*), (\w+)\)", definition)
        assert match, definition
        rules.append({"record": f"dashboard:var_{i}", "expr": _substitute(match.group(1))})
    path = tmp_path / "dashboard-exprs.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
