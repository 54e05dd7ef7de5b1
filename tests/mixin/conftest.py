"""Fixtures of the mixin tests: the default config, its generated files, promtool."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvwatch.mixin.config import MixinConfig
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
    from nvwatch.dashboards.build import build_all

    return build_all(cfg)


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(dashboard["panels"])


def panel_data_links(panel: dict[str, Any]) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """(refId the link is limited to or None, link) of a panel's data links."""
    field_config = panel.get("fieldConfig", {})
    for link in field_config.get("defaults", {}).get("links", []):
        yield None, link
    for override in field_config.get("overrides", []):
        ref_id = (
            override["matcher"]["options"] if override["matcher"]["id"] == "byFrameRefID" else None
        )
        for prop in override["properties"]:
            if prop["id"] == "links":
                for link in prop["value"]:
                    yield ref_id, link
