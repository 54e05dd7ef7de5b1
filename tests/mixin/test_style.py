"""mixtool's lint rules for the alerts, on the rendered Prometheus rule file."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from nvwatch.alerts.render import prometheus_alerts, prometheus_recording
from nvwatch.mixin.config import MixinConfig


@pytest.fixture(scope="module")
def rules(cfg: MixinConfig) -> list[dict[str, Any]]:
    return [r for g in prometheus_alerts(cfg)["groups"] for r in g["rules"]]


def test_names_are_camel_case_with_prefix(rules: list[dict[str, Any]]) -> None:
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for name in names:
        assert re.fullmatch(r"Nvwatch(?:[A-Z][a-z0-9]+)+", name), name


def test_severity_and_annotations(cfg: MixinConfig, rules: list[dict[str, Any]]) -> None:
    for rule in rules:
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        notes = rule["annotations"]
        assert re.fullmatch(r"[A-Z].+\.", notes["summary"]), name
        assert "{{" not in notes["summary"], f"{name}: summary must be static"
        assert "$labels." in notes["description"], f"{name}: description names no labels"
        assert notes["runbook_url"] == f"{cfg.runbook_base_url}/{name}.md"


def test_descriptions_show_value_where_it_means_something(rules: list[dict[str, Any]]) -> None:
    """Filters such as `== 1` return a constant; everything else shows its $value."""
    for rule in rules:
        branches = rule["expr"].split("\nor ")
        constant = all(re.search(r"== [01]$", b.strip()) for b in branches)
        if not constant:
            assert "$value" in rule["annotations"]["description"], rule["alert"]


def test_at_most_twenty_rules_per_group(cfg: MixinConfig) -> None:
    for doc in (prometheus_alerts(cfg), prometheus_recording(cfg)):
        for group in doc["groups"]:
            assert 0 < len(group["rules"]) <= 20, group["name"]


def test_no_hard_coded_selector(cfg: MixinConfig) -> None:
    other = cfg.with_overrides(job_selector='job="gpu-agents"')
    text = yaml.safe_dump(prometheus_alerts(other)) + yaml.safe_dump(prometheus_recording(other))
    assert 'job="nvwatch"' not in text
    assert 'job="gpu-agents"' in text


def test_no_hard_coded_bmc_selector(cfg: MixinConfig) -> None:
    from nvwatch.dashboards.build import build_all

    other = cfg.with_overrides(bmc_job_selector='job="ipmi-probe"')
    rules = yaml.safe_dump(prometheus_alerts(other)) + yaml.safe_dump(prometheus_recording(other))
    # the dashboards' queries as plain text (str of the JSON's dicts leaves quotes as they are)
    for text in (rules, str(build_all(other))):
        assert 'job="nvwatch-bmc"' not in text
        assert 'job="ipmi-probe"' in text
