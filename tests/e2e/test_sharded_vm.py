"""The sharded path of deploy/scale end to end: a 17-node simulated fleet scraped by two
vmagent shards into VictoriaMetrics, the mixin's rules evaluated by vmalert, alerts
delivered by the real Alertmanager; a Prometheus scrapes the same fleet beside it with
the same rules (sending no alerts) so every dashboard query is answered by both.

- Every fault scenario pages through vmalert with the labels the Prometheus path gives.
- Every dashboard panel's query returns the same series on both engines at the same
  instant, and values within what sample alignment allows (below).
- Killing one vmagent shard pages NvwatchAgentUnscraped for exactly the nodes of its
  half: NvwatchAgentDown needs a failed scrape, and nothing scrapes those nodes now.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from nvwatch.agent.config import ScenarioSpec
from nvwatch.alerts import build as alerts_build
from nvwatch.alerts.rules import all_alerts
from nvwatch.sim.fleet.fleet import Fleet
from tests.conftest import require_tool
from tests.e2e.conftest import (
    BASELINE_S,
    FAULTS,
    HEALTHY,
    KILLED,
    POLL_INTERVAL,
    TIME_SCALE,
    Fault,
    mixin_config,
)
from tests.e2e.loopback import range_query, wait_for
from tests.e2e.stack import Receiver, Stack
from tests.e2e.test_fleet_e2e import dashboard_queries, instantiate
from tests.e2e.vm_stack import QUERY_TIMEOUT_S, SHARDS, Sharded, prometheus_answers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

# 8 healthy nodes, then the fault nodes of the Prometheus e2e (same scenarios, shifted).
# The healthy ones are the seed cluster's DGX-1 V100, the cheapest profile to simulate
# with NVLink and IB. 17 agents, two engines and five scrapers share two cores here: at
# 24 nodes Prometheus and VictoriaMetrics each took ~0.65 of a core just ingesting
# (27,600 series every 2 s) and the fleet 0.37, so with another test beside this one
# polls timed out, scrapes failed and the engines' answers fell apart.
EXTRA_HEALTHY = 0
HEALTHY_NODES = ["dgx1-v100"] * (len(HEALTHY) + EXTRA_HEALTHY)
# job attribution (NvwatchGpuAllocatedIdle) needs the Prometheus e2e's job fixtures and
# is that test's to prove; its labels would travel this path like any other
SHARDED_FAULTS = tuple(
    dataclasses.replace(f, node=f.node + EXTRA_HEALTHY) for f in FAULTS if "job_id" not in f.labels
)
SHARDED_KILLED = KILLED + EXTRA_HEALTHY
ALERT_DEADLINE_S = 200.0
FLEET_POLL_INTERVAL = POLL_INTERVAL
# Every engine scrapes at the agents' poll interval, not at the Prometheus e2e's 1 s: a
# value changes once per poll, so a second scrape per poll reads nothing new, and three
# scrapers (two shards and Prometheus) of 40 agents at 1 s kept two cores past the alert
# deadlines under the suite's load.
SCRAPE_INTERVAL_S = int(POLL_INTERVAL)
SCRAPE_INTERVAL = f"{SCRAPE_INTERVAL_S}s"
# Both engines evaluate the rules once per scrape too: a second evaluation between two
# scrapes reads the same samples (at 1 s, on 24 nodes, the node and fabric groups each
# took 3.5 s per round on a loaded machine, so neither engine kept up with its groups).
EVALUATION_INTERVAL = SCRAPE_INTERVAL
# Sample alignment: the engines scrape each agent at different moments and an agent's
# value changes at each poll, and a recorded series (node, then rack) is evaluated by
# each engine's own rule loop a second or more after its input; so VictoriaMetrics'
# answer at t is compared with the range of Prometheus' answers from 15 s before (the
# lookback vmalert's rules read their input with) to one scrape after t; rates and
# subqueries are computed differently by the two engines (VictoriaMetrics does not
# extrapolate to the window's edges), hence the relative slack on top. Prometheus is asked
# once per query, for every second of that span (a range query is the instant query at
# each step), not once per offset: 300 panels times ten instant queries kept the two
# cores busy past the test's timeout.
ALIGN_FROM_S, ALIGN_TO_S = -15.0, float(SCRAPE_INTERVAL_S)
RELATIVE_SLACK = 0.08


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sharded]:
    prometheus = require_tool("prometheus")
    alertmanager = require_tool("prometheus-alertmanager", "alertmanager")
    for tool in ("victoria-metrics", "vmagent", "vmalert"):
        require_tool(tool)
    workdir: Path = tmp_path_factory.mktemp("e2e-vm")
    rules = workdir / "rules"
    alerts_build.write(rules, mixin_config())
    profiles = HEALTHY_NODES + [f.profile for f in SHARDED_FAULTS]
    fleet = Fleet(
        profiles,
        base_port=0,
        interval=FLEET_POLL_INTERVAL,
        scenarios=[
            (f.node, ScenarioSpec(f.scenario, f.target))
            for f in SHARDED_FAULTS
            if f.scenario is not None
        ],
        seed=11,
        time_scale=TIME_SCALE,
        cluster=["healthy"] * len(HEALTHY_NODES) + ["faults"] * len(SHARDED_FAULTS),
        hold_time=True,
    )
    stack = Stack(workdir, fleet, Receiver())
    path = Sharded(stack)
    try:
        fleet.start()
        stack.start_alertmanager(alertmanager)
        recording = rules / alerts_build.PROMETHEUS_RECORDING
        stack.start_prometheus(
            prometheus,
            [recording, rules / alerts_build.PROMETHEUS_ALERTS],
            SCRAPE_INTERVAL,
            notify=False,
            evaluation_interval=EVALUATION_INTERVAL,
        )
        path.start(
            [recording, rules / alerts_build.VMALERT_ALERTS], SCRAPE_INTERVAL, EVALUATION_INTERVAL
        )
        every = f'count(up{{job="nvwatch"}} == 1) == {len(profiles)}'
        wait_for("prometheus scrapes every agent", lambda: stack.query(every), 90)
        wait_for("both shards together write every agent", lambda: path.query(every), 90)
        time.sleep(BASELINE_S)
        fleet.run_time()
        stack.started_monotonic = time.monotonic()
        yield path
    finally:
        stack.close()


def test_the_shards_split_the_fleet(sharded: Sharded) -> None:
    halves = [sharded.shard_targets(n) for n in range(SHARDS)]
    assert all(halves), f"a shard scrapes nothing: {halves}"
    assert not halves[0] & halves[1]
    assert len(halves[0] | halves[1]) == len(HEALTHY_NODES) + len(SHARDED_FAULTS)


def _matches(alert: dict[str, Any], fault: Fault) -> bool:
    labels = alert.get("labels", {})
    return (
        labels.get("alertname") == fault.alert
        and labels.get("instance") == f"dgx-{fault.node:03d}"
        and labels.get("cluster") == "faults"
        and all(labels.get(k) == v for k, v in fault.labels.items())
    )


def _delivery_trail(sharded: Sharded, names: str) -> str:
    """Where undelivered alerts were lost: when vmalert had them firing (seconds before
    now), what Alertmanager holds of them, and what vmalert logged about sending."""
    now = time.time()
    firing = f'ALERTS{{cluster="faults", alertname=~"{names}", alertstate="firing"}}'
    seen: dict[str, list[float]] = {}
    for at, series in range_query(sharded.vm_url, firing, now - 600, now, 1.0, 20).items():
        for one in series:
            seen.setdefault(one["metric"]["alertname"], []).append(at)
    spans = {
        name: (round(now - min(ts)), round(now - max(ts)), len(ts)) for name, ts in seen.items()
    }
    url = f"{sharded.stack.alertmanager_url}/api/v2/alerts"
    with urllib.request.urlopen(url, timeout=10) as answer:
        held = [
            (a["labels"].get("alertname"), a["status"]["state"], a.get("startsAt"), a.get("endsAt"))
            for a in json.load(answer)
            if re.fullmatch(names, a["labels"].get("alertname", ""))
        ]
    log = sharded.stack.workdir / "vmalert.log"
    said = [
        line[:300]
        for line in log.read_text(errors="replace").splitlines()
        if re.search("notif|alertmanager|send", line, re.I) and "flag " not in line
    ]
    return (
        f"firing on VictoriaMetrics from/to (s ago): {spans}; held by Alertmanager: {held}; "
        f"vmalert said: {said[-5:]}"
    )


def test_each_fault_pages_through_vmalert(sharded: Sharded) -> None:
    stack = sharded.stack
    stack.fleet.stop_node(SHARDED_KILLED)
    arrived: set[str] = set()

    def all_arrived() -> bool:
        for alert in stack.receiver.firing():
            arrived.update(f.alert for f in SHARDED_FAULTS if _matches(alert, f))
        return len(arrived) == len(SHARDED_FAULTS)

    try:
        wait_for("every fault's alert via vmalert", all_arrived, ALERT_DEADLINE_S, every=1)
    except AssertionError as exc:
        missing = sorted({f.alert for f in SHARDED_FAULTS} - arrived)
        names = "|".join(missing)
        seen = f'max_over_time(ALERTS{{cluster="faults", alertname=~"{names}"}}[10m])'
        on_vm = [a["metric"] for a in sharded.query(seen)]
        on_prom = [a["metric"] for a in stack.query(seen)]
        # what Alertmanager did send of them, firing or resolved, and when
        notified = [
            (a.get("status"), _labels(a.get("labels", {})), a.get("startsAt"), a.get("endsAt"))
            for a in stack.receiver.received()
            if a.get("labels", {}).get("alertname") in missing
        ]
        raise AssertionError(
            f"{exc}: not delivered: {missing}; seen on VictoriaMetrics {on_vm}, "
            f"on Prometheus {on_prom}; notifications of them: {notified}; "
            f"{_delivery_trail(sharded, names)}"
        ) from None
    firing = stack.receiver.firing()
    healthy = [a["labels"] for a in firing if a["labels"].get("cluster") == "healthy"]
    assert not healthy, f"the healthy cluster alerted: {healthy}"
    # firing, not pending: on a starved CI machine a poll that times out makes
    # NvwatchAgentSourceDown pending for a moment, and its `for:` is what keeps it quiet
    assert not sharded.query('ALERTS{cluster="healthy", alertstate="firing"}')
    # the labels a page carries are the Prometheus path's: vmalert adds only alertgroup.
    # Prometheus beside it evaluates the same rules; where it fired the alert in this
    # run the label sets must be equal (under a starved CI machine it may lag behind)
    severity = {a.name: a.severity.value for a in all_alerts(mixin_config())}
    compared = 0
    for fault in SHARDED_FAULTS:
        (via_vm, *_) = [_labels(a["labels"]) for a in firing if _matches(a, fault)]
        assert via_vm["severity"] == severity[fault.alert], via_vm
        query = f'last_over_time(ALERTS{{alertname="{fault.alert}", alertstate="firing"}}[10m])'
        via_prometheus = [_labels(s["metric"]) for s in stack.query(query)]
        if via_prometheus:
            compared += 1
            assert via_vm in via_prometheus, f"{via_vm} not in {via_prometheus}"
    assert compared >= len(SHARDED_FAULTS) // 2, "Prometheus fired too few to compare"


def _labels(labels: dict[str, str]) -> dict[str, str]:
    """An alert's labels as a page shows them, whichever engine made it."""
    return {k: v for k, v in labels.items() if k not in ("alertgroup", "alertstate", "__name__")}


