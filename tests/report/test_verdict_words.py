"""One condition, one set of words: the jobs dashboard's verdict table, `nvwatch job`'s
notes, `nvwatch jobs`' listing and the report's Jobs section name what held a job back
alike. Each condition is raised here as a job would raise it (a summary through the
notes' own thresholds), and the words are read from what each place shows: the committed
dashboard's value mappings and the rendered text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvwatch.mixin.config import MixinConfig
from nvwatch.report.jobs.model import GpuUse, JobSummary
from nvwatch.report.jobs.notes import notes_for
from nvwatch.report.jobs.render import render_list, render_text

REPO = Path(__file__).resolve().parents[2]
HOUR = 3600.0
H100_HBM = 80e9


def _verdict_texts() -> dict[int, str]:
    """The verdict table's value mappings, code -> words, from the committed dashboard."""
    board = json.loads((REPO / "dashboards/generated/nvwatch-jobs.json").read_text())
    (table,) = [p for p in board["panels"] if p.get("title") == "Verdict per job"]
    (mapping,) = table["fieldConfig"]["defaults"]["mappings"]
    return {int(code): option["text"] for code, option in mapping["options"].items()}


def _job(**gpu: object) -> JobSummary:
    """A 2-GPU, one-hour job whose GPUs both behave as `gpu` says, busy otherwise."""
    use = {"utilization": 0.9, "memory_peak_bytes": 60e9, "memory_total_bytes": H100_HBM}
    use |= gpu
    gpus = tuple(GpuUse("n1", str(i), "H100", **use) for i in range(2))  # type: ignore[arg-type]
    summary = JobSummary("7", "c1", "ann", "ml", 0.0, HOUR, gpus, gpu_count=2)
    return notes_for(summary, MixinConfig(), cluster_median=0.9, stragglers=[])


# the dashboard's codes (the promtool cases of tests/mixin/test_jobs_dashboard.py show
# which condition yields which) and a job in that condition
CONDITIONS = [
    pytest.param(1, {"utilization": 0.01}, id="idle"),
    pytest.param(2, {"clock_events": {"hw_thermal_slowdown": 0.5}}, id="thermal"),
    pytest.param(3, {"clock_events": {"sw_power_cap": 0.5}}, id="power-capped"),
]


@pytest.mark.parametrize(("code", "gpu"), CONDITIONS)
def test_the_dashboard_verdict_reads_as_the_jobs_note(code: int, gpu: dict[str, object]) -> None:
    on_dashboard = _verdict_texts()[code]
    job = _job(**gpu)
    assert job.notes, "the condition raised no note"
    text = render_text(job, "test")
    assert f"  - {on_dashboard}: {job.notes[0].text}" in text
    listed = render_list([job])
    assert f"{on_dashboard}: " in listed.splitlines()[1]


def test_a_busy_job_has_no_note_and_the_dashboard_calls_it_busy() -> None:
    assert _job().notes == ()
    assert _verdict_texts()[0].startswith("busy")
