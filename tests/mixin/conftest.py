"""Fixtures of the mixin tests: the default config, its generated files, promtool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mixin.config import MixinConfig
from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
PROMTOOL_TESTS = sorted((Path(__file__).parent / "promtool").glob("*.yaml"))


@pytest.fixture(scope="session")
def cfg() -> MixinConfig:
    return MixinConfig()


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_tool("promtool")


@pytest.fixture(scope="session")
def dashboards(cfg: MixinConfig) -> dict[str, dict[str, Any]]:
    from dashboards.build import build_all

    return build_all(cfg)


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(dashboard["panels"])
