"""The report's Demand section against the synthetic queue it was made from.

Expectations are computed here with numpy from the generated per-sample arrays
(tests/report/synthetic_queue.py): four samples per hourly step, all of them inside
their step, so step means, sample counts and integrals are exact. The queue's figures
are read twice on day 9 (a second agent) and the controller's counters restart on day
12: neither may change a number.
"""

from __future__ import annotations

import numpy as np
import pytest

from nvwatch.common.durations import parse_duration
from nvwatch.mixin import config as mixin_config
from nvwatch.report.context import Context
from nvwatch.report.sections.demand import demand
from nvwatch.report.summary import executive_summary
from nvwatch.report.window import make_window
from tests.report import synthetic, synthetic_queue
from tests.report.conftest import EXAMPLE_CONFIG, Backfill, SyntheticReport
from tests.report.synthetic_queue import IN_WINDOW, Partition

pytestmark = pytest.mark.timeout(600)  # the first test waits for the session's report

SAMPLE_HOURS = synthetic.INTERVAL / 3600
CONFIG = mixin_config.load(EXAMPLE_CONFIG)
WAIT_WHILE_IDLE_S = parse_duration(CONFIG.scheduler_wait_while_idle, "wait")


def _unmet(p: Partition) -> np.ndarray:
    return np.maximum(p.resources + p.priority - p.idle, 0.0)[IN_WINDOW]


def _idle_while_waiting(p: Partition) -> np.ndarray:
    waiting = p.resources + p.priority > 0
    return ((p.idle > 0) & waiting & (p.oldest >= WAIT_WHILE_IDLE_S))[IN_WINDOW]


def _worst_week(p: Partition) -> float:
    """The largest share of samples above capacity in any 7 consecutive days."""
    above = (_unmet(p) > 0).astype(float)
    width = round(7 * synthetic.DAY / synthetic.INTERVAL)
    return max(above[i : i + width].mean() for i in range(0, above.size - width + 1))


def _verdict(p: Partition) -> str:
    """The section's rules applied to the generated arrays: some 7 days above capacity
    for more than the config's fraction of their hours; idle while waiting for 5 % of the
    hours."""
    if _worst_week(p) > CONFIG.scheduler_short_of_gpus_fraction:
        return "short of GPUs"
    if _idle_while_waiting(p).mean() >= 0.05:
        return "GPUs idle while jobs wait"
    return "right-sized"


