"""NvwatchJobStraggler end to end: synchronous jobs on a simulated fleet, a real Prometheus
evaluating nvwatch's generated rules, a real Alertmanager.

One fleet of ten dgx-h100 nodes runs nine synchronous data-parallel jobs side by side
(`--job` as `nvwatch simulate fleet` takes it), each with its own fault:

- nodes 0-3 hold seven 4-node jobs on disjoint GPUs (GPU-level causes can share nodes):
  GPUs 0-1 an NVLink straggler (8 ranks), GPU 2 power-capped, GPU 3 thermal, GPU 4 a
  slow GPU (clock-other), GPU 5 a PCIe link trained down, GPU 6 healthy, GPU 7 slowed
  everywhere (every rank power-capped alike);
- nodes 4-6 one 3-node job with a CPU-starved host (host-cpu), nodes 7-9 one 3-node job
  with an IB port trained down (ib-degraded: infiniband). Node and port signals count
  only nodes that hold one job alone, so these two jobs have nodes of their own; three
  nodes each, the fewest for which a node stands out from its job's median by its whole
  gap (ib-congestion, the other infiniband fault, is covered by the promtool unit tests
  and the corpus evaluator: at this time scale its 32-bit port_xmit_wait saturates
  within the run).

Each straggler must fire naming its culprit (instance and GPU, IB device and port, or the
node) and its cause, and nothing else of its job; the healthy and the slowed-everywhere
jobs, as old as the others, must never have had the alert pending; one alert is followed
to Alertmanager's API.

Times: simulated time runs TIME_SCALE times real time (a thermal runaway's minutes of
ramp take seconds); the straggler signals are ratios of a rank to its job and hold at any
scale, but the thresholds on per-second rates (NVLink errors, IB transmit wait ticks) are
scaled by TIME_SCALE as in the fleet e2e (conftest.py). The rules' windows hold
RATE_WINDOW_S / SCRAPE_S >= 4 scrapes and the agents' polls, warm-up and `for:` are
seconds.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nvwatch.agent.config import ScenarioSpec
from nvwatch.alerts import build as alerts_build
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.fabric.fabric import XMIT_WAIT_TICKS_PER_SECOND
from nvwatch.sim.fleet.fleet import Fleet
from nvwatch.sim.fleet.jobs import parse_job
from tests.conftest import require_tool
from tests.e2e.loopback import wait_for
from tests.e2e.stack import Receiver, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ALERT = "NvwatchJobStraggler"
CLUSTER = "stragglers"
PROFILE = "dgx-h100"  # tensor activity (GPM), NVSwitch, one IB rail per GPU
NODES = 10
TIME_SCALE = 10.0
POLL_S = 2.0  # the agents poll, and the fleet ticks, every 2 s
SCRAPE_S = 1.0
RATE_WINDOW_S = 8  # 8 scrapes, 4 polls
WARMUP_S = 12
FOR_S = 8
DEADLINE_S = 120.0  # from simulated time's start, for every straggler to fire


@dataclass(frozen=True)
class Straggler:
    """A job with one fault on one rank (node, GPU or port), and what the alert names."""

    cause: str
    job: str  # the --job flag
    node: int
    scenario: str
    target: str | None
    slowdown: float | None
    names: dict[str, str]  # the culprit's labels besides instance, job_id and cause

    @property
    def job_id(self) -> str:
        return self.job.split("id=")[1]

    def labels(self) -> dict[str, str]:
        return {
            "job_id": self.job_id,
            "instance": f"dgx-{self.node:03d}",
            "cause": self.cause,
            **self.names,
        }


STRAGGLERS = (
    Straggler("nvlink", "0-3:0-1,id=3001", 2, "nvlink-degraded", "0", 0.4, {"gpu": "0"}),
    Straggler("power-capped", "0-3:2,id=3002", 1, "power-capped", "2", 0.3, {"gpu": "2"}),
    Straggler("thermal", "0-3:3,id=3003", 3, "thermal-runaway", "3", 0.3, {"gpu": "3"}),
    Straggler("clock-other", "0-3:4,id=3004", 0, "gpu-slow", "4", 0.3, {"gpu": "4"}),
    # x16 to x4: two halvings of its bandwidth
    Straggler("pcie", "0-3:5,id=3005", 2, "pcie-downtrained", "5", 0.75, {"gpu": "5"}),
    Straggler("host-cpu", "4-6:all,id=3008", 5, "cpu-starved", None, 0.3, {}),
    Straggler(
        "infiniband", "7-9:all,id=3009", 8, "ib-degraded", "mlx5_3", None,
        {"device": "mlx5_3", "port": "1"},
    ),
)  # fmt: skip
HEALTHY_JOB = "0-3:6,id=3006"
SLOWED_EVERYWHERE_JOB = "0-3:7,id=3007"
SILENT_JOB_IDS = ("3006", "3007")
SLOWED_EVERYWHERE = tuple(
    (node, ScenarioSpec("power-capped", "7", slowdown=0.3)) for node in range(4)
)
DELIVERED = STRAGGLERS[1]  # the one followed to Alertmanager


def mixin_config() -> MixinConfig:
    base = MixinConfig()
    return base.with_overrides(
        evaluation_interval="1s",
        rate_window=f"{RATE_WINDOW_S}s",
        straggler_warmup=f"{WARMUP_S}s",
        straggler_for=f"{FOR_S}s",
        # per-real-second rates of simulated counters are TIME_SCALE times the real ones
        nvlink_error_rate_per_second=base.nvlink_error_rate_per_second * TIME_SCALE,
        ib_transmit_wait_tick_seconds=1.0 / XMIT_WAIT_TICKS_PER_SECOND / TIME_SCALE,
    )


def build_fleet() -> Fleet:
    flags = [s.job for s in STRAGGLERS] + [HEALTHY_JOB, SLOWED_EVERYWHERE_JOB]
    scenarios = [
        (s.node, ScenarioSpec(s.scenario, s.target, slowdown=s.slowdown)) for s in STRAGGLERS
    ]
    return Fleet(
        [PROFILE] * NODES,
        base_port=0,
        interval=POLL_S,
        scenarios=scenarios + list(SLOWED_EVERYWHERE),
        seed=11,
        time_scale=TIME_SCALE,
        cluster=CLUSTER,
        # every job's warm-up and every fault's onset under a scraping Prometheus
        hold_time=True,
        jobs=[parse_job(flag, n) for n, flag in enumerate(flags)],
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus = require_tool("prometheus")
    alertmanager = require_tool("prometheus-alertmanager", "alertmanager")
    workdir: Path = tmp_path_factory.mktemp("stragglers")
    rules = workdir / "rules"
    alerts_build.write(rules, mixin_config())
    result = Stack(workdir, build_fleet(), Receiver())
    try:
        result.fleet.start()
        result.start_alertmanager(alertmanager)
        rule_files = [
            rules / alerts_build.PROMETHEUS_ALERTS,
            rules / alerts_build.PROMETHEUS_RECORDING,
        ]
        result.start_prometheus(prometheus, rule_files, f"{SCRAPE_S:g}s")
        wait_for(
            "every agent scraped",
            lambda: result.query(f'count(up{{job="nvwatch"}} == 1) == {NODES}'),
            60,
        )
        result.fleet.run_time()
        result.started_monotonic = time.monotonic()
        yield result
    finally:
        result.close()


def straggler_alerts(stack: Stack, job_id: str, state: str = "firing") -> list[dict[str, str]]:
    """The labels of the job's NvwatchJobStraggler alerts in `state` now."""
    selector = f'alertname="{ALERT}",alertstate="{state}",job_id="{job_id}"'
    return [r["metric"] for r in stack.query(f"ALERTS{{{selector}}}")]


