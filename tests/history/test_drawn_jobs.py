"""The jobs a history draws for the nodes no episode or placed job uses
(sim/history/job_mix.py): the stated distributions hold over a month of the seed's
124-node cluster, no GPU is held twice, and what the history wrote while each ran is its
draw: a job's busy GPUs compute its duty of a busy GPU's time, the GPUs it holds unused
and the GPUs no job holds read 0, so a month's per-GPU utilization spreads as a real
cluster's does instead of every GPU at one figure.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict

import pytest

from nvwatch.sim.history.jobs import DRAWN, JobEpisode
from nvwatch.sim.history.plan import PLACEMENTS, HistoryPlan, plan_history
from tests.history.written_history import Written, write_and_read

END = 1793491200.0  # 2026-11-01T00:00Z
STEP_S = 900.0


@pytest.fixture(scope="module")
def month() -> HistoryPlan:
    return plan_history(nodes=124, days=30, step=STEP_S, end=END)


def _drawn(plan: HistoryPlan) -> list[JobEpisode]:
    return [job for job in plan.job_episodes if job.kind == DRAWN]


def _hours(job: JobEpisode) -> float:
    return (job.end - job.start) / 3600


def test_no_gpu_is_held_by_two_jobs_at_once(month: HistoryPlan) -> None:
    lives: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for job in month.job_episodes:
        for node in job.nodes:
            for gpu in job.gpus:
                lives[node, gpu].append((job.start, job.end))
    for where, spans in lives.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, where


def test_drawn_jobs_run_only_where_nothing_is_placed(month: HistoryPlan) -> None:
    placed = [job for job in month.job_episodes if job.kind != DRAWN]
    taken = {i for job in placed for i in job.indexes}
    taken |= {p.node % len(month.nodes) for p in PLACEMENTS}
    drawn_on = {i for job in _drawn(month) for i in job.indexes}
    assert drawn_on == set(range(len(month.nodes))) - taken
    for job in _drawn(month):
        assert month.start <= job.start < job.end <= month.end
        assert (job.end - job.start) % STEP_S == 0 and job.end - job.start >= STEP_S


def test_lengths_sizes_and_duty_follow_the_stated_distributions(month: HistoryPlan) -> None:
    """As sim/history/job_mix.py states them: a log-normal length of median 4 h, sigma
    1.2, at most 3 days; 30 % of the jobs on one GPU, 25 % on a whole node, 10 % on
    several; duty a Beta(2.2, 1.3), mean 0.63; a tenth of the jobs holding several GPUs
    use one."""
    jobs = _drawn(month)
    assert len(jobs) > 5000  # about 90 a node a month
    ended = [_hours(j) for j in jobs if j.end < month.end]  # the range cuts the last ones
    assert 3.0 < statistics.median(ended) < 5.0
    deciles = statistics.quantiles(ended, n=10)
    assert deciles[0] < 1.0 and deciles[-1] > 14.0
    assert max(ended) <= 72
    share = {
        "one": sum(len(j.nodes) == 1 and len(j.gpus) == 1 for j in jobs) / len(jobs),
        "node": sum(len(j.nodes) == 1 and len(j.gpus) == 8 for j in jobs) / len(jobs),
        "nodes": sum(len(j.nodes) > 1 for j in jobs) / len(jobs),
    }
    assert share == pytest.approx({"one": 0.30, "node": 0.25, "nodes": 0.10}, abs=0.03)
    duty = [j.load.duty for j in jobs]
    assert statistics.mean(duty) == pytest.approx(2.2 / 3.5, abs=0.02)
    shared = [j for j in jobs if len(j.gpus) * len(j.nodes) > 1]
    one_used = sum(j.busy_gpus == 1 for j in shared) / len(shared)
    assert one_used == pytest.approx(0.10, abs=0.02)
    ib = [j.load.infiniband for j in jobs if len(j.nodes) > 1]
    assert sum(ib) / len(ib) == pytest.approx(0.90, abs=0.04)


def test_the_nodes_are_mostly_but_not_always_allocated(month: HistoryPlan) -> None:
    jobs = _drawn(month)
    nodes = {i for j in jobs for i in j.indexes}
    held = sum(len(j.nodes) * len(j.gpus) * _hours(j) for j in jobs)
    allocated = held / (len(nodes) * 8 * 30 * 24)
    assert 0.55 < allocated < 0.85


def test_one_seed_draws_one_month() -> None:
    def drawn(seed: int) -> list[tuple[str, tuple[str, ...], tuple[int, ...], float, float]]:
        plan = plan_history(nodes=12, days=7, step=STEP_S, end=END, seed=seed)
        return [(j.job_id, j.nodes, j.gpus, j.start, j.end) for j in _drawn(plan)]

    month = drawn(4)
    assert drawn(4) == month
    assert drawn(5) != month
    ids = [int(job[0]) for job in month]
    starts = [job[3] for job in month]
    assert ids == sorted(ids) and starts == sorted(starts)  # numbered as they started


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    # 12 nodes: the episodes' and placed jobs' six, and six of drawn jobs
    plan = plan_history(nodes=12, days=2, step=STEP_S, end=END)
    return write_and_read(plan, tmp_path_factory.mktemp("drawn") / "h.om")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_each_drawn_jobs_gpus_compute_its_duty(written: Written) -> None:
    """Each sample of a drawn job's GPU is its duty times what a busy GPU reads (the
    placed healthy job's GPUs, between their all-reduce and compute phases), and over a
    job of 4 h or more its mean is its duty times a busy GPU's mean."""
    healthy = written.job("healthy")  # a placed job keeping all its GPUs busy
    busy = written.during(
        healthy, "nvwatch_gpu_utilization_ratio", instance=healthy["nodes"][0]["instance"]
    )
    jobs = _drawn(written.plan)
    assert len(jobs) >= 10
    for job in jobs:
        truth = next(t for t in written.truth["jobs"] if t["job_id"] == job.job_id)
        assert truth["kind"] == DRAWN and truth["notes"] is None
        for node in job.nodes:
            for gpu in job.gpus:
                values = written.during(
                    truth, "nvwatch_gpu_utilization_ratio", instance=node, gpu=str(gpu)
                )
                assert len(values) == round((job.end - job.start) / STEP_S)
                duty, where = job.load_of(gpu).duty, (job.job_id, node, gpu)
                assert duty * min(busy) - 0.01 <= min(values), where
                assert max(values) <= duty * max(busy) + 0.01, where
                if len(values) >= 16:
                    assert _mean(values) == pytest.approx(duty * _mean(busy), abs=0.02), where


