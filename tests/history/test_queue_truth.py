"""A history's scheduler series: the controller's agent scraped like every other agent, the
GPUs of every partition accounted for at every step, and the ground truth of the demand
episodes recomputed here from the OpenMetrics file by the strict parser (peak and
typical unmet demand, hours above capacity, wait percentiles off the histograms per
partition and per account, GPU-hours per account against its share, the backlog week,
the drained node, the account held by its limit while GPUs idle).

A month at an hourly step: the queue's episodes are placed in the weeks of a month."""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from nvwatch.sim.history.history import generate
from nvwatch.sim.history.plan import plan_history

END = 1772409600.0  # 2026-03-02T00:00Z
STEP_S = 3600.0
PREFIX = "nvwatch_scheduler_"
WAIT = "nvwatch_scheduler_wait_seconds"
ACCOUNT_WAIT = "nvwatch_scheduler_account_wait_seconds"
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
LABEL = re.compile(r'(\w+)="([^"]*)"')
UNMET = ("resources", "priority")
WAITING = ("resources", "priority", "limits")

Sample = tuple[float, dict[str, str], float]  # time, labels, value
Samples = dict[str, list[Sample]]  # sample name -> its samples
Month = tuple[Samples, list[Samples], dict[str, Any]]


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> Month:
    """A month of six nodes, five to a file: the samples of the scheduler's families (and
    `up`, the source's up) by sample name from each file, and the ground truth."""
    out = tmp_path_factory.mktemp("queue-history") / "h.om"
    result = generate(plan_history(nodes=6, days=30, step=STEP_S, end=END), out, nodes_per_file=5)
    files: list[Samples] = []
    for path in result.paths:
        by_name: dict[str, list[Sample]] = defaultdict(list)
        text = path.read_text()
        strict = _families(text, lambda name: name not in (WAIT, ACCOUNT_WAIT) and (
            name.startswith(PREFIX) or name in ("up", "nvwatch_agent_source_up")))  # fmt: skip
        for family in text_string_to_metric_families(strict):
            for s in family.samples:
                assert s.timestamp is not None
                by_name[s.name].append((float(s.timestamp.sec), dict(s.labels), s.value))
        for family in (WAIT, ACCOUNT_WAIT):
            for name, labels, value, t in _histogram_lines(text, family):
                by_name[name].append((t, labels, value))
        files.append(by_name)
    truth = json.loads(out.with_name("h.truth.json").read_text())
    return files[-1], files, truth


def _families(text: str, keep: Callable[[str], bool]) -> str:
    """The blocks of the families `keep` accepts (each block starts at its `# HELP`)."""
    blocks = text.removesuffix("# EOF\n").split("# HELP ")
    kept = [b for b in blocks if keep(b.split(" ", 1)[0])]
    return "".join("# HELP " + b for b in kept) + "# EOF\n"


def _histogram_lines(text: str, family: str) -> list[tuple[str, dict[str, str], float, float]]:
    """The samples of histogram `family`, read line by line: the strict parser takes a
    histogram's points one timestamp apart for duplicates (promtool, which backfills the
    file, reads them all; test_history_command backfills one)."""
    found = []
    for line in text.splitlines():
        if line.startswith(family + "_"):
            head, value, stamp = line.rsplit(" ", 2)
            name, _, body = head.partition("{")
            labels = dict(LABEL.findall(body))
            found.append((name, labels, float(value), float(stamp)))
    return found


def _series(samples: list[Sample], **match: str) -> dict[float, float]:
    """time -> the sum of the samples whose labels match (`name__in` for a set)."""
    out: dict[float, float] = defaultdict(float)
    for t, labels, value in samples:
        if all(
            labels.get(k.removesuffix("__in")) in v if k.endswith("__in") else labels.get(k) == v
            for k, v in match.items()
        ):
            out[t] += value
    return out


def _window(
    truth: dict[str, Any], start: float | None = None, end: float | None = None
) -> list[float]:
    """Sample times in (start, end], each standing for the step before it."""
    first = truth["start"] if start is None else start
    last = truth["end"] if end is None else end
    return [t for t in _times(truth) if first < t <= last]


def _times(truth: dict[str, Any]) -> list[float]:
    count = round((truth["end"] - truth["start"]) / truth["step_seconds"])
    return [truth["start"] + i * truth["step_seconds"] for i in range(count + 1)]