def test_each_partitions_demand_from_the_generated_queue(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    rows = {r["partition"]: r for r in synthetic_report.table("demand", "partitions")}
    assert set(rows) == set(backfill.queue.partitions)
    for name, p in backfill.queue.partitions.items():
        row, unmet = rows[name], _unmet(p)
        # read twice on day 9, counted once
        assert row["gpus_in_service"] == p.gpus, name
        assert row["gpus_unavailable"] == 0
        assert row["allocated_share"] == pytest.approx(p.allocated[IN_WINDOW].mean() / p.gpus)
        assert row["unmet_gpus_peak"] == unmet.max()
        assert row["unmet_gpus_mean"] == pytest.approx(unmet.mean())
        hourly = unmet.reshape(-1, round(1 / SAMPLE_HOURS)).mean(axis=1)
        assert row["unmet_gpus_typical"] == np.median(hourly)
        assert row["hours_above_capacity"] == pytest.approx(np.sum(unmet > 0) * SAMPLE_HOURS)
        idle = _idle_while_waiting(p)
        assert row["idle_while_waiting_hours"] == pytest.approx(idle.sum() * SAMPLE_HOURS)
        gpu_hours = np.sum(p.idle[IN_WINDOW] * idle) * SAMPLE_HOURS
        assert row["idle_gpu_hours_while_waiting"] == pytest.approx(gpu_hours)
        assert row["worst_week_share_above"] == pytest.approx(_worst_week(p)), name
        assert row["verdict"] == _verdict(p), name
    assert {r["verdict"] for r in rows.values()} == {
        "short of GPUs",
        "GPUs idle while jobs wait",
        "right-sized",
    }


def test_the_summary_says_which_partition_is_short_and_which_wastes_gpus(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    sentence = synthetic_report.section("demand")["findings"][0]
    assert sentence in synthetic_report.data["summary"]
    verdicts = {n: _verdict(p) for n, p in backfill.queue.partitions.items()}
    (short,) = [n for n, v in verdicts.items() if v == "short of GPUs"]
    (wasted,) = [n for n, v in verdicts.items() if v == "GPUs idle while jobs wait"]
    (sized,) = [n for n, v in verdicts.items() if v == "right-sized"]
    peak = _unmet(backfill.queue.partitions[short]).max()
    assert f"{short} was short of GPUs" in sentence and f"up to {peak:.0f} GPUs unmet" in sentence
    assert f"{wasted} had GPUs idle while jobs waited" in sentence
    assert f"{sized} was right-sized" in sentence
    # and the health findings a review needs still have their place
    assert "critical XID" in " ".join(synthetic_report.data["summary"])


def _expected_quantile(q: float, fast: int, slow: int) -> float:
    """PromQL's histogram_quantile, linear within a bucket, for `fast` waits in the
    (10 s, 30 s] bucket and `slow` ones in (3600 s, 7200 s]."""
    rank = q * (fast + slow)
    if rank <= fast:
        return 10 + 20 * rank / fast
    return 3600 + 3600 * (rank - fast) / slow


def test_queue_waits_count_every_job_once_across_the_restart_and_the_second_agent(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    last = synthetic.TIMES.size - 1  # the last sample falls after the window
    waits = [w for index, w in backfill.queue.starts if index < last]
    fast = sum(w == synthetic_queue.FAST_WAIT for w in waits)
    slow = len(waits) - fast
    assert fast and slow
    rows = {r["partition"]: r for r in synthetic_report.table("demand", "waits")}
    train = rows["train"]
    assert train["jobs_started"] == len(waits)
    for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        assert train[f"wait_{key}_seconds"] == pytest.approx(_expected_quantile(q, fast, slow))
    assert synthetic_report.number("demand", "jobs_started") == len(waits)


def test_gpu_hours_per_account_without_accounting(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    """GPU-hours from the allocation counters, through the restart and the second agent;
    no fair-share series, so no shares and a sentence that says why."""
    held: dict[str, float] = {}
    waiting: dict[str, float] = {}
    for (_, account), gpus in backfill.queue.held.items():
        held[account] = held.get(account, 0.0) + float(np.sum(gpus[IN_WINDOW])) * SAMPLE_HOURS
    for name, p in backfill.queue.partitions.items():
        account = "chemistry" if name == "big" else "physics"
        waiting[account] = waiting.get(account, 0.0) + (p.resources + p.priority)[IN_WINDOW].mean()
    rows = {r["account"]: r for r in synthetic_report.table("demand", "accounts")}
    assert set(rows) == set(held)
    most = max(held.values())
    for account, hours in held.items():
        row = rows[account]
        # the window's first step has no earlier reading to count from
        assert row["gpu_hours"] == pytest.approx(hours, abs=most / synthetic.DAYS / 24 * 2)
        assert row["gpu_hours_share"] == pytest.approx(hours / sum(held.values()), abs=0.002)
        assert row["waiting_gpus_mean"] == pytest.approx(waiting[account])
        assert row["shares_norm"] is None and row["use_to_share"] is None
    top = max(held, key=lambda a: held[a])
    fairness = synthetic_report.section("demand")["findings"][1]
    assert fairness.startswith(f"Account {top} used the most GPU-hours")
    assert "no Slurm accounting" in fairness


def test_without_scheduler_series_the_section_says_how_to_get_them() -> None:
    window = make_window("7d", "2026-11-01T00:00:00Z", None, 0.0)
    section = demand(Context(CONFIG, window, {}))
    assert section.absent.startswith("no scheduler series (nvwatch_scheduler_gpus)")
    assert "nvwatch serve --sources scheduler" in section.absent
    assert not section.findings and not section.tables
    assert all("Slurm" not in s for s in executive_summary([section], window.range_words))
