"""A simulated fleet under a real Prometheus and Alertmanager, end to end.

Dashboards: every panel query returns data from the real Prometheus for a healthy
cluster (the queue dashboard's wait for scheduler series this fleet does not export:
tests/e2e/scheduler_panels.py). Alerts: each fault scenario's alert arrives at a
webhook behind the real Alertmanager with the right node/GPU/port labels; the healthy
cluster, running for the same time, delivers none; a killed agent pages for itself
only. Jobs: the GPU-hours recording rules follow the simulated Slurm jobs, and the
allocated-but-idle alert names the one idle GPU a job holds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nvwatch.dashboards.build import build_all
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.workload import TRAINING_ALLREDUCE, TRAINING_COMPUTE
from tests.e2e import scheduler_panels
from tests.e2e.conftest import FAULTS, KILLED, Fault, mixin_config
from tests.e2e.loopback import wait_for
from tests.e2e.stack import Stack
from tests.mixin.conftest import panel_data_links

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ALERT_DEADLINE_S = 180.0
DATA_DEADLINE_S = 90.0

# Queries that cannot have data in a healthy cluster, by (panel title, metric in the
# query), each with the reason. For each, the test checks instead that the faults cluster
# does give it data (the query itself is right).
EMPTY_WHEN_HEALTHY = {
    ("Straggler score per rank", "straggler_score"): "no synchronous job (NEVER_IN_THIS_RUN)",
    ("Job slowdown estimate", "straggler_slowdown"): "no synchronous job (NEVER_IN_THIS_RUN)",
    ("Straggler alerts firing", "NvwatchJobStraggler"): "no synchronous job (NEVER_IN_THIS_RUN)",
    ("Firing alerts", "ALERTS"): "lists firing alerts; a healthy cluster has none",
    ("Error hot spots (NVLink and IB errors per second)", "nvlink_errors"): "errors > 0 only",
    ("Error hot spots (NVLink and IB errors per second)", "ib_port_errors"): "errors > 0 only",
    ("Retired pages, remapped rows, XIDs", "xid_errors"): "XIDs in the range > 0 only",
    ("NVLink errors and links down", "nvlink_errors"): "links with errors (> 0) only",
    ("NVLink errors and links down", "nvlink_up"): "links down (== 0) only",
    ("CRC / replay / recovery error rates", "nvlink_errors"): "links with errors (> 0) only",
    ("Nodes with the most NVLink errors (worst 20, every node)", "nvlink_errors"): "> 0 only",
    ("Nodes with links down (worst 20, every node)", "nvlink_down"): "nodes with any down only",
    ("Nodes with the most port errors (worst 20, every node)", "ib_port_errors"): "> 0 only",
    ("Errors by type", "ib_port_errors"): "IB ports with errors (> 0) only",
    ("Saturated counters", "reading_saturated"): "ports with a counter at its maximum only",
    ("MIG instance SM and DRAM activity", "mig_"): "per-instance GPM needs Hopper (no H100 here)",
}
# ... and those for which even the faults cluster has nothing in this short run (the
# congested port's 32-bit port_xmit_wait does saturate within the run)
NEVER_IN_THIS_RUN: dict[tuple[str, str], str] = {
    # the values are checked against the simulator in tests/nvml/test_mig.py instead
    ("MIG instance SM and DRAM activity", "mig_"): "no H100 in either cluster",
    # this fleet runs no synchronous multi-node job: the stragglers row's data and links
    # are checked in the preview's fleet (strict) and tests/mixin/test_jobs_dashboard.py,
    # the alert in tests/e2e/test_stragglers_e2e.py
    ("Straggler score per rank", "straggler_score"): "no synchronous job",
    ("Job slowdown estimate", "straggler_slowdown"): "no synchronous job",
    ("Straggler alerts firing", "NvwatchJobStraggler"): "no synchronous job",
}


def expected_empty(title: str, expr: str, table: dict[tuple[str, str], str]) -> bool:
    return any(title == t and metric in expr for t, metric in table)


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panels(panel)


def instantiate(expr: str, cluster: str, time_range: str = "60s") -> str:
    """What Grafana would send: variables and the $__ interval macros filled in."""
    values = {
        "cluster": cluster,
        "instance": ".*",
        "gpu": ".*",
        "user": ".*",
        "job_id": ".*",
        "partition": ".*",
        "__rate_interval": "30s",
        "__interval": "1s",
        "__range_s": str(int(time_range[:-1]) * (60 if time_range.endswith("m") else 1)),
        "__range": time_range,
    }
    # longest names first, so $__range_s is not read as $__range followed by "_s"
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    leftover = re.findall(r"\$\{?\w+", expr)
    assert not leftover, f"unfilled variable(s) {leftover} in {expr}"
    return expr


def dashboard_queries(config: MixinConfig) -> list[tuple[str, str, str]]:
    """(dashboard, panel title, expr) for every target of every panel."""
    found = []
    for name, dashboard in build_all(config).items():
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    found.append((name, str(panel.get("title")), str(target["expr"])))
    return found


def test_every_dashboard_panel_has_data(stack: Stack) -> None:
    queries = dashboard_queries(mixin_config())
    assert len(queries) > 40, "the dashboards lost their panels"
    # recording rules over rate windows need a window of samples first
    wait_for(
        "recording rules over a full rate window",
        lambda: stack.query('cluster:nvwatch_ib_port_transmit_bytes:rate{cluster="healthy"}'),
        DATA_DEADLINE_S,
    )
    time.sleep(31)  # one full 30 s rate window of 1 s scrapes behind every rate()
    config = mixin_config()
    waits = scheduler_panels.waiting(
        queries, config, scheduler_panels.scheduler_exported(stack.query, config)
    )
    for name, title in sorted({(name, title) for name, title, _ in waits}):
        print(f"e2e: waiting: {name} / {title}: {scheduler_panels.WAITING}")
    missing: dict[str, str] = {}
    deadline = time.monotonic() + DATA_DEADLINE_S
    for name, title, expr in queries:
        if expected_empty(title, expr, EMPTY_WHEN_HEALTHY) or (name, title, expr) in waits:
            continue
        query = instantiate(expr, "healthy")
        # a slow series (the capacity review's range queries) may need a moment more
        while not stack.query(query) and time.monotonic() < deadline:
            time.sleep(1)
        if not stack.query(query):
            missing[f"{name} / {title}"] = query
    assert not missing, "panels without data in a healthy fleet:\n" + "\n".join(
        f"  {k}: {v}" for k, v in missing.items()
    )


def test_panels_empty_when_healthy_have_data_with_faults(stack: Stack) -> None:
    wanted = [
        (title, expr)
        for _, title, expr in dashboard_queries(mixin_config())
        if expected_empty(title, expr, EMPTY_WHEN_HEALTHY)
        and not expected_empty(title, expr, NEVER_IN_THIS_RUN)
    ]
    assert len(wanted) >= len(EMPTY_WHEN_HEALTHY) - len(NEVER_IN_THIS_RUN)

    empty: list[str] = []

    def all_have_data() -> bool:
        # a range covering the whole run: the faults' one-off events (XIDs) happened early
        empty[:] = [t for t, e in wanted if not stack.query(instantiate(e, "faults", "10m"))]
        return not empty

    try:
        wait_for("fault panels to show data", all_have_data, ALERT_DEADLINE_S, every=2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: still empty: {empty}") from None


def test_data_links_read_labels_their_series_have(stack: Stack) -> None:
    """A drill-down setting `var-X=${__field.labels.L}` needs label L on every series it
    is offered on (the panel's, or one query's for a link limited to a refId); run after
    the faults panels have data, so the error panels have series too."""
    checked: list[str] = []
    for name, dashboard in build_all(mixin_config()).items():
        for panel in panels(dashboard):
            for ref_id, link in panel_data_links(panel):
                labels = re.findall(r"\$\{__field\.labels\.(\w+)\}", link["url"])
                for target in panel["targets"]:
                    if ref_id not in (None, target["refId"]) or expected_empty(
                        panel["title"], target["expr"], NEVER_IN_THIS_RUN
                    ):
                        continue
                    series = stack.query(instantiate(target["expr"], "faults", "10m"))
                    assert series, f"{name} / {panel['title']}: no series to check"
                    for one in series:
                        missing = [label for label in labels if label not in one["metric"]]
                        assert not missing, f"{name} / {panel['title']}: {one} lacks {missing}"
                    checked.append(f"{name} / {panel['title']}")
    assert len(checked) > 10, checked


def _alert_labels(fault: Fault) -> dict[str, str]:
    return {"instance": f"dgx-{fault.node:03d}", "cluster": "faults", **fault.labels}


def _matches(alert: dict[str, Any], fault: Fault) -> bool:
    labels = alert.get("labels", {})
    return labels.get("alertname") == fault.alert and all(
        labels.get(k) == v for k, v in _alert_labels(fault).items()
    )


def test_each_fault_pages_and_the_healthy_cluster_does_not(stack: Stack) -> None:
    killed_at = time.monotonic()
    stack.fleet.stop_node(KILLED)
    arrived: dict[str, float] = {}

    def all_arrived() -> bool:
        for alert in stack.receiver.firing():
            for fault in FAULTS:
                if fault.alert not in arrived and _matches(alert, fault):
                    start = killed_at if fault.scenario is None else stack.started_monotonic
                    arrived[fault.alert] = alert["received_monotonic"] - start
        return len(arrived) == len(FAULTS)

    try:
        wait_for(
            "every fault's alert at the webhook", all_arrived, ALERT_DEADLINE_S, every=1,
            explain=lambda: "; ".join(
                stack.where_alert_stopped(f.alert, _alert_labels(f))
                for f in FAULTS
                if f.alert not in arrived
            ),
        )  # fmt: skip
    finally:
        # printed with -s: the measured time from stack start to delivery, per scenario
        for fault in FAULTS:
            when = arrived.get(fault.alert)
            shown = "NOT DELIVERED" if when is None else f"{when:5.1f}s"
            print(f"e2e: {fault.scenario or 'agent killed':<16} {fault.alert:<28} {shown}")

    firing = stack.receiver.firing()
    healthy = [a["labels"] for a in firing if a["labels"].get("cluster") == "healthy"]
    assert not healthy, f"the healthy cluster alerted: {healthy}"
    # nor is anything about to: no healthy alert is even pending in Prometheus
    assert not stack.query('ALERTS{cluster="healthy"}')

    down = {
        a["labels"].get("instance")
        for a in firing
        if a["labels"]["alertname"] == "NvwatchAgentDown"
    }
    assert down == {f"dgx-{KILLED:03d}"}, f"agent-down fired for {down}"
    assert arrived["NvwatchAgentDown"] > 0
    assert time.monotonic() - killed_at < ALERT_DEADLINE_S


def _by_label(series: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {s["metric"].get(label, ""): float(s["value"][1]) for s in series}


def _held_gpus(stack: Stack, cluster: str) -> dict[str, int]:
    """GPUs each user's jobs hold, from the fleet's own simulated Slurm."""
    held: dict[str, int] = {}
    for index, node_jobs in stack.fleet.node_jobs.items():
        if stack.fleet.specs[index].cluster != cluster:
            continue
        for job in node_jobs.jobs:
            held[job.user] = held.get(job.user, 0) + len(node_jobs.gpus_of(job))
    return held


def test_gpu_hours_per_user_follow_the_fleets_jobs(stack: Stack) -> None:
    """The recording rules count the GPUs each user's jobs hold (alice 4 + 8, bob 8) and
    weight them by utilization, which for training GPUs lies between the simulator's
    all-reduce and compute levels; carol's idle GPU is allocated and not busy."""
    held = _held_gpus(stack, "healthy")
    assert held == {"alice": 12, "bob": 8}
    allocated = wait_for(
        "GPUs per user recorded for every user",
        lambda: (
            found
            if len(found := stack.query('user:nvwatch_gpu_allocated:sum{cluster="healthy"}'))
            == len(held)
            else None
        ),
        DATA_DEADLINE_S,
    )
    assert _by_label(allocated, "user") == held
    busy = _by_label(stack.query('user:nvwatch_gpu_busy:sum{cluster="healthy"}'), "user")
    low, high = TRAINING_ALLREDUCE[0], TRAINING_COMPUTE[0]
    for user, gpus in held.items():
        assert low * gpus - 1e-6 <= busy[user] <= high * gpus + 1e-6, (user, busy[user])
    accounts = stack.query('account:nvwatch_gpu_allocated:sum{cluster="healthy"}')
    assert _by_label(accounts, "account") == {"physics": 12, "ml": 8}
    # GPU-hours, as the report reads them: 8 GPUs over 20 one-second evaluations
    hours = stack.query(
        'sum_over_time(user:nvwatch_gpu_allocated:sum{cluster="healthy", user="bob"}[20s])'
        " * 1 / 3600"
    )
    assert 8 * 19 / 3600 <= float(hours[0]["value"][1]) <= 8 * 21 / 3600
    carol = {"cluster": "faults", "user": "carol"}
    sel = ", ".join(f'{k}="{v}"' for k, v in carol.items())
    assert _by_label(stack.query(f"user:nvwatch_gpu_allocated:sum{{{sel}}}"), "user") == {
        "carol": 2
    }
    carol_busy = _by_label(stack.query(f"user:nvwatch_gpu_busy:sum{{{sel}}}"), "user")["carol"]
    assert low - 1e-6 <= carol_busy <= high + 1e-6  # one training GPU; the idle one adds 0


def test_only_the_idle_gpu_of_the_job_is_allocated_idle(stack: Stack) -> None:
    """NvwatchGpuAllocatedIdle for GPU 3 of carol's job and nothing else: not her busy GPU
    2, not the idle GPUs nobody holds, not the healthy cluster's training jobs."""
    alerts = wait_for(
        "NvwatchGpuAllocatedIdle firing",
        lambda: stack.query('ALERTS{alertname="NvwatchGpuAllocatedIdle", alertstate="firing"}'),
        ALERT_DEADLINE_S,
    )
    where = [
        {k: a["metric"].get(k) for k in ("cluster", "instance", "gpu", "job_id", "user")}
        for a in alerts
    ]
    assert where == [
        {"cluster": "faults", "instance": "dgx-017", "gpu": "3", "job_id": "1004", "user": "carol"}
    ]
    pending_or_firing = stack.query('ALERTS{alertname="NvwatchGpuAllocatedIdle"}')
    assert len(pending_or_firing) == 1