def test_the_controller_is_one_more_target_of_the_agents_job(month: Month) -> None:
    last, files, truth = month
    sched = truth["scheduler"]
    target = {"job": "nvwatch", "instance": sched["instance"], "cluster": sched["cluster"]}
    names = [n for n in last if n.startswith(PREFIX)]
    assert {n.removesuffix("_total") for n in names} >= {
        f"{PREFIX}{f}" for f in ("gpus", "pending_gpus", "oldest_pending_seconds", "fairshare",
                                 "allocated_gpu_seconds", "nodes_unavailable")}  # fmt: skip
    assert {f"{PREFIX}wait_seconds_{s}" for s in ("bucket", "count", "sum")} <= set(names)
    for name in names:
        assert all({k: labels[k] for k in target} == target for _, labels, _ in last[name])
    # only the last file holds them; the controller's agent is up, its source too, always
    assert not any(n.startswith(PREFIX) for n in files[0])
    up = _series(last["up"], instance=sched["instance"])
    assert sorted(up) == _times(truth) and set(up.values()) == {1.0}
    source = _series(last["nvwatch_agent_source_up"], source="scheduler")
    assert set(source.values()) == {1.0} and len(source) == len(up)
    assert sched["instance"] not in {n["instance"] for n in truth["nodes"]}


def test_every_gpu_of_the_cluster_is_in_one_state_at_every_step(month: Month) -> None:
    last, _, truth = month
    gpus = last[f"{PREFIX}gpus"]
    per_partition = {p["partition"]: p["gpus"] for p in truth["scheduler"]["partitions"]}
    for t in _times(truth):
        at = [(labels, value) for time, labels, value in gpus if time == t]
        assert {labels["state"] for labels, _ in at} == {"allocated", "idle", "unavailable"}
        totals: dict[str, float] = defaultdict(float)
        for labels, value in at:
            totals[labels["partition"]] += value
        assert totals == per_partition
    # the partitions hold every node once: their GPUs are the nodes' GPUs
    assert sum(per_partition.values()) == sum(n["gpus"] for n in truth["nodes"])


def _quantile(q: float, bounds: list[float], cumulative: list[float]) -> float | None:
    """PromQL's histogram_quantile: linear inside the bucket the rank falls in (from 0
    below the first), the highest finite bound when it falls in +Inf."""
    total = cumulative[-1]
    if not total:
        return None
    rank = q * total
    index = next(i for i, c in enumerate(cumulative) if c >= rank)
    if index == len(bounds):
        return bounds[-1]
    below = cumulative[index - 1] if index else 0.0
    lower = bounds[index - 1] if index else 0.0
    return lower + (bounds[index] - lower) * (rank - below) / (cumulative[index] - below)


def test_partitions_demand_and_waits_recomputed_from_the_file(month: Month) -> None:
    last, _, truth = month
    sched, window = truth["scheduler"], _window(truth)
    pending, gpus = last[f"{PREFIX}pending_gpus"], last[f"{PREFIX}gpus"]
    oldest, buckets = last[f"{PREFIX}oldest_pending_seconds"], last[f"{PREFIX}wait_seconds_bucket"]
    for row in sched["partitions"]:
        name = row["partition"]
        for_gpus = _series(pending, partition=name, reason__in=UNMET)
        waiting = _series(pending, partition=name, reason__in=WAITING)
        idle = _series(gpus, partition=name, state="idle")
        allocated = _series(gpus, partition=name, state="allocated")
        ages = _series(oldest, partition=name)
        wanted = [for_gpus.get(t, 0.0) for t in window]  # no series: nothing pending
        unmet = [max(w - idle[t], 0.0) for w, t in zip(wanted, window, strict=True)]
        for name_, values in (("waiting_gpus", wanted), ("unmet_gpus", unmet)):
            assert row[f"{name_}_peak"] == max(values)
            assert row[f"{name_}_typical"] == statistics.median(values)
            assert row[f"{name_}_mean"] == pytest.approx(statistics.fmean(values))
        above = sum(1 for t in window if for_gpus.get(t, 0.0) > idle[t])
        assert row["demand_above_capacity_share"] == pytest.approx(above / len(window))
        idle_waiting = [
            t for t in window
            if idle[t] and waiting.get(t) and ages.get(t, 0.0) >= sched["idle_wait_seconds"]
        ]  # fmt: skip
        assert row["idle_while_waiting_hours"] == len(idle_waiting) * STEP_S / 3600
        gpu_hours = sum(allocated[t] for t in window) * STEP_S / 3600
        assert row["allocated_gpu_hours"] == pytest.approx(gpu_hours)
        # waits of the jobs started in the window: the buckets' increase over it
        bounds, cumulative = _increase(buckets, truth, partition=name)
        assert row["jobs_started"] == cumulative[-1]
        for key, q in QUANTILES:
            assert row["wait_seconds"][key] == pytest.approx(_quantile(q, bounds, cumulative))


