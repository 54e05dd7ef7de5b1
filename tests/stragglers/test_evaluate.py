"""`nvwatch alerts evaluate-stragglers`: the mixin's straggler rules, run in a real
Prometheus over a labelled corpus, meet their goals; and its failures are one line.

The CI gate: a corpus of fixed seed (two of each kind of episode, jobs of 2 to 4 nodes)
is written by `nvwatch simulate stragglers` and evaluated with `--check`, which exits 1
when F1 falls below 0.93, recall of slowdowns of 20 % or more below 0.95, any alert
fires on a healthy or legitimately imbalanced episode, or the median time to detect
passes 5 minutes. The full corpus's table in docs/alerts.md comes from
benchmarks/stragglers.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvwatch.alerts.recording import RecordingRule
from nvwatch.alerts.stragglers.corpus import SERIES_FILE, TRUTH_FILE, TRUTH_FORMAT
from nvwatch.alerts.stragglers.levels import rule_levels
from tests.conftest import require_tool

CI_SEED = 0
CI_EPISODES = 28


def nvwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvwatch.agent.cli", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )


def test_levels_put_each_rule_after_what_it_reads() -> None:
    rules = [
        RecordingRule("c:z:score", "a:x:value - on (j) group_left () b:y:median"),
        RecordingRule("b:y:median", 'quantile by (j) (0.5, a:x:value{l!=""})'),
        RecordingRule("a:x:value", "raw_metric * 2"),
        RecordingRule("d:w:other", "raw_metric"),
    ]
    levels = [[r.record for r in level] for level in rule_levels(rules)]
    assert levels == [["a:x:value", "d:w:other"], ["b:y:median"], ["c:z:score"]]
    # a name inside a string is no reference
    quoted = [RecordingRule("e:v:x", 'label_replace(raw, "n", "a:x:value", "", "")'), *rules]
    assert [r.record for r in rule_levels(quoted)[0]] == ["e:v:x", "a:x:value", "d:w:other"]
    with pytest.raises(ValueError, match="cycle"):
        rule_levels([RecordingRule("p:q:a", "p:q:b"), RecordingRule("p:q:b", "p:q:a + 1")])


def test_the_ci_corpus_meets_the_goals(tmp_path: Path) -> None:
    require_tool("prometheus")
    require_tool("promtool")
    corpus = tmp_path / "corpus"
    made = nvwatch(
        "simulate", "stragglers", "--seed", str(CI_SEED), "--episodes", str(CI_EPISODES),
        "--max-nodes", "4", "--out", str(corpus),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    done = nvwatch(
        "alerts", "evaluate-stragglers", str(corpus), "--format", "json", "--check",
        "--workdir", str(tmp_path),
    )  # fmt: skip
    result = json.loads(done.stdout)
    assert done.returncode == 0, [g for g in result["goals"] if not g["met"]]
    assert result["f1"] >= 0.93
    assert result["false_alerts_on_healthy"] == 0
    assert result["median_detect_seconds"] <= 300
    # every straggler of the truth is counted once: found or missed
    truth = json.loads((corpus / TRUTH_FILE).read_text())
    expected = [e for e in truth["episodes"] if e["alert_expected"]]
    overall = result["overall"]
    assert overall["true_positives"] + overall["misses"] == len(expected)
    by_cause = result["by_cause"]
    assert sorted(by_cause) == sorted({e["cause"] for e in expected})
    for cause, tally in by_cause.items():
        count = sum(1 for e in expected if e["cause"] == cause)
        assert tally["true_positives"] + tally["misses"] == count
    # its scratch directory (the TSDB, Prometheus' files) is removed after
    assert not [name for name in os.listdir(tmp_path) if name.startswith("nvwatch-stragglers-")]


def _corpus(directory: Path, truth: object) -> Path:
    directory.mkdir()
    (directory / SERIES_FILE).write_text("# EOF\n")
    (directory / TRUTH_FILE).write_text(json.dumps(truth))
    return directory


EPISODE = {
    "job_id": "1", "kind": "healthy", "start": 0.0, "end": 1800.0, "alert_expected": False,
    "culprit": None, "cause": None,
}  # fmt: skip
GOOD_TRUTH = {"format": TRUTH_FORMAT, "step_seconds": 15.0, "start": 0.0, "end": 1800.0,
              "episodes": [EPISODE]}  # fmt: skip


@pytest.mark.parametrize(
    ("truth", "expected"),
    [
        ({"format": "something else"}, "not of format nvwatch-straggler-corpus/1"),
        ({**GOOD_TRUTH, "episodes": []}, "malformed"),
        ({**GOOD_TRUTH, "episodes": [{"job_id": "1"}]}, "malformed: an episode without"),
        ({**GOOD_TRUTH, "step_seconds": "fast"}, "malformed"),
        ([1, 2], "not of format"),
    ],
)
def test_a_bad_corpus_is_one_line_and_exit_2(tmp_path: Path, truth: object, expected: str) -> None:
    done = nvwatch("alerts", "evaluate-stragglers", str(_corpus(tmp_path / "c", truth)))
    assert done.returncode == 2
    assert done.stderr.startswith("nvwatch: error: ") and expected in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_without_promtool_it_says_what_to_install(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "c", GOOD_TRUTH)
    empty = tmp_path / "bin"
    empty.mkdir()
    done = nvwatch(
        "alerts", "evaluate-stragglers", str(corpus), env={**os.environ, "PATH": str(empty)}
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "nvwatch: error: promtool not found on PATH: the evaluation runs the mixin's rules "
        "in a real Prometheus (Debian: apt-get install prometheus)"
    ]