def _key(series: dict[str, Any]) -> frozenset[tuple[str, str]]:
    """A result series' identity as a panel shows it. VictoriaMetrics keeps the metric
    name on `*_over_time()` results where Prometheus drops it; vmalert adds alertgroup
    to ALERTS: neither reaches a legend, so neither counts."""
    return frozenset(
        (k, v) for k, v in series["metric"].items() if k not in ("alertgroup", "__name__")
    )


def _within(value: float, seen: list[float]) -> bool:
    lo, hi = min(seen), max(seen)
    slack = RELATIVE_SLACK * max(abs(lo), abs(hi)) + 1e-9
    return lo - slack <= value <= hi + slack


def _compare(expr: str, sharded: Sharded, at: float) -> str | None:
    """None when VictoriaMetrics' answer at `at` agrees with Prometheus' (see above); an
    engine that did not answer in time is a disagreement, printed with the rest."""
    try:
        return _compare_answers(expr, sharded, at)
    except TimeoutError as error:  # the answer did not come
        return f"no answer within {QUERY_TIMEOUT_S:g} s ({error})"
    except urllib.error.URLError as error:
        # the connection itself timed out; a refused one (an engine that died) fails
        if not isinstance(error.reason, TimeoutError):
            raise
        return f"no connection within {QUERY_TIMEOUT_S:g} s ({error})"


