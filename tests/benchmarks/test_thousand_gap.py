"""The minutes between a bulk history's end and an engine's own first scrape, written as
the replaying targets answer them: an engine that starts scraping after the other's
measurement (VictoriaMetrics, half an hour after the history's end at a thousand nodes)
then holds the same data over an hour's range as one that scraped from the start."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.thousand.replay import ReplayNode, replay_node, write_gap
from nvwatch.sim.bulk.write import BulkPlan, BulkResult, node_specs, write_bulk_history
from tests.conftest import require_tool
from tests.sim.test_tsdb_block import _dump

STEP_S = 30.0
GAP_STEPS = 7
# what the engine adds to a scraped series: its job and its target group's labels
TARGET = ("__name__", "job", "cluster", "rack", "node_class", "instance", "bmc")

Key = tuple[str, frozenset[tuple[str, str]]]


def _answer(node: ReplayNode, at_s: float) -> dict[Key, float]:
    """What the replaying target answers at `at_s`, by name and its own labels."""
    text = node.text(at_s).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _own(labels: tuple[tuple[str, str], ...]) -> Key:
    pairs = dict(labels)
    return pairs["__name__"], frozenset((k, v) for k, v in labels if k not in TARGET)


def test_the_gap_holds_what_the_replaying_targets_answered(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    plan = BulkPlan(nodes=2, end_s=time.time() - 3600, hours=1, step_s=STEP_S)
    result: BulkResult = write_bulk_history(plan, tmp_path / "history")
    grid = plan.grid
    since = grid.time_ms(grid.count - 1) / 1000.0
    # up to a moment between two steps: the last step before it is the gap's last
    end_s = since + GAP_STEPS * STEP_S + STEP_S / 2
    samples = write_gap(plan, result, end_s, tmp_path / "gap")
    dumped = _dump(promtool, tmp_path / "gap")
    assert samples == sum(len(points) for points in dumped.values())
    steps = [round((since + k * STEP_S) * 1000) for k in range(1, GAP_STEPS + 1)]
    checked = 0
    for spec in node_specs(plan):
        template, tail = result.templates[spec.profile], result.tails[spec.name]
        running = result.running[spec.name]
        targets = replay_node(template, spec, tail, STEP_S, since, running)
        for job, target in zip(("nvwatch", "nvwatch-bmc"), targets, strict=True):
            mine = {
                _own(labels): points
                for labels, points in dumped.items()
                if dict(labels)["instance"] == spec.name and dict(labels)["job"] == job
            }
            answers = [_answer(target, at_ms / 1000.0) for at_ms in steps]
            # every series the target answers, and no other, at every step after the end
            assert set(mine) == set(answers[0])
            for key, points in mine.items():
                assert [t for t, _ in points] == steps, key
                expected = [answer[key] for answer in answers]
                assert [v for _, v in points] == pytest.approx(expected, rel=1e-12), key
                checked += 1
        # the running job's allocations go on through the gap
        assert running and all(len(dumped[tuple(sorted(r))]) == GAP_STEPS for r in running)
    assert checked == len(dumped)


def test_no_gap_when_the_engine_scraped_from_the_history_s_end(tmp_path: Path) -> None:
    plan = BulkPlan(nodes=1, end_s=time.time() - 3600, hours=1, step_s=STEP_S)
    result = write_bulk_history(plan, tmp_path / "history")
    since = plan.grid.time_ms(plan.grid.count - 1) / 1000.0
    assert write_gap(plan, result, since + STEP_S / 2, tmp_path / "gap") == 0
    assert not (tmp_path / "gap").exists()
