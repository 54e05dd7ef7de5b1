"""promtool checks the generated rule files and runs the unit tests in promtool/."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvwatch.alerts.recording import recorded_names
from nvwatch.alerts.rules import all_alerts
from nvwatch.alerts.rules.base import Kind
from nvwatch.mixin.config import MixinConfig
from tests.mixin.conftest import PROMTOOL_TESTS, REPO

RULE_FILES = ["nvwatch-alerts.yaml", "nvwatch-recording.yaml"]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    # promtool evaluates every rule of the files at every step of a test: the largest
    # file takes ~20 s on an idle core and several times that beside a loaded suite
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.parametrize("name", RULE_FILES)
def test_promtool_check_rules(promtool: str, name: str) -> None:
    result = _run([promtool, "check", "rules", str(REPO / "alerts" / "generated" / name)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("path", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(promtool: str, path: Path) -> None:
    result = _run([promtool, "test", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


def _tests() -> Iterator[dict[str, Any]]:
    for path in PROMTOOL_TESTS:
        yield from yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]


def _cases() -> list[dict[str, Any]]:
    return [case for test in _tests() for case in test.get("alert_rule_test") or []]


def _seconds(eval_time: str) -> int:
    """promtool's eval_time (`0m`, `1h30m`, `45s`) in seconds."""
    parts = re.findall(r"(\d+)([hms])", eval_time)
    assert parts and "".join(n + u for n, u in parts) == eval_time, eval_time
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def _timelines(alertname: str) -> Iterator[list[tuple[int, bool]]]:
    """Per promtool test, the alert's evaluations in time order: (seconds, firing)."""
    for test in _tests():
        evals = [
            (_seconds(case["eval_time"]), bool(case.get("exp_alerts")))
            for case in test.get("alert_rule_test") or []
            if case["alertname"] == alertname
        ]
        if evals:
            yield sorted(evals)


def _holds_then_resolves(timeline: list[tuple[int, bool]], hold_s: int) -> bool:
    """Firing, still firing at least `hold_s` later, and silent after that."""
    for i, (first, firing) in enumerate(timeline):
        if not firing:
            continue
        held = [t for t, f in timeline[i:] if f and t - first >= hold_s]
        if held and any(t > held[0] and not f for t, f in timeline[i:]):
            return True
    return False


@pytest.mark.parametrize("kind", list(Kind))
def test_every_alert_is_tested_for_how_it_clears(cfg: MixinConfig, kind: Kind) -> None:
    """A condition holds its level (still firing 5 minutes on, where an increase() over a
    window would have let go) and resolves after the repair; an event fires and later
    resolves by itself. conditions.yaml and events.yaml hold these tests."""
    hold_s = 300 if kind is Kind.CONDITION else 0
    untested = [
        a.name
        for a in all_alerts(cfg)
        if a.kind is kind and not any(_holds_then_resolves(t, hold_s) for t in _timelines(a.name))
    ]
    assert not untested, f"{kind.value} alerts without a fire-hold-resolve test: {untested}"


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