def culprit(labels: dict[str, str]) -> dict[str, str]:
    """The labels that name a culprit (absent ones left out)."""
    keys = ("job_id", "instance", "gpu", "device", "port", "cause")
    return {k: labels[k] for k in keys if k in labels}


def where_job_stopped(stack: Stack, job_id: str) -> str:
    """For a timeout: the job's alerts pending and firing, whether it is compared, and
    its highest straggler scores."""
    try:
        alerts = {
            state: [culprit(a) for a in straggler_alerts(stack, job_id, state)]
            for state in ("pending", "firing")
        }
        ranks = stack.query(f'job:nvwatch_straggler_ranks:count{{job_id="{job_id}"}}')
        scores = stack.query(f'topk(6, {{__name__=~".+:straggler_score",job_id="{job_id}"}})')
    except (OSError, ValueError, AssertionError) as exc:
        return f"job {job_id}: cannot tell ({exc})"
    shown = [
        f"{s['metric']['__name__'].split(':')[1]} {s['metric'].get('instance')}"
        f" gpu={s['metric'].get('gpu')} device={s['metric'].get('device')}"
        f" = {float(s['value'][1]):.2f}"
        for s in scores
    ]
    compared = ranks[0]["value"][1] if ranks else "not compared"
    return (
        f"job {job_id} after {time.monotonic() - stack.started_monotonic:.0f}s: alerts "
        f"{alerts}; ranks {compared}; top scores {shown}"
    )


