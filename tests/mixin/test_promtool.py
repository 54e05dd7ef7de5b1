"""promtool checks the generated rule files and runs the unit tests in promtool/."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.recording import recorded_names
from alerts.rules import all_alerts
from mixin.config import MixinConfig
from tests.mixin.conftest import PROMTOOL_TESTS, REPO

RULE_FILES = ["nvwatch-alerts.yaml", "nvwatch-recording.yaml"]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("name", RULE_FILES)
def test_promtool_check_rules(promtool: str, name: str) -> None:
    result = _run([promtool, "check", "rules", str(REPO / "alerts" / "generated" / name)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("path", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(promtool: str, path: Path) -> None:
    result = _run([promtool, "test", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


def _cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in PROMTOOL_TESTS:
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            cases.extend(test.get("alert_rule_test") or [])
    return cases


def test_every_alert_has_a_firing_and_a_silent_case(cfg: MixinConfig) -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for case in _cases():
        expected = case.get("exp_alerts") or []
        if not expected:
            silent.add(case["alertname"])
            continue
        # a firing case must pin both the labels and the rendered annotations
        for alert in expected:
            assert alert.get("exp_labels", {}).get("severity"), case
            assert set(alert.get("exp_annotations", {})) >= {
                "summary",
                "description",
                "runbook_url",
            }, case
        firing.add(case["alertname"])
    names = {a.name for a in all_alerts(cfg)}
    assert names - firing == set(), "alerts without a firing promtool test"
    assert names - silent == set(), "alerts without a silent promtool test"
    assert (firing | silent) - names == set(), "promtool tests name unknown alerts"


def test_recording_rules_have_expression_tests(cfg: MixinConfig) -> None:
    tested: set[str] = set()
    for path in PROMTOOL_TESTS:
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for case in test.get("promql_expr_test") or []:
                tested.update(n for n in recorded_names(cfg) if n in case["expr"])
    # the expectations, a per-node, a per-rack and a per-cluster level are all exercised
    for name in (
        "nvwatch:node_class_expected_gpus",
        "nvwatch:node_class_expected_ib_rate_bytes_per_second",
        "instance:nvwatch_gpu_power_watts:sum",
        "rack:nvwatch_gpu_power_tdp_watts:sum",
        "cluster:nvwatch_gpu_expected:sum",
        "cluster:nvwatch_gpu_clock_event_active:sum",
        "cluster:nvwatch_ib_port_transmit_bytes:rate",
    ):
        assert name in tested
    assert len(tested) >= 12
