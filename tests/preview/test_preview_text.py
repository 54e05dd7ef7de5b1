"""No text of a dashboard preview runs into another, or out of its panel.

Every panel of every dashboard (built from the mixin config, as the end-to-end preview
builds them) is fed synthetic series the size of a real fleet's (tests/preview/synthetic.py:
long label values, 8 GPUs on each of 4 nodes, values over the whole range of the panel's
unit) through the preview's own query code, drawn by `build_figure` as `draw` draws the
PNG, and measured by tests/preview/text_layout.py: no two texts of a panel overlap, and
none leaves its panel's cell.
"""

from __future__ import annotations

from typing import Any

import pytest

from nvwatch.dashboards.build import build_all
from nvwatch.dashboards.preview import (
    PanelResult,
    build_figure,
    panels_of,
    query_panel,
    resolve_variables,
    unit_of,
)
from tests.e2e.conftest import mixin_config
from tests.preview.synthetic import WINDOW, SyntheticPrometheus
from tests.preview.text_layout import text_problems

CONFIG = mixin_config()
DASHBOARDS = build_all(CONFIG)


def _results(dashboard: dict[str, Any]) -> list[tuple[dict[str, Any], PanelResult]]:
    results = []
    prometheus = SyntheticPrometheus(CONFIG)
    for panel in panels_of(dashboard):
        prometheus.unit = unit_of(panel)
        prometheus.states = panel["type"] == "state-timeline"
        variables = resolve_variables(dashboard, prometheus, WINDOW, {})
        results.append((panel, query_panel(panel, prometheus, WINDOW, variables)))
    return results


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_no_text_overlaps_or_leaves_its_panel(name: str) -> None:
    pytest.importorskip("matplotlib")
    dashboard = DASHBOARDS[name]
    results = _results(dashboard)
    assert results and all(not r.empty for _, r in results), "every panel has series"
    problems = text_problems(build_figure(dashboard, results), results)
    assert problems == [], "\n".join([f"{len(problems)} problems:", *problems[:40]])
