"""NvwatchJobStraggler's pipeline-parallel marker and the straggler rules' shape.

The marker exists only in rule files built with `straggler_pipeline_jobs` set, so its
promtool test (straggler/pipeline.yaml) runs next to rules this test builds; the
default config's cases are in promtool/stragglers.yaml.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nvwatch.alerts.build import write
from nvwatch.alerts.recording_straggler import NODE, RANK, RANKS, TOLERANCE, straggler_groups
from nvwatch.alerts.rules import all_alerts
from nvwatch.alerts.rules.straggler import CAUSES
from nvwatch.mixin.config import MixinConfig

MARKED = MixinConfig().with_overrides(straggler_pipeline_jobs='account="llm-pipeline"')


def test_promtool_spares_a_marked_job_within_its_tolerance(promtool: str, tmp_path: Path) -> None:
    write(tmp_path, MARKED)
    test = shutil.copy(Path(__file__).parent / "straggler" / "pipeline.yaml", tmp_path)
    result = subprocess.run(
        [promtool, "test", "rules", str(test)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _tolerance_expr(cfg: MixinConfig) -> str:
    (rule,) = [r for g in straggler_groups(cfg) for r in g.rules if r.record == TOLERANCE]
    return rule.expr


def test_the_marker_and_its_tolerance_reach_the_rules() -> None:
    assert "llm-pipeline" not in _tolerance_expr(MixinConfig())
    marked = _tolerance_expr(MARKED.with_overrides(straggler_pipeline_tolerance=0.25))
    assert 'account="llm-pipeline"' in marked and "+ 0.25" in marked


def test_the_thresholds_reach_the_rules() -> None:
    # values no default has, so each can only have come from this config
    cfg = MixinConfig().with_overrides(
        straggler_min_gpus=5,
        straggler_warmup="20m",
        straggler_busy_utilization=0.4,
        straggler_for="7m",
        straggler_clock_deviation=0.07,
    )
    rules = {r.record: r.expr for g in straggler_groups(cfg) for r in g.rules}
    ranks = rules[RANKS]
    assert ">= 5" in ranks and "offset 20m" in ranks and ">= 0.4" in ranks
    clock_score = rules["job_gpu:nvwatch_gpu_sm_clock:straggler_score"]
    assert clock_score.rstrip().endswith(", 0.07)")
    (alert,) = [a for a in all_alerts(cfg) if a.name == "NvwatchJobStraggler"]
    assert alert.for_ == "7m"
    assert "for 7m:" in alert.description


def test_the_cause_label_takes_only_its_documented_values() -> None:
    (alert,) = [a for a in all_alerts(MixinConfig()) if a.name == "NvwatchJobStraggler"]
    causes = re.findall(r'"cause", "([^"]+)"', alert.expr)
    assert sorted(causes) == sorted(CAUSES)
    assert len(CAUSES) == 8


def test_a_rule_reads_only_what_is_recorded_before_it_in_its_group() -> None:
    """Rules of a group run in order at one timestamp: a rule that read one recorded
    later in its group would see the previous evaluation's value (or none)."""
    for group in straggler_groups(MixinConfig()):
        later = [r.record for r in group.rules]
        for rule in group.rules:
            later.remove(rule.record)
            read_later = [name for name in later if re.search(rf"\b{re.escape(name)}\b", rule.expr)]
            assert not read_later, (rule.record, read_later)


def test_per_rank_series_exist_only_for_ranks_of_compared_jobs() -> None:
    """Cost: every per-rank value starts from the ranks of compared (multi-GPU, warm,
    busy) jobs, never from every GPU of the fleet."""
    rules = {r.record: r.expr for g in straggler_groups(MixinConfig()) for r in g.rules}
    assert rules[RANK].endswith(f"and on (cluster, job_id) {RANKS}")
    assert rules[NODE].startswith(f"group by (cluster, instance, job_id) ({RANK})")
    values = [
        (record, expr)
        for record, expr in rules.items()
        if record.split(":")[0] != "job"
        and not record.endswith(("_score", "_median"))
        and record not in (RANK, NODE)
    ]
    assert len(values) == 9
    for record, expr in values:
        assert expr.startswith((f"{RANK} * on", f"{NODE} * on")), record


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("straggler_min_gpus", 2, "3 or more"),
        ("straggler_min_gpus", 3.5, "whole number"),
        ("straggler_busy_utilization", 1.5, "at most 1"),
        ("straggler_mad_multiple", 0, "above 0"),
    ],
)
def test_bad_straggler_settings_are_refused(key: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MixinConfig.from_mapping({key: value})