def test_gpus_no_job_holds_on_a_drawn_node_idle(written: Written) -> None:
    drawn = _drawn(written.plan)
    for node in {n for job in drawn for n in job.nodes}:
        for gpu in range(8):
            held = [j for j in drawn if node in j.nodes and gpu in j.gpus]
            (points,) = written.of(
                "nvwatch_gpu_utilization_ratio", instance=node, gpu=str(gpu)
            ).values()
            free = [v for t, v in points.items() if not any(j.runs_at(t) for j in held)]
            assert free and set(free) == {0.0}, (node, gpu)


def test_a_months_gpus_spread_as_a_clusters_do(written: Written) -> None:
    """Per-GPU mean utilization over the range, on the drawn nodes: what the capacity
    review's percentiles read; no longer one figure for every busy GPU."""
    drawn_nodes = {n for job in _drawn(written.plan) for n in job.nodes}
    means = [
        _mean(list(points.values()))
        for key, points in written.series["nvwatch_gpu_utilization_ratio"].items()
        if dict(key)["instance"] in drawn_nodes
    ]
    assert len(means) == 8 * len(drawn_nodes)
    low, middle, high = statistics.quantiles(means, n=10)[0], statistics.median(means), max(means)
    assert high - low > 0.25 and low < middle < high


def test_the_truth_splits_a_shared_nodes_energy_by_gpus_held(written: Written) -> None:
    shared = [
        node
        for job in written.truth["jobs"]
        if job["kind"] == DRAWN
        for node in job["nodes"]
        if node["shared_with"]
    ]
    assert shared
    for node in shared:
        assert node["share"] == len(node["gpus"]) / 8
        whole = node["node_energy_joules"]
        assert node["job_energy_joules"] == pytest.approx(node["share"] * whole)


def test_a_six_node_history_draws_nothing() -> None:
    """Every node of the smallest history has an episode or a placed job."""
    assert _drawn(plan_history(nodes=6, days=2, step=STEP_S, end=END)) == []