def _increase(
    buckets: list[Sample], truth: dict[str, Any], **match: str
) -> tuple[list[float], list[float]]:
    """The finite bounds and the cumulative counts (+Inf last) by which the buckets of the
    histogram whose labels match grew over the range."""
    increase: dict[float, float] = defaultdict(float)
    for t, labels, value in buckets:
        if all(labels.get(k) == v for k, v in match.items()) and t in (
            truth["start"],
            truth["end"],
        ):
            increase[float(labels["le"])] += value if t == truth["end"] else -value
    bounds = sorted(b for b in increase if b != float("inf"))
    return bounds, [increase[b] for b in bounds] + [increase[float("inf")]]


def test_accounts_wait_percentiles_off_their_histogram_hold_the_jobs_own(month: Month) -> None:
    """Each account's percentiles as histogram_quantile reads them off the file fall in
    the bucket that holds the percentile of its jobs' own waits (the model's): the
    histogram's rank (q x n) and the exact one (q x (n - 1)) pick neighbouring jobs, which
    with hundreds of starts per account lie in one bucket. The accounts' starts are the
    partitions' starts."""
    last, _, truth = month
    sched = truth["scheduler"]
    buckets = last[f"{ACCOUNT_WAIT}_bucket"]
    for row in sched["accounts"]:
        bounds, cumulative = _increase(buckets, truth, account=row["account"])
        assert row["jobs_started"] == cumulative[-1] >= 100
        for key, q in QUANTILES:
            read = _quantile(q, bounds, cumulative)
            assert row["wait_seconds"][key] == pytest.approx(read)
            lower, upper = _bucket_of(row["wait_seconds_exact"][key], bounds)
            assert read is not None and lower <= read <= upper, (row["account"], key)
    started = sum(r["jobs_started"] for r in sched["accounts"])
    assert started == sum(r["jobs_started"] for r in sched["partitions"]) > 0
    counts, sums = last[f"{ACCOUNT_WAIT}_count"], last[f"{ACCOUNT_WAIT}_sum"]
    for name, samples in ((f"{WAIT}_count", counts), (f"{WAIT}_sum", sums)):
        by_account, by_partition = _series(samples), _series(last[name])
        assert by_account == pytest.approx(by_partition)


def _bucket_of(seconds: float, bounds: list[float]) -> tuple[float, float]:
    """The (lower, upper] bounds of the bucket a wait falls in (from 0; +Inf last)."""
    lower = 0.0
    for bound in bounds:
        if seconds <= bound:
            return lower, bound
        lower = bound
    return lower, float("inf")


def test_accounts_gpu_hours_against_their_share(month: Month) -> None:
    last, _, truth = month
    counter = last[f"{PREFIX}allocated_gpu_seconds_total"]
    fair = last[f"{PREFIX}fairshare"]
    used: dict[str, float] = defaultdict(float)
    for t, labels, value in counter:
        if t == truth["start"]:
            used[labels["account"]] -= value
        elif t == truth["end"]:
            used[labels["account"]] += value
    total = sum(used.values())
    rows = {row["account"]: row for row in truth["scheduler"]["accounts"]}
    assert set(rows) == set(used)
    for account, seconds in used.items():
        row = rows[account]
        assert row["gpu_hours"] == pytest.approx(seconds / 3600)
        assert row["gpu_hours_share"] == pytest.approx(seconds / total)
        at_end = {labels["kind"]: v for t, labels, v in fair
                  if t == truth["end"] and labels["account"] == account}  # fmt: skip
        assert row["shares_norm"] == pytest.approx(at_end["shares_norm"])
        assert row["usage_effective_end"] == pytest.approx(at_end["usage_effective"])
        assert row["factor_end"] == pytest.approx(at_end["factor"])
    assert sum(r["shares_norm"] for r in rows.values()) == pytest.approx(1.0)
    # the GPU-hours every account held are the hours the partitions' GPUs were allocated
    allocated = sum(p["allocated_gpu_hours"] for p in truth["scheduler"]["partitions"])
    assert total / 3600 == pytest.approx(allocated, rel=0.02)


def _episode(truth: dict[str, Any], kind: str) -> dict[str, Any]:
    (episode,) = [e for e in truth["scheduler"]["episodes"] if e["kind"] == kind]
    return episode


