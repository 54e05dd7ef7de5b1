"""The evaluator's scoring: `for:` over evaluations, matching the culprit, the tables.

Every expectation is worked out by hand from the evaluations written here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nvwatch.alerts.stragglers.accuracy_doc import accuracy_lines
from nvwatch.alerts.stragglers.goals import as_json
from nvwatch.alerts.stragglers.scoring import Evaluated, band_of, fired_at, score

MINUTE = 60.0


def episode(job: str, **extra: Any) -> dict[str, Any]:
    return {"job_id": job, "start": 0.0, "alert_expected": False, "culprit": None,
            "cause": None, "magnitude": 0.0, "onset": None, **extra}  # fmt: skip


def straggler(
    job: str, cause: str, magnitude: float, onset: float, **culprit: Any
) -> dict[str, Any]:
    named = {"instance": "n1", "gpu": None, "device": None, "port": None, **culprit}
    return episode(job, alert_expected=True, culprit=named, cause=cause,
                   magnitude=magnitude, onset=onset)  # fmt: skip


def every_minute(first: float, last: float) -> list[float]:
    return [first + i * MINUTE for i in range(int((last - first) / MINUTE) + 1)]


def test_for_needs_every_evaluation_of_the_window() -> None:
    assert fired_at(every_minute(0, 10 * MINUTE), MINUTE, 10 * MINUTE) == 10 * MINUTE
    assert fired_at(every_minute(0, 9 * MINUTE), MINUTE, 10 * MINUTE) is None
    broken = [t for t in every_minute(0, 20 * MINUTE) if t != 5 * MINUTE]
    assert fired_at(broken, MINUTE, 10 * MINUTE) == 16 * MINUTE  # runs again from minute 6
    assert fired_at([], MINUTE, 0.0) is None
    assert fired_at([3 * MINUTE], MINUTE, 0.0) == 3 * MINUTE  # no for: the first returns


def test_time_to_detect_starts_when_the_warm_up_ends() -> None:
    """The rules judge no job in its warm-up: a straggler from minute 2 of a job with a
    15-minute warm-up can first be seen at minute 15; one from minute 20, at minute 20."""
    early = straggler("1", "pcie", 0.3, onset=2 * MINUTE, gpu="0")
    late = straggler("2", "pcie", 0.3, onset=20 * MINUTE, gpu="0")
    labels = {"instance": "n1", "gpu": "0", "cause": "pcie"}
    evaluated = {
        "1": [Evaluated({**labels, "job_id": "1"}, every_minute(16 * MINUTE, 30 * MINUTE))],
        "2": [Evaluated({**labels, "job_id": "2"}, every_minute(22 * MINUTE, 30 * MINUTE))],
    }
    for_s = 3 * MINUTE
    result = score([early, late], evaluated, interval=MINUTE, for_s=for_s, warmup_s=15 * MINUTE)
    # fired at 19 (16 + 3) and 25 (22 + 3) minutes: 4 and 5 minutes after each was visible
    assert result.overall.detect_seconds == [4 * MINUTE, 5 * MINUTE]
    assert result.to_json()["median_detect_seconds"] == 4.5 * MINUTE


def test_a_true_positive_names_instance_gpu_and_cause() -> None:
    ep = straggler("7", "thermal", 0.3, onset=100.0, gpu="3")
    right = {"job_id": "7", "instance": "n1", "gpu": "3", "cause": "thermal"}
    times = every_minute(400.0, 400.0 + 10 * MINUTE)
    for labels, hit in (
        (right, True),
        ({**right, "gpu": "2"}, False),
        ({**right, "cause": "power-capped"}, False),
        ({**right, "instance": "n0"}, False),
    ):
        result = score([ep], {"7": [Evaluated(labels, times)]}, interval=MINUTE, for_s=600.0)
        summary = result.to_json()
        assert summary["recall"] == (1.0 if hit else 0.0)
        assert summary["precision"] == (1.0 if hit else 0.0)
        if hit:
            assert summary["median_detect_seconds"] == 400.0 + 600.0 - 100.0


def test_ports_and_hosts_are_named_by_their_own_labels() -> None:
    port = straggler("1", "infiniband", 0.2, onset=0.0, device="mlx5_2", port="1")
    host = straggler("2", "host-cpu", 0.5, onset=0.0)
    times = every_minute(0.0, 20 * MINUTE)
    evaluated = {
        "1": [Evaluated({"job_id": "1", "instance": "n1", "device": "mlx5_2", "port": "1",
                         "cause": "infiniband"}, times)],
        "2": [Evaluated({"job_id": "2", "instance": "n1", "cause": "host-cpu"}, times),
              Evaluated({"job_id": "2", "instance": "n1", "gpu": "0", "cause": "host-cpu"},
                        times)],
    }  # fmt: skip
    result = score([port, host], evaluated, interval=MINUTE, for_s=600.0).to_json()
    assert result["by_cause"]["infiniband"]["true_positives"] == 1
    assert result["by_cause"]["host-cpu"]["true_positives"] == 1
    assert result["by_cause"]["host-cpu"]["false_alerts"] == 1  # the GPU is not the host
    assert result["precision"] == pytest.approx(2 / 3)
    assert result["recall"] == 1.0


def test_tables_split_by_cause_and_band_and_count_alerts_on_healthy_jobs() -> None:
    episodes = [
        straggler("1", "pcie", 0.07, onset=0.0, gpu="0"),
        straggler("2", "pcie", 0.45, onset=0.0, gpu="0"),
        episode("3"),  # healthy
        episode("4", pipeline_parallel=True),
    ]
    hit = Evaluated({"job_id": "2", "instance": "n1", "gpu": "0", "cause": "pcie"},
                    every_minute(0.0, 15 * MINUTE))  # fmt: skip
    noise = Evaluated({"job_id": "3", "instance": "n9", "gpu": "5", "cause": "unknown"},
                      every_minute(0.0, 12 * MINUTE))  # fmt: skip
    brief = Evaluated(
        {"job_id": "4", "instance": "n9", "gpu": "5", "cause": "unknown"},
        every_minute(0.0, 5 * MINUTE),
    )  # fmt: skip: shorter than for:
    evaluated = {"2": [hit], "3": [noise], "4": [brief]}
    result = score(episodes, evaluated, interval=MINUTE, for_s=600.0).to_json()
    assert result["false_alerts_on_healthy"] == 1
    assert result["by_band"]["5-10%"] == {
        "precision": None, "recall": 0.0, "f1": None, "true_positives": 0,
        "false_alerts": 0, "misses": 1, "median_detect_seconds": None,
    }  # fmt: skip
    assert result["by_band"]["40-60%"]["recall"] == 1.0
    assert result["by_cause"]["pcie"]["recall"] == 0.5
    assert result["precision"] == 0.5 and result["recall"] == 0.5 and result["f1"] == 0.5
    assert result["median_detect_seconds"] == 600.0


@pytest.mark.parametrize(
    ("magnitude", "band"),
    [(0.05, "5-10%"), (0.0999, "5-10%"), (0.1, "10-20%"), (0.39, "20-40%"), (0.6, "40-60%")],
)
def test_bands(magnitude: float, band: str) -> None:
    assert band_of(magnitude) == band


def test_the_docs_table_shows_the_benchmark_figures(tmp_path: Path) -> None:
    """One straggler found 4 minutes after it was visible, one missed, one false alert
    on a healthy episode: precision 1/2, recall 1/2, F1 1/2; the goals say which fail."""
    ep_found = straggler("1", "thermal", 0.3, onset=20 * MINUTE, gpu="0")
    ep_missed = straggler("2", "pcie", 0.07, onset=20 * MINUTE, gpu="0")
    healthy = episode("3")
    fired = {"instance": "n1", "gpu": "0", "cause": "thermal", "job_id": "1"}
    evaluated = {
        "1": [Evaluated(fired, every_minute(21 * MINUTE, 30 * MINUTE))],
        "3": [Evaluated({**fired, "job_id": "3"}, every_minute(0, 10 * MINUTE))],
    }
    result = score([ep_found, ep_missed, healthy], evaluated, interval=MINUTE, for_s=3 * MINUTE)
    figures = {
        "date": "2026-11-28", "seconds": {"generate": 10.0, "evaluate": 20.0},
        "machine": {"cpu": "test cpu", "prometheus": "prometheus 2"},
        "corpus": {"seed": 5, "episodes": 3, "max_nodes": 4, "nodes": 6, "stragglers": 2,
                   "hours": 1.5, "step_seconds": 15.0},
        "result": as_json(result),
    }  # fmt: skip
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps(figures))
    lines = accuracy_lines(path)
    assert "| all | 0.50 | 0.50 | 0.50 | 1 | 1 | 1 | 240s |" in lines
    assert "| thermal | 1.00 | 1.00 | 1.00 | 1 | 0 | 0 | 240s |" in lines
    assert "| pcie | - | 0.00 | - | 0 | 1 | 0 | - |" in lines
    assert "Alerts on episodes that expect none: 1." in lines
    assert "MISSED F1 >= 0.93: 0.5" in lines
    assert "met    median time to detect <= 300s: 240" in lines
    assert "--seed 5 --episodes 3 --max-nodes 4" in lines[0]
    assert accuracy_lines(tmp_path / "none.json")[0].startswith("Not measured yet")
