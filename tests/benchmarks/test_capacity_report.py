"""The capacity-report benchmark end to end on a small fleet: the history generated and
backfilled in parts, a real Prometheus on it, the report timed, the figures written."""

from __future__ import annotations

from pathlib import Path

from benchmarks import capacity_report
from tests.conftest import require_tool


def test_small_fleet_end_to_end_writes_its_figures(tmp_path: Path) -> None:
    require_tool("promtool")
    require_tool("prometheus")
    # 10 nodes: two parts of up to 8 nodes, and more than the 6 the placed episodes need
    cost = capacity_report.measure_report_cost(nodes=10, days=2, step=900.0, workdir=tmp_path)
    assert cost.nodes == 10 and cost.setup is not None
    # 10 nodes x 2 days at 15 min: 192 points of each series, many series a node
    assert cost.setup["samples"] > 10 * 192 * 100
    # the parts were backfilled and removed as they went: no history file is left
    assert not list(tmp_path.glob("history*.om"))
    assert (tmp_path / "report" / "report.html").stat().st_size > 10_000
    assert cost.files == len(list((tmp_path / "report").iterdir()))
    assert cost.report_seconds > 0 and cost.report_cpu_seconds > 0
    text = capacity_report.render_markdown(cost, "python -m benchmarks.capacity_report")
    assert f"{cost.setup['samples']:,.0f}" in text
    assert f"**{cost.report_seconds:.1f} s**" in text
    assert "2 days of 10 simulated nodes" in text