def test_the_backlog_week_has_demand_above_capacity(month: Month) -> None:
    last, _, truth = month
    episode = _episode(truth, "backlog")
    name = episode["partition"]
    for_gpus = _series(last[f"{PREFIX}pending_gpus"], partition=name, reason__in=UNMET)
    idle = _series(last[f"{PREFIX}gpus"], partition=name, state="idle")
    inside = _window(truth, episode["start"], episode["end"])
    outside = [t for t in _window(truth) if t not in set(inside)]
    assert (episode["end"] - episode["start"]) == 7 * 86400

    def share(times: list[float]) -> float:
        return sum(1 for t in times if for_gpus.get(t, 0.0) > idle[t]) / len(times)

    measured = episode["measured"]
    assert measured["demand_above_capacity_share"] == pytest.approx(share(inside))
    assert measured["outside"]["demand_above_capacity_share"] == pytest.approx(share(outside))
    assert share(inside) >= 0.6 and share(inside) >= 2 * share(outside)
    assert measured["waiting_gpus_peak"] == max(for_gpus.get(t, 0.0) for t in inside)
    unmet = [max(for_gpus.get(t, 0.0) - idle[t], 0.0) for t in inside]
    assert measured["unmet_gpus_peak"] == max(unmet) > 0
    # the other partitions with demand are not short of GPUs that week
    for row in truth["scheduler"]["partitions"]:
        if row["partition"] != name:
            assert row["demand_above_capacity_share"] < share(inside) / 2


def test_the_drained_node_is_the_one_with_the_ecc_error(month: Month) -> None:
    last, _, truth = month
    episode = _episode(truth, "drained")
    (ecc,) = [e for e in truth["episodes"] if e["kind"] == "ecc-dbe"]
    assert (episode["node"], episode["start"]) == (ecc["node"], ecc["start"])
    drained = _series(
        last[f"{PREFIX}nodes_unavailable"], partition=episode["partition"], reason="drained"
    )
    # a state: drained from the sample at its start to the one before its end
    inside = {t for t in _times(truth) if episode["start"] <= t < episode["end"]}
    assert {t for t, n in drained.items() if n} == inside
    assert set(drained.values()) == {0.0, 1.0}  # one node; the series stays once seen
    assert episode["measured"]["drained_seconds"] == len(inside) * STEP_S
    assert 0 <= len(inside) * STEP_S - (episode["end"] - episode["start"]) < STEP_S
    unavailable = _series(
        last[f"{PREFIX}gpus"], partition=episode["partition"], state="unavailable"
    )
    node_gpus = {n["instance"]: n["gpus"] for n in truth["nodes"]}[episode["node"]]
    assert all(unavailable[t] <= node_gpus for t in inside) and sum(unavailable.values())
    assert all(unavailable[t] == 0 for t in _times(truth) if t not in inside)


def test_an_account_held_by_its_limit_while_gpus_idle(month: Month) -> None:
    last, _, truth = month
    episode = _episode(truth, "limits")
    name, account = episode["partition"], episode["account"]
    pending = last[f"{PREFIX}pending_gpus"]
    limited = _series(pending, reason="limits")
    held_accounts = {
        lab["account"] for _, lab, gpus in pending if lab["reason"] == "limits" and gpus
    }
    assert held_accounts == {account}
    inside = _window(truth, episode["start"], episode["end"])
    # held by the limit from the first sample of the window (it is set at its start) on
    held_at = {t for t, gpus in limited.items() if gpus}
    assert held_at and held_at <= {
        t for t in _times(truth) if episode["start"] <= t <= episode["end"]
    }
    held = _series(pending, partition=name, reason="limits")
    assert episode["measured"]["limits_pending_gpu_hours"] == sum(held.values()) * STEP_S / 3600
    idle = _series(last[f"{PREFIX}gpus"], partition=name, state="idle")
    # GPUs idle beside the held jobs most of the window, far more than the rest of the month
    with_idle = [t for t in inside if held.get(t) and idle[t] >= 1]
    assert len(with_idle) >= len(inside) / 2
    row = next(p for p in truth["scheduler"]["partitions"] if p["partition"] == name)
    per_hour_inside = episode["measured"]["idle_gpu_hours_while_waiting"] / len(inside)
    per_hour_month = row["idle_gpu_hours_while_waiting"] / len(_window(truth))
    assert per_hour_inside >= 4 * per_hour_month


def test_an_account_over_its_share(month: Month) -> None:
    _, _, truth = month
    episode = _episode(truth, "over-share")
    rows = {row["account"]: row for row in truth["scheduler"]["accounts"]}
    over = rows[episode["account"]]
    assert over["gpu_hours_share"] >= 2 * over["shares_norm"]
    assert episode["measured"]["gpu_hours_share"] == over["gpu_hours_share"]
    # Slurm's factor punishes it: the lowest of all at the end of the month
    assert over["factor_end"] == min(r["factor_end"] for r in rows.values())
    assert all(
        r["gpu_hours_share"] < 1.5 * r["shares_norm"]
        for a, r in rows.items()
        if a != episode["account"]
    )
