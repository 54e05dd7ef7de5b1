"""Committed generated files match what the one build path writes.

Each file is compared with the output of the command that owns it (mixin/commands.py),
and a stale file names that command.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from nvwatch.alerts import build as alerts_build
from nvwatch.alerts.dcgm_doc import DOC_NAME as DCGM_DOC
from nvwatch.alerts.dcgm_doc import render_doc as render_dcgm_doc
from nvwatch.alerts.docs import render_docs, render_runbooks
from nvwatch.alerts.kubernetes import default_dir as default_kubernetes_dir
from nvwatch.alerts.rules import all_alerts
from nvwatch.dashboards import build as dashboards_build
from nvwatch.mixin import commands
from nvwatch.mixin.config import MixinConfig
from tests.mixin.conftest import REPO

DOCS = REPO / "docs" / "alerts.md"
RUNBOOKS = REPO / "docs" / "runbooks"
KUBERNETES = REPO / "deploy" / "kubernetes"
REFRESH_ALERTS = commands.REFRESH_ALERTS
REFRESH_DASHBOARDS = commands.REFRESH_DASHBOARDS


def _invoke(command: click.Command, *args: str) -> list[Path]:
    result = CliRunner().invoke(command, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [Path(line) for line in result.output.splitlines()]


def _assert_same(built: Path, committed: Path, refresh: str) -> None:
    stale = f"{committed.relative_to(REPO)} is out of date: run `{refresh}`"
    assert committed.is_file(), stale
    assert committed.read_text(encoding="utf-8") == built.read_text(encoding="utf-8"), stale


def _assert_same_dir(built: list[Path], committed_dir: Path, refresh: str) -> None:
    committed = {p.name for p in committed_dir.iterdir() if p.is_file()}
    extra = sorted(committed - {p.name for p in built})
    assert not extra, f"{committed_dir.relative_to(REPO)} has files no build writes: {extra}"
    for path in built:
        _assert_same(path, committed_dir / path.name, refresh)


def test_the_alert_build_writes_the_committed_rules_and_runbooks(tmp_path: Path) -> None:
    docs, k8s = tmp_path / "alerts.md", tmp_path / "k8s"
    args = ("--out", str(tmp_path / "r"), "--docs", str(docs), "--kubernetes", str(k8s))
    written = _invoke(commands.alerts_build, *args)
    guide, runbooks = tmp_path / DCGM_DOC, tmp_path / "runbooks"
    assert written[-4:-1] == [docs, runbooks, guide] and written[-1].parent == k8s
    assert len(written) == 11  # seven rule files, the docs, runbooks, guide, manifest
    _assert_same_dir(written[:-4], REPO / "alerts" / "generated", REFRESH_ALERTS)
    _assert_same(docs, DOCS, REFRESH_ALERTS)
    _assert_same_dir(sorted(runbooks.iterdir()), RUNBOOKS, REFRESH_ALERTS)
    _assert_same(guide, REPO / "docs" / DCGM_DOC, REFRESH_ALERTS)
    _assert_same(written[-1], KUBERNETES / written[-1].name, REFRESH_ALERTS)


def test_the_dashboard_build_writes_the_committed_dashboards(tmp_path: Path) -> None:
    k8s = tmp_path / "k8s"
    written = _invoke(commands.dashboards_build, "--out", str(tmp_path), "--kubernetes", str(k8s))
    assert len(written) == len(dashboards_build.DASHBOARDS) + 1 and written[-1].parent == k8s
    _assert_same_dir(written[:-1], REPO / "dashboards" / "generated", REFRESH_DASHBOARDS)
    _assert_same(written[-1], KUBERNETES / written[-1].name, REFRESH_DASHBOARDS)


def test_the_named_commands_refresh_the_kubernetes_manifests_too() -> None:
    """Neither REFRESH command names --kubernetes: its default must be deploy/kubernetes."""
    assert default_kubernetes_dir() == KUBERNETES


def test_kubernetes_and_no_kubernetes_contradict(tmp_path: Path) -> None:
    args = ["--out", str(tmp_path), "--kubernetes", str(tmp_path), "--no-kubernetes"]
    result = CliRunner().invoke(commands.dashboards_build, args)
    assert result.exit_code == 2 and "contradict" in result.output


def test_the_named_command_refreshes_the_runbooks_too() -> None:
    """REFRESH_ALERTS names no --docs: its default must be this checkout's docs/alerts.md."""
    assert alerts_build.default_docs() == DOCS


