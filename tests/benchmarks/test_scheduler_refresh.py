"""benchmarks/scheduler_refresh.py: a tiny real queue is measured with sane figures, every
process it started is gone, and its section of docs/performance.md replaces itself and
survives benchmarks/run.py."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from benchmarks.run import kept_sections
from benchmarks.scheduler_refresh import BEGIN, END, Result, Settings, measure, section, update
from tests.slurm.test_real_slurm import _need_slurm

pytestmark = pytest.mark.timeout(180)  # the quick run itself takes ~10 s


@pytest.fixture(scope="module")
def tiny_run() -> tuple[Result, list[psutil.Process]]:
    _need_slurm()
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    result = measure(Settings.quick())
    return result, [p for p in me.children(recursive=True) if p.pid not in before]


def test_a_tiny_queue_costs_four_controller_rpcs_per_refresh(
    tiny_run: tuple[Result, list[psutil.Process]],
) -> None:
    result, left = tiny_run
    assert not left, f"still running: {[(p.pid, p.name()) for p in left]}"
    settings = Settings.quick()
    assert result.running == settings.gpu_jobs + settings.cpu_jobs
    assert result.pending_records == settings.pending
    assert len(result.refreshes) == settings.refreshes
    for refresh in result.refreshes:
        assert refresh.rpcs == {
            "REQUEST_JOB_INFO": 1,
            "REQUEST_NODE_INFO": 1,
            "REQUEST_PARTITION_INFO": 1,
            "REQUEST_SHARE_INFO": 1,
        }
        assert 0 < refresh.wall_s < 30 and refresh.controller_ms > 0
    # every partition's own series, those of each account with jobs there, and each
    # account's own (its wait histogram) add up
    assert result.series == (
        result.partitions * result.series_per_partition
        + result.pairs * result.series_per_partition_account
        + result.accounts * result.series_per_account
    )
    assert result.accounts <= result.pairs <= result.partitions * result.accounts


def test_the_section_is_replaced_in_place_and_kept_by_the_whole_run(
    tiny_run: tuple[Result, list[psutil.Process]], tmp_path: Path
) -> None:
    result, _ = tiny_run
    doc = tmp_path / "performance.md"
    doc.write_text("# nvwatch performance\n\ntext\n")
    update(doc, section(result))
    update(doc, section(result))
    text = doc.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert f"{result.series} for {result.partitions} partitions" in " ".join(text.split())
    rewritten = kept_sections(doc, "# nvwatch performance\n\nnew figures\n")
    assert rewritten[rewritten.index(BEGIN) :] == text[text.index(BEGIN) :]
