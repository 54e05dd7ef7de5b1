"""The per-account wait histogram's rule where a real Slurm cannot be made to show it.

tests/slurm/test_scheduler_source.py checks the account histograms against a real
controller (jobs of two accounts starting, the cap); here the tally is fed squeue's
records directly: a job without an account, a requeued job that starts twice, the first
refresh, an account whose jobs only wait, and accounts beyond the cap.
"""

from __future__ import annotations

from nvwatch.agent.sources.scheduler.model import SchedulerSample, WaitCounts
from nvwatch.agent.sources.scheduler.slurm_json import Job
from nvwatch.agent.sources.scheduler.tally import Tally

T0 = 1_772_000_000.0


def _job(
    job_id: int,
    account: str,
    *,
    eligible: float,
    start: float | None,
    partition: str = "gpu",
) -> Job:
    return Job(
        job_id=job_id,
        partitions=(partition,),
        account=account,
        user="u",
        state="RUNNING" if start is not None else "PENDING",
        reason="None" if start is not None else "Resources",
        gpus=1,
        submit_time=eligible,
        eligible_time=eligible,
        start_time=start,
        end_time=None,
    )


def _accounts(sample: SchedulerSample) -> dict[str, WaitCounts]:
    return {w.account: w.wait for w in sample.account_waits}


def _count(counts: WaitCounts) -> int:
    return counts.cumulative[-1]


def test_the_first_refresh_counts_none_and_a_later_start_counts_once() -> None:
    tally = Tally(max_accounts=10)
    running = _job(1, "alpha", eligible=T0, start=T0 + 50)
    first = tally.update([running], [], None, T0 + 60)
    assert {a: _count(w) for a, w in _accounts(first).items()} == {"alpha": 0}
    started = _job(2, "beta", eligible=T0 + 10, start=T0 + 100)
    second = tally.update([running, started], [], None, T0 + 120)
    third = tally.update([running, started], [], None, T0 + 180)
    for sample in (second, third):
        waits = _accounts(sample)
        assert (_count(waits["alpha"]), _count(waits["beta"])) == (0, 1)
        assert waits["beta"].sum_seconds == 90.0  # started 100 s after T0, eligible at 10


def test_a_job_without_account_is_none_and_a_requeued_one_counts_again() -> None:
    tally = Tally(max_accounts=10)
    tally.update([], [], None, T0)
    job = _job(7, "", eligible=T0, start=T0 + 30)
    tally.update([job], [], None, T0 + 60)
    # requeued: pending again, then a new start (its eligible time is the requeue's)
    again = _job(7, "", eligible=T0 + 90, start=T0 + 400)
    sample = tally.update([again], [], None, T0 + 420)
    waits = _accounts(sample)
    assert set(waits) == {"none"}
    assert _count(waits["none"]) == 2
    assert waits["none"].sum_seconds == 30 + 310


def test_an_account_whose_jobs_only_wait_has_its_histogram_at_zero() -> None:
    tally = Tally(max_accounts=10)
    sample = tally.update([_job(3, "gamma", eligible=T0, start=None)], [], None, T0 + 5)
    waits = _accounts(sample)
    assert _count(waits["gamma"]) == 0 and waits["gamma"].sum_seconds == 0.0


def test_accounts_beyond_the_cap_share_other_and_the_totals_match_the_partitions() -> None:
    tally = Tally(max_accounts=2)
    tally.update([], [], None, T0)
    jobs = [
        _job(i, account, eligible=T0, start=T0 + 10 * (i + 1), partition=partition)
        for i, (account, partition) in enumerate(
            [("a", "gpu"), ("b", "gpu"), ("c", "big"), ("d", "gpu"), ("c", "big")]
        )
    ]
    sample = tally.update(jobs, [], None, T0 + 100)
    waits = _accounts(sample)
    assert {a: _count(w) for a, w in waits.items()} == {"a": 1, "b": 1, "other": 3}
    assert waits["other"].sum_seconds == 30 + 40 + 50
    partitions = [p.wait for p in sample.partitions]
    assert sum(_count(w) for w in waits.values()) == sum(_count(w) for w in partitions) == 5
    assert sum(w.sum_seconds for w in waits.values()) == sum(w.sum_seconds for w in partitions)