def test_docs_up_to_date(cfg: MixinConfig) -> None:
    stale = f"docs/alerts.md is out of date: run `{REFRESH_ALERTS}`"
    assert DOCS.read_text(encoding="utf-8") == render_docs(cfg), stale


def test_dcgm_migration_guide_up_to_date(cfg: MixinConfig) -> None:
    stale = f"docs/{DCGM_DOC} is out of date: run `{REFRESH_ALERTS}`"
    assert (REPO / "docs" / DCGM_DOC).read_text(encoding="utf-8") == render_dcgm_doc(cfg), stale


def test_no_docs_writes_the_rules_only(tmp_path: Path) -> None:
    written = _invoke(commands.alerts_build, "--out", str(tmp_path), "--no-docs", "--no-kubernetes")
    assert sorted(p.name for p in written) == sorted(alerts_build.build_all(MixinConfig()))


def test_python_m_runs_the_same_commands(tmp_path: Path) -> None:
    for main, args in (
        (
            alerts_build.main,
            ["--out", str(tmp_path), "--docs", str(tmp_path / "a.md"), "--no-kubernetes"],
        ),
        (dashboards_build.main, ["--out", str(tmp_path), "--no-kubernetes"]),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(args)
        assert exit_.value.code == 0
    rules = len(alerts_build.build_all(MixinConfig()))
    dashboards = len(dashboards_build.DASHBOARDS)
    assert len([p for p in tmp_path.iterdir() if p.is_file()]) == rules + 2 + dashboards


def test_nvwatch_has_the_same_commands() -> None:
    import click

    from nvwatch.agent.cli import cli

    # loaded when named: the group's table holds only the agent's own commands
    with click.Context(cli) as ctx:
        assert cli.get_command(ctx, "alerts") is commands.alerts_group
        assert cli.get_command(ctx, "dashboards") is commands.dashboards_group


def test_docs_have_a_runbook_per_alert_and_the_xid_table(cfg: MixinConfig) -> None:
    text = render_docs(cfg)
    runbooks = render_runbooks(cfg)
    for alert in all_alerts(cfg):
        runbook = runbooks[f"{alert.name}.md"]
        assert f"[{alert.name}](runbooks/{alert.name}.md)" in text
        for heading in ("What it means.", "How to confirm.", "What to do."):
            assert heading in runbook, alert.name
    for code in ("48", "63", "64", "74", "79", "92", "94", "95"):
        assert f"| {code} |" in text
        assert f"| {code} |" in runbooks["NvwatchGpuXidCritical.md"]


def test_a_runbook_of_an_alert_that_is_gone_is_removed(cfg: MixinConfig, tmp_path: Path) -> None:
    (tmp_path / "runbooks").mkdir()
    gone = tmp_path / "runbooks" / "NvwatchRetired.md"
    gone.write_text("old\n", encoding="utf-8")
    alerts_build.write_docs(tmp_path / "alerts.md", cfg)
    assert not gone.exists()
    assert len(list((tmp_path / "runbooks").iterdir())) == len(render_runbooks(cfg))


def test_write_returns_the_files(cfg: MixinConfig, tmp_path: Path) -> None:
    paths = dashboards_build.write(tmp_path / "d", cfg) + alerts_build.write(tmp_path / "a", cfg)
    expected = len(dashboards_build.DASHBOARDS) + len(alerts_build.build_all(cfg))
    assert len(paths) == expected and all(p.stat().st_size > 0 for p in paths)