def _compare_answers(expr: str, sharded: Sharded, at: float) -> str | None:
    vm = {_key(s): float(s["value"][1]) for s in sharded.query(expr, at)}
    at_each = prometheus_answers(sharded.stack, expr, at + ALIGN_FROM_S, at + ALIGN_TO_S)
    answers = list(at_each.values())
    nearest = min(at_each, key=lambda when: abs(when - at), default=None)
    now = {_key(s) for s in at_each.get(nearest, [])} if nearest is not None else set()
    # a scrape that failed under load leaves a stale target in Prometheus for a moment,
    # which VictoriaMetrics does not mark: the count must be one Prometheus gave at some
    # second of the window, as the values must be
    counts = sorted({len(answer) for answer in answers} or {0})  # no answer: none
    if len(vm) not in counts:
        return f"{len(vm)} series on vm, {counts} on prometheus in the window"
    if re.match(r"(topk|bottomk)\(", expr):
        # near-equal nodes may swap in and out of the top k between two scrapes: the
        # k values must agree, rank by rank, not which nodes hold them
        ranks = [sorted(float(s["value"][1]) for s in a) for a in answers if len(a) == len(vm)]
        for i, value in enumerate(sorted(vm.values())):
            if not _within(value, [r[i] for r in ranks]):
                return f"rank {i}: vm {value:g}, prometheus {[r[i] for r in ranks]}"
        return None
    prom: dict[frozenset[tuple[str, str]], list[float]] = {}
    for answer in answers:
        for s in answer:
            prom.setdefault(_key(s), []).append(float(s["value"][1]))
    if not set(vm) <= set(prom):
        only_vm = [dict(k) for k in set(vm) - set(prom)][:2]
        only_prom = [dict(k) for k in now - set(vm)][:2]
        return f"series differ: only on vm {only_vm}, only on prometheus {only_prom}"
    for key, value in vm.items():
        if not _within(value, prom[key]):
            seen = f"{min(prom[key]):g}..{max(prom[key]):g}"
            return f"{dict(key)}: vm {value:g}, prometheus {seen}"
    return None


