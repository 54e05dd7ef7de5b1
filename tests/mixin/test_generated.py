"""Committed generated files match the code: run the build commands to refresh them."""

from __future__ import annotations

from pathlib import Path

import pytest

from alerts import build as alerts_build
from alerts.docs import render_docs
from dashboards import build as dashboards_build
from mixin.config import MixinConfig
from tests.mixin.conftest import REPO

REFRESH = (
    "out of date: run `python -m alerts.build --out alerts/generated` and "
    "`python -m dashboards.build --out dashboards/generated`"
)


def _compare(built: dict[str, Path], committed_dir: Path) -> None:
    committed = {p.name for p in committed_dir.iterdir() if p.is_file()}
    assert committed == set(built), REFRESH
    for name, path in built.items():
        assert (committed_dir / name).read_text(encoding="utf-8") == path.read_text(
            encoding="utf-8"
        ), f"{name} {REFRESH}"


@pytest.mark.parametrize("kind", ["alerts", "dashboards"])
def test_generated_files_up_to_date(cfg: MixinConfig, tmp_path: Path, kind: str) -> None:
    module = alerts_build if kind == "alerts" else dashboards_build
    written = module.write(tmp_path, cfg)
    _compare({p.name: p for p in written}, REPO / kind / "generated")


def test_docs_up_to_date(cfg: MixinConfig) -> None:
    text = (REPO / "docs" / "alerts.md").read_text(encoding="utf-8")
    assert text == render_docs(cfg), f"docs/alerts.md {REFRESH}"


def test_docs_have_a_runbook_per_alert_and_the_xid_table(cfg: MixinConfig) -> None:
    from alerts.rules import all_alerts

    text = render_docs(cfg)
    for alert in all_alerts(cfg):
        section = text.split(f"### {alert.name}\n", 1)[1].split("###", 1)[0]
        for heading in ("What it means.", "How to confirm.", "What to do."):
            assert heading in section, alert.name
    for code in ("48", "63", "64", "74", "79", "92", "94", "95"):
        assert f"| {code} |" in text


def test_write_returns_the_files(cfg: MixinConfig, tmp_path: Path) -> None:
    paths = dashboards_build.write(tmp_path / "d", cfg) + alerts_build.write(tmp_path / "a", cfg)
    assert len(paths) == 10 and all(p.stat().st_size > 0 for p in paths)
