"""`nvwatch job` over a backfilled history, every figure against the history's truth for
the jobs it placed (sim/history/jobs.py, sim/history/truth_jobs.py): the simulator's own
integrals of what it wrote, not nvwatch's arithmetic, and each job's notes against the
ones its plan says it should raise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.history.backfill import HistoryPrometheus, backfilled_prometheus

pytestmark = pytest.mark.timeout(600)
NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
STEP_S = 900.0
# figures keep 3 significant digits (report/jobs/model.py)
DIGITS = 5e-3


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HistoryPrometheus]:
    with backfilled_prometheus(
        tmp_path_factory.mktemp("job-truth"), nodes=6, days=2, step=STEP_S
    ) as served:
        yield served


@pytest.fixture(scope="module")
def summaries(history: HistoryPrometheus) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each placed job's truth and the summary `nvwatch job` made of it."""
    out = {}
    for job in history.truth["jobs"]:
        done = subprocess.run(
            [*NVWATCH, "job", job["job_id"], "--prometheus", history.url, "--format", "json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out[job["kind"]] = (job, json.loads(done.stdout))
    return out


def _gpus(summary: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(g["instance"], g["gpu"]): g for g in summary["gpus"]}


def test_every_placed_job_is_found_over_its_life(
    summaries: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    assert len(summaries) >= 7
    for job, summary in summaries.values():
        assert summary["start"] == pytest.approx(job["start"], abs=1)
        assert summary["end"] == pytest.approx(job["end"], abs=1)
        assert (summary["user"], summary["account"]) == (job["user"], job["account"])
        assert summary["gpu_count"] == job["gpus_held"]


def test_each_gpus_figures_are_the_truths(
    summaries: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    for kind, (job, summary) in summaries.items():
        rows = _gpus(summary)
        for truth in job["gpus"]:
            got = rows[truth["instance"], str(truth["gpu"])]
            where = f"{kind} {truth['instance']}/{truth['gpu']}"
            assert got["utilization"] == pytest.approx(
                truth["utilization_mean"], rel=DIGITS, abs=1e-3
            ), where
            assert got["memory_peak_bytes"] == pytest.approx(
                truth["memory_peak_bytes"], rel=DIGITS
            ), where
            assert got["power_mean_watts"] == pytest.approx(
                truth["power_mean_watts"], rel=DIGITS
            ), where
            # the GPU's own energy counter over the life, as the truth reads the counter
            assert got["energy_joules"] == pytest.approx(
                truth["energy_counter_joules"], rel=DIGITS
            ), where
            for reason, share in truth["clock_event_share"].items():
                assert got["clock_events"].get(reason, 0.0) == pytest.approx(
                    share, rel=DIGITS, abs=1e-3
                ), where


def test_each_nodes_energy_and_the_jobs_share(
    summaries: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    for kind, (job, summary) in summaries.items():
        nodes = {n["instance"]: n for n in summary["nodes"]}
        for truth in job["nodes"]:
            got = nodes[truth["instance"]]
            share = got["gpus_held"] / got["gpus_total"] if got["method"] == "gpu-share" else 1.0
            assert share == pytest.approx(truth["share"]), f"{kind} {truth['instance']}"
            assert got["node_energy_joules"] == pytest.approx(
                truth["node_energy_joules"], rel=DIGITS
            )


def test_each_job_raises_the_notes_its_plan_says(
    summaries: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    for kind, (job, summary) in summaries.items():
        expected = {n for n in job["notes"] if n != "none"}
        assert {n["code"] for n in summary["notes"]} == expected, kind