def _recorded_for(sharded: Sharded, series: str) -> float:
    """Seconds since VictoriaMetrics' first sample of `series` (vmalert began recording it;
    the earlier tests of the module often ran that long already)."""
    first = sharded.query(f"tfirst_over_time({series}[10m])")
    return time.time() - min((float(s["value"][1]) for s in first), default=time.time())


def test_dashboard_queries_answer_the_same_on_both_engines(sharded: Sharded) -> None:
    # a full rate window (30 s) of samples behind every rate(), on both engines
    probe = 'cluster:nvwatch_ib_port_transmit_bytes:rate{cluster="healthy"}'
    wait_for("vmalert's recording rules", lambda: sharded.query(probe), 90)
    wait_for("30 s of recorded samples", lambda: _recorded_for(sharded, probe) > 31.0, 60)
    at = time.time() - 3.0  # both engines have their samples up to here
    cases = [
        (f"{name} / {title} [{cluster}]", instantiate(expr, cluster))
        for name, title, expr in dashboard_queries(mixin_config())
        for cluster in ("healthy", "faults")
        # vmalert 1.79 has no keep_firing_for: a fault's condition that flickers
        # resolves there and stays firing in Prometheus (README, deploy/scale)
        if not (cluster == "faults" and "ALERTS" in expr)
    ]
    # a few at a time: each comparison waits on two servers' answers, which the two
    # cores compute while the test waits
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda case: _compare(case[1], sharded, at), cases))
    compared = len(cases)
    differ = {
        where: f"{result}\n      {query}"
        for (where, query), result in zip(cases, results, strict=True)
        if result is not None
    }
    assert compared > 80
    # Each engine records the rules on its own loop, and on a loaded two-core machine
    # a loop that falls behind holds a recorded value longer than the 15 s window
    # allows; at a window's edge the engines' increase() also differ on a counter that
    # appeared then (MetricsQL counts from the sample before the window, PromQL
    # extrapolates within it); and an engine stalled past the query timeout answers
    # nothing. So a few comparisons (3 %) may disagree; all are printed.
    for where, what in differ.items():
        print(f"e2e-vm: disagreement: {where}: {what}")
    assert len(differ) <= 0.03 * compared, "VictoriaMetrics and Prometheus disagree:\n" + (
        "\n".join(f"  {k}: {v}" for k, v in differ.items())
    )


def test_killing_a_shard_pages_for_exactly_its_half(sharded: Sharded) -> None:
    stack = sharded.stack
    half = sharded.shard_targets(1)
    other = sharded.shard_targets(0)
    sharded.kill_shard(1)

    def unscraped() -> set[str]:
        return {
            a["labels"]["instance"]
            for a in stack.receiver.firing()
            if a["labels"]["alertname"] == "NvwatchAgentUnscraped"
        }

    wait_for("a page for every node of the dead shard", lambda: unscraped() >= half, 150)
    time.sleep(5)  # anything wrongly paged for the live half would be in by now
    assert unscraped() == half
    assert not unscraped() & other
