"""Every PromQL expression of the mixin parses and reads only known metrics."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.catalogue import BY_NAME
from alerts.promql import metric_names
from alerts.recording import recorded_names, recording_groups
from alerts.rules import all_alerts
from mixin.config import MixinConfig

# Grafana's variables, replaced by values of the same syntactic kind before promtool
_GRAFANA_VARS = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range_s": "2592000",
    "$__range": "30d",
    "$cluster": "c1",
    "$instance": "n1",
    "$gpu": "0",
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
    return set(BY_NAME) | set(recorded_names(cfg)) | {"up", "ALERTS"}


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
                 "nvwatch-capacity-review.json"):  # fmt: skip
        for panel in dashboards[file]["panels"]:
            for target in panel["targets"]:
                raw = {n for n in metric_names(target["expr"]) if n.startswith("nvwatch_")}
                assert not raw, f"{file}: {panel['title']} reads raw {raw}"


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
