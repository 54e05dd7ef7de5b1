"""A simulated agent scraped by a production Prometheus pages: the rule exists only in
rule files built with `production: true` (deploy/mixin.example.yaml sets it), promtool
fires it on nvwatch_agent_simulated and leaves real nodes alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nvwatch.alerts.build import write
from nvwatch.alerts.rules import Severity, all_alerts
from nvwatch.mixin.config import MixinConfig, load
from tests.mixin.conftest import REPO

EXAMPLE = REPO / "deploy" / "mixin.example.yaml"
ALERT = "NvwatchSimulatedAgentInProduction"
NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]


def test_only_a_production_config_pages_on_simulated_agents() -> None:
    assert ALERT not in {a.name for a in all_alerts(MixinConfig())}
    production = load(EXAMPLE)
    assert production.production
    (alert,) = [a for a in all_alerts(production) if a.name == ALERT]
    assert alert.severity is Severity.CRITICAL
    assert "nvwatch_agent_simulated" in alert.expr


def test_promtool_fires_it_for_the_simulated_agent_only(promtool: str, tmp_path: Path) -> None:
    write(tmp_path, load(EXAMPLE))
    test = shutil.copy(Path(__file__).parent / "production" / "simulated-agent.yaml", tmp_path)
    result = subprocess.run(
        [promtool, "test", "rules", str(test)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    checked = subprocess.run(
        [promtool, "check", "rules", str(tmp_path / "nvwatch-alerts.yaml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_its_runbook_is_in_the_generated_docs() -> None:
    docs = (REPO / "docs" / "alerts.md").read_text(encoding="utf-8")
    runbook = (REPO / "docs" / "runbooks" / f"{ALERT}.md").read_text(encoding="utf-8")
    assert runbook.startswith(f"# {ALERT}\n")
    assert f"[{ALERT}](runbooks/{ALERT}.md)" in docs


@pytest.mark.parametrize("command", ["alerts", "dashboards"])
def test_the_example_config_builds(command: str, tmp_path: Path) -> None:
    extra = ["--no-docs", "--no-kubernetes"] if command == "alerts" else ["--no-kubernetes"]
    result = subprocess.run(
        [*NVWATCH, command, "build", "--out", str(tmp_path), "--config", str(EXAMPLE), *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    if command == "alerts":
        assert ALERT in (tmp_path / "nvwatch-alerts.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("for_fast: [2m\n", "is not valid YAML at line 2"),
        ("production: yes please\n", "production: expected true or false"),
        ("productoin: true\n", "unknown mixin config key(s): productoin"),
        ("- a list\n", "mixin config must be a mapping"),
        ("a: &x 1\nb: *x\n", "aliases (*name) are not allowed"),
    ],
)
def test_a_bad_mixin_config_is_one_line_and_exit_2(text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "mixin.yaml"
    path.write_text(text)
    result = subprocess.run(
        [*NVWATCH, "alerts", "build", "--out", str(tmp_path / "out"), "--config", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("nvwatch: error: ") and message in line, line
