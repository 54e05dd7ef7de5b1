"""scripts/real-gpu-check end to end on a simulated HGX H200, as CI runs it: the same
steps as on a GPU node with the simulated NVML under pynvml, in short durations; and on
this machine's (absent) driver, where every step must say why it could not run."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.real_gpu.assumptions import TABLE, VERDICTS
from benchmarks.real_gpu.check import OUTPUTS, Options, Run
from benchmarks.real_gpu.expectations import expected, judge
from benchmarks.real_gpu.replay import replay

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "real-gpu-check"
IMPORTER = REPO / "scripts" / "import-real-gpu-run"
NOTES = REPO / "docs" / "hardware-notes.md"
SHORT = ["--serve-seconds", "3", "--bench-seconds", "2", "--timing-polls", "3"]
SHORT += ["--window", "0.5", "--settle", "0.5", "--load-seconds", "5"]
STATUSES = {"ok", "failed", "timeout", "skipped"}


@pytest.fixture(scope="module")
def simulated_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("check") / "out"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--simulate", "hgx-h200", *SHORT, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    summary["wall_here"] = time.monotonic() - started
    return out, summary


def test_four_files_come_back_and_the_run_stays_inside_its_budget(
    simulated_run: tuple[Path, dict[str, Any]],
) -> None:
    out, summary = simulated_run
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)  # at most 8 may
    assert summary["simulated"] == "hgx-h200" and summary["board"]["gpus"] == 8
    assert summary["seconds"] < summary["budget_seconds"] < 8 * 60
    assert summary["wall_here"] < 150, "CI's budget for this run"
    assert summary["missing"] == ""


def test_every_step_says_what_it_did(simulated_run: tuple[Path, dict[str, Any]]) -> None:
    _, summary = simulated_run
    steps = {s["name"]: s for s in summary["steps"]}
    assert {s["status"] for s in steps.values()} <= STATUSES
    for name in ("environment", "install", "record-idle", "record-load", "nvwatch-doctor",
                 "nvwatch-dump-link", "nvwatch-dump-gpu", "nvwatch-topology", "events",
                 "device-queries", "bench", "serve"):  # fmt: skip
        assert steps[name]["status"] == "ok", steps[name]
    smi = [s for name, s in steps.items() if name.startswith("nvidia-smi")]
    assert len(smi) == 7
    assert all(s["status"] == "skipped" and "nvidia-smi" in s["reason"] for s in smi)
    assert steps["load"]["status"] == "skipped" and "simulated" in steps["load"]["reason"]


def test_each_assumption_of_the_hardware_notes_has_a_verdict_and_raw_file(
    simulated_run: tuple[Path, dict[str, Any]],
) -> None:
    out, summary = simulated_run
    with tarfile.open(out / "raw.tar.gz") as tar:
        archived = {name.removeprefix("raw/") for name in tar.getnames()}
    findings = summary["assumptions"]
    assert [f["id"] for f in findings] == [row[0] for row in TABLE]
    markdown = (out / "summary.md").read_text()
    for f in findings:
        assert f["verdict"] in VERDICTS, f
        assert f["measured"], f
        assert set(f["raw"]) & archived, f
        assert f"| {f['id']} |" in markdown
    # on the simulator the code's assumptions hold, bar what one GPU cannot show
    undecided = {f["id"]: f["verdict"] for f in findings if f["verdict"] != "confirmed"}
    assert undecided == {
        "nvlink-throughput-unit": "not testable on one GPU",
        "violation-time-unit": "inconclusive",
    }, [f for f in findings if f["id"] in undecided]


def test_hardware_notes_list_exactly_the_assumptions_the_check_settles() -> None:
    rows = [line.split("|")[1].strip(" `") for line in NOTES.read_text().splitlines()
            if line.startswith("| `")]  # fmt: skip
    assert rows == [row[0] for row in TABLE]


def test_exports_comparisons_and_measurements(simulated_run: tuple[Path, dict[str, Any]]) -> None:
    _, summary = simulated_run
    r = summary["results"]
    for phase in ("idle", "load"):
        assert r[f"exports_{phase}"]["checked"] > 1000
        assert r[f"exports_{phase}"]["must_be_absent"] > 0
        assert r[f"exports_{phase}"]["failing"] == []
        assert "no nvidia-smi stand-in" in r[f"compare_{phase}"]["skipped"]
    assert r["moves_together"]["all_rose"], r["moves_together"]
    assert r["xid"]["created"] and r["xid"]["waited_without_busy_loop"]
    assert r["gpm"]["load"]["in_range"]
    assert r["nvml_cost"]["idle"]["nvml_calls_per_poll"] > 100
    assert r["nvml_cost"]["batched_vs_per_call"]["batched"]["count"] > 0
    assert r["serve"]["scrapes"] >= 3 and r["serve"]["latency_s"]["p99"] > 0
    assert r["serve"]["poll_duration_s"]["nvml"] > 0
    assert r["not_supported"]["count"] > 0


def test_the_run_imports_as_a_fixture_that_replays(
    simulated_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, _ = simulated_run
    done = subprocess.run(
        [sys.executable, str(IMPORTER), str(out), "--dest", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    fixture = Path(done.stdout.strip())
    assert fixture.name.endswith("-nvidia-h200-simulated")
    result = replay(fixture, "idle")
    assert not result.misses
    assert all(v.ok for v in judge(expected(result.calls), result.exposition))
    again = subprocess.run([sys.executable, str(IMPORTER), str(out), "--dest", str(tmp_path)],
                           capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
    assert again.returncode == 2 and "exists" in again.stderr


def test_a_rerun_starts_from_a_clean_folder(tmp_path: Path) -> None:
    for name in (*OUTPUTS, "mine.txt"):
        (tmp_path / name).write_text("old")
    run = Run(Options(outdir=tmp_path))
    try:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["check.log", "mine.txt"]
        assert (tmp_path / "check.log").read_text() == ""
    finally:
        run.close()


def test_a_step_over_its_budget_is_stopped_with_its_children(tmp_path: Path) -> None:
    run = Run(Options(outdir=tmp_path))
    try:
        argv = ["sh", "-c", "sleep 30 & sleep 30; echo never"]
        started = time.monotonic()
        step, out = run.command("slow", argv, 6.0, out="slow.txt")
        assert time.monotonic() - started < 15
        assert step.status == "timeout" and "6s budget" in step.reason and out == ""
    finally:
        run.close()


def _nvml_loads() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_loads(), reason="this machine has an NVIDIA driver")
def test_without_a_driver_every_step_says_why(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--no-install", *SHORT, "--serve-seconds", "2",
         str(tmp_path)],
        capture_output=True, text=True, timeout=240, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert all(s["status"] in STATUSES and (s["status"] == "ok" or s["reason"])
               for s in steps.values()), steps  # fmt: skip
    assert "NVML unavailable" in steps["record-idle"]["reason"]
    assert steps["nvidia-smi-q"]["reason"] == "skipped: no nvidia-smi on this machine"
    assert {f["verdict"] for f in summary["assumptions"]} <= {
        "not measured",
        "inconclusive",
        "not testable on one GPU",
    }
    assert summary["board"]["name"] is None