def wait_firing(stack: Stack, straggler: Straggler) -> list[dict[str, str]]:
    """The job's firing alerts once the expected one is among them."""
    expected = straggler.labels()

    def firing() -> list[dict[str, str]] | None:
        found = [culprit(a) for a in straggler_alerts(stack, straggler.job_id)]
        return found if expected in found else None

    remaining = DEADLINE_S - (time.monotonic() - stack.started_monotonic)
    return wait_for(
        f"{ALERT} {expected}",
        firing,
        max(remaining, 1.0),
        every=1.0,
        explain=lambda: where_job_stopped(stack, straggler.job_id),
    )


@pytest.mark.parametrize("straggler", STRAGGLERS, ids=lambda s: s.cause)
def test_straggler_fires_naming_its_culprit_and_cause(stack: Stack, straggler: Straggler) -> None:
    found = wait_firing(stack, straggler)
    # the culprit alone: no other rank of the job is blamed, nor the culprit twice
    assert found == [straggler.labels()], where_job_stopped(stack, straggler.job_id)


def test_healthy_and_slowed_everywhere_jobs_stay_silent(stack: Stack) -> None:
    # the jobs started together: once every straggler has fired, the silent jobs have
    # been compared for as long as the stragglers' warm-up, window and `for:` took
    for straggler in STRAGGLERS:
        wait_firing(stack, straggler)
    for job_id in SILENT_JOB_IDS:
        ranks = stack.query(f'job:nvwatch_straggler_ranks:count{{job_id="{job_id}"}}')
        assert ranks, f"job {job_id} is not compared: {where_job_stopped(stack, job_id)}"
    run_s = int(time.monotonic() - stack.started_monotonic) + 1
    assert run_s >= WARMUP_S + RATE_WINDOW_S + FOR_S
    # slowed everywhere indeed: its ranks' median clock lower than the healthy job's by
    # more than a single rank's would need to stand out
    clocks = {
        r["metric"]["job_id"]: float(r["value"][1])
        for r in stack.query('job:nvwatch_gpu_sm_clock:ratio_median{job_id=~"3006|3007"}')
    }
    deviation = mixin_config().straggler_clock_deviation
    assert clocks["3007"] < clocks["3006"] - deviation, clocks
    ever = ever_alerted(stack, SILENT_JOB_IDS, run_s)
    assert ever == [], [culprit(r["metric"]) | {"samples": r["value"][1]} for r in ever]
    # the same question finds the stragglers' jobs: it would have found these
    blamed = ever_alerted(stack, [s.job_id for s in STRAGGLERS], run_s)
    assert {r["metric"]["job_id"] for r in blamed} == {s.job_id for s in STRAGGLERS}


def ever_alerted(stack: Stack, job_ids: Sequence[str], seconds: int) -> list[dict[str, Any]]:
    """The straggler alerts of these jobs pending or firing at any evaluation of the last
    `seconds`: one series per alert, its value the count of evaluations."""
    selector = f'alertname="{ALERT}",job_id=~"{"|".join(job_ids)}"'
    return stack.query(f"count_over_time(ALERTS{{{selector}}}[{seconds}s])")


def alertmanager_alerts(stack: Stack, labels: dict[str, str]) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode([("filter", f'{k}="{v}"') for k, v in labels.items()])
    url = f"{stack.alertmanager_url}/api/v2/alerts?{params}"
    with urllib.request.urlopen(url, timeout=10) as response:
        found: list[dict[str, Any]] = json.load(response)
        return found


def test_straggler_alert_arrives_at_alertmanager(stack: Stack) -> None:
    wait_firing(stack, DELIVERED)
    matchers = {"alertname": ALERT, **DELIVERED.labels()}
    (alert,) = wait_for(
        f"{ALERT} at Alertmanager",
        lambda: alertmanager_alerts(stack, matchers),
        30,
        explain=lambda: stack.where_alert_stopped(ALERT, DELIVERED.labels()),
    )
    assert alert["status"]["state"] == "active"
    assert {k: alert["labels"].get(k) for k in matchers} == matchers
    description = alert["annotations"]["description"]
    gpu, instance = DELIVERED.names["gpu"], f"dgx-{DELIVERED.node:03d}"
    assert f"Job {DELIVERED.job_id} has run at the pace of GPU {gpu} (GPU-" in description
    assert f") on {instance} (cause {DELIVERED.cause})" in description
