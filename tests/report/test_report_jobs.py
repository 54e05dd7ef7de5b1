"""The report's Jobs section from three job summaries written by hand; every expected
figure is worked out here from them:

    A: ml/h100, 8 GPUs x 2 h = 16 GPU-h, 90 % busy, 2 GPUs idle (4 GPU-h), 10 kWh (nodes)
    B: ml/h100, 4 GPUs x 1 h =  4 GPU-h, 30 % busy, low utilization (2.8 GPU-h), 2 kWh
    C: cv/shared, 2 GPUs x 3 h = 6 GPU-h, 10 % busy, 1 idle (3 GPU-h) and small memory
       (6 GPU-h), GPUs' own energy only: 1 kWh

    bands: 75-100 % 16 h (A), 25-50 % 4 h (B), 0-25 % 6 h (C) of 26
    per account: ml 2 jobs 20 GPU-h, 4 idle, 12 kWh; cv 1 job 6 GPU-h, 3 idle, 1 kWh
    notes: small-memory 6 (1 job), idle-gpus 7 (2 jobs), low-utilization 2.8 (1 job)
"""

from __future__ import annotations

from pathlib import Path

from nvwatch.report.jobs.model import EXCLUSIVE, GpuUse, JobSummary, NodeShare, Note
from nvwatch.report.jobs.store import DirectoryStore
from nvwatch.report.sections.jobs import jobs

H = 3600.0
KWH = 3.6e6


def _job(
    job_id: str,
    account: str,
    partition: str,
    gpus: int,
    hours: float,
    util: float,
    notes: tuple[Note, ...],
    node_kwh: float | None,
    gpu_kwh: float,
) -> JobSummary:
    rows = tuple(GpuUse("n1", str(g), utilization=util) for g in range(gpus))
    nodes = () if node_kwh is None else (NodeShare("n1", gpus, gpus, EXCLUSIVE, node_kwh * KWH),)
    return JobSummary(
        job_id, "c1", "u" + job_id, account, 1e9, 1e9 + hours * H, rows, (), nodes, notes,
        partition=partition, gpu_count=gpus, utilization=util, gpu_energy_joules=gpu_kwh * KWH,
    )  # fmt: skip


def _note(code: str, hours: float) -> Note:
    return Note(code, f"{code} words", "a threshold", hours)


JOBS = [
    _job("1", "ml", "h100", 8, 2, 0.9, (_note("idle-gpus", 4),), 10, 8),
    _job("2", "ml", "h100", 4, 1, 0.3, (_note("low-utilization", 2.8),), 2, 1.5),
    _job(
        "3", "cv", "shared", 2, 3, 0.1, (_note("small-memory", 6), _note("idle-gpus", 3)), None, 1
    ),
]


def _rows(section_table: object) -> list[list[object]]:
    return section_table.rows  # type: ignore[attr-defined, no-any-return]


def test_efficiency_bands_accounts_partitions_and_notes() -> None:
    section = jobs(JOBS, "job store x")
    assert not section.absent
    assert section.numbers["gpu_hours"].value == 26
    assert section.numbers["idle_gpu_hours"].value == 7
    bands, accounts, partitions, notes = section.tables
    assert [(r[0], r[1], r[2]) for r in bands.rows] == [
        ("0%-25%", 1, 6.0), ("25%-50%", 1, 4.0), ("50%-75%", 0, 0.0), ("75%-100%", 1, 16.0),
    ]  # fmt: skip
    assert bands.rows[3][3] == 16 / 26
    assert [r[:4] for r in accounts.rows] == [["ml", 2, 20.0, 4.0], ["cv", 1, 6.0, 3.0]]
    assert [r[4] for r in accounts.rows] == [12.0, 1.0]  # nodes' share, else GPUs' own
    assert [r[:3] for r in partitions.rows] == [["h100", 2, 20.0], ["shared", 1, 6.0]]
    assert [r[:3] for r in notes.rows] == [
        ["GPUs held but idle", 2, 7.0], ["memory fits a smaller GPU", 1, 6.0],
        ["utilization far below other jobs'", 1, 2.8],
    ]  # fmt: skip
    assert notes.rows[0][3] == "1: idle-gpus words"  # the costliest job of the note


def test_the_finding_names_the_idle_gpu_hours_and_the_account() -> None:
    (finding,) = jobs(JOBS, "job store x").findings
    assert finding.startswith("Jobs held 7 GPU-hours (27% of their 26) on GPUs they never used")
    assert "account ml held 4 of them" in finding


def test_no_summary_is_said_not_hidden(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    section = jobs([], store.description)
    assert section.absent.startswith(f"No job summary in job store {tmp_path} for the range")
