"""The queue alert end to end: a real Slurm, the scheduler source in `nvwatch serve`, and a
real Prometheus that scrapes it with the mixin's rules.

One node with 2 fake GPUs and 2 CPUs (cluster.py's default layout), partition `debug`.
First every GPU is busy: a job holds both and another waits for one (reason Resources).
That wait is the cluster's size, and NvwatchSchedulerJobsWaitingWhileGpusIdle must stay
quiet through a wait longer than its threshold and its `for:` together. Then a job holds
one GPU and both CPUs and another waits for a GPU and a CPU: a GPU sits idle while the
job waits, as with GPUs scattered where a job needs them together, and the alert must
fire for the partition. The mixin's durations are shrunk (the wait threshold to seconds);
what Prometheus saw of the idle GPUs is compared with what sinfo prints. Last, every query
of the queue & fairness dashboard is asked of that Prometheus: each has data but the fair
share's, which is absent on a cluster without accounting (slurmdbd).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nvwatch.alerts import build as alerts_build
from nvwatch.dashboards.build import build_all
from nvwatch.dashboards.preview import substitute
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.ports import free_port
from tests.conftest import require_tool
from tests.e2e.loopback import Endpoint, instant_query, spawn_logged, wait_for
from tests.e2e.service_commands import prometheus_argv, prometheus_config, write_yaml
from tests.processes import stop_all
from tests.slurm.cluster import Cluster, slurm_cluster
from tests.slurm.test_real_slurm import _need_slurm

pytestmark = pytest.mark.timeout(300)

NVWATCH = str(Path(sys.executable).parent / "nvwatch")
HOST = "127.0.0.1"
CLUSTER = "slurmtest"
PARTITION = "debug"
ALERT = "NvwatchSchedulerJobsWaitingWhileGpusIdle"
WAIT_S = 6  # scheduler_wait_while_idle, shrunk from 30 minutes
FOR_S = 4  # for_slow, shrunk from 15 minutes


def mixin_config() -> MixinConfig:
    return MixinConfig().with_overrides(
        scheduler_wait_while_idle=f"{WAIT_S}s",
        for_slow=f"{FOR_S}s",
        evaluation_interval="1s",
        keep_firing_for="1s",
    )


@dataclass
class Stack:
    cluster: Cluster
    prometheus_url: str = ""
    agent: str = ""  # the agent's address, its `instance`
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def query(self, expr: str) -> list[dict[str, Any]]:
        return instant_query(self.prometheus_url, expr)

    def submit(self, *flags: str) -> str:
        return self.cluster.run(
            "sbatch", "--parsable", "--output=/dev/null", *flags, "--wrap=sleep 600"
        ).split(";")[0]

    def cancel_all(self) -> None:
        self.cluster.run("scancel", "--user=root")
        wait_for("the queue empty", lambda: not self.cluster.run("squeue", "-h", "-o", "%i"), 60)

    def close(self) -> None:
        stop_all(self.processes, 10)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    _need_slurm()
    prometheus = require_tool("prometheus")
    work = tmp_path_factory.mktemp("queue-alerts")
    rules = work / "rules"
    alerts_build.write(rules, mixin_config())
    with slurm_cluster("linuxproc") as cluster:
        running = Stack(cluster)
        try:
            _start_agent(running, work)
            _start_prometheus(running, work, prometheus, rules)
            wait_for(
                "the scheduler series scraped",
                lambda: running.query(f'nvwatch_scheduler_gpus{{partition="{PARTITION}"}}'),
                60,
            )
            yield running
        finally:
            running.close()


def _start_agent(stack: Stack, work: Path) -> None:
    stack.agent = f"{HOST}:{free_port(HOST)}"
    argv = [
        NVWATCH, "serve", "--listen", stack.agent, "--sources", "scheduler",
        "--interval", "1s", "--scheduler-interval", "1s",
    ]  # fmt: skip
    stack.processes.append(spawn_logged(argv, work / "agent.log", env=stack.cluster.env))


def _start_prometheus(stack: Stack, work: Path, binary: str, rules: Path) -> None:
    targets = work / "targets"
    targets.mkdir()
    group = {"targets": [stack.agent], "labels": {"cluster": CLUSTER}}
    (targets / "scheduler.json").write_text(json.dumps([group]), encoding="utf-8")
    config = prometheus_config(
        rule_files=[
            rules / alerts_build.PROMETHEUS_ALERTS,
            rules / alerts_build.PROMETHEUS_RECORDING,
        ],
        targets=targets,
        scrape_interval="1s",
        scrape_timeout="1s",
        evaluation_interval="1s",
        sd_refresh="1s",
    )
    endpoint = Endpoint.free()
    path = write_yaml(work / "prometheus.yml", config)
    argv = prometheus_argv(binary, path, work / "prometheus-data", endpoint)
    stack.processes.append(spawn_logged(argv, work / "prometheus.log"))
    stack.prometheus_url = endpoint.url
    wait_for("Prometheus ready", lambda: _ready(endpoint.url), 30)


def _ready(url: str) -> bool:
    try:
        instant_query(url, "vector(1)")
    except OSError:
        return False
    return True


def _state(stack: Stack, job: str) -> str:
    return stack.cluster.run("squeue", "-h", "-j", job, "-o", "%T|%r")


def _idle_gpus_sinfo(stack: Stack) -> int:
    """GPUs configured minus GPUs used, as sinfo prints them (gpu:2, gpu:1(IDX:0))."""
    gres, used = stack.cluster.run("sinfo", "-h", "-N", "-O", "Gres:40,GresUsed:40").split()
    return int(gres.split(":")[-1]) - int(used.split(":")[-1].split("(")[0])


def _served(stack: Stack, name: str, *matchers: str) -> list[float]:
    """The partition's values of series `name` in Prometheus now."""
    selector = ", ".join((f'cluster="{CLUSTER}"', f'partition="{PARTITION}"', *matchers))
    return [float(s["value"][1]) for s in stack.query(f"{name}{{{selector}}}")]


def _waiting_on_resources(stack: Stack, job: str) -> None:
    wait_for(
        f"job {job} pending on Resources", lambda: _state(stack, job) == "PENDING|Resources", 30
    )


def test_quiet_while_every_gpu_is_busy(stack: Stack) -> None:
    started = time.monotonic()
    try:
        holder = stack.submit("--gres=gpu:2")
        wait_for("both GPUs held", lambda: _state(stack, holder).startswith("RUNNING"), 30)
        waiting = stack.submit("--gres=gpu:1")
        _waiting_on_resources(stack, waiting)
        assert _idle_gpus_sinfo(stack) == 0
        # long enough that the alert would have fired with a GPU idle: its wait
        # threshold, its for: and a few evaluations and scrapes
        limit = WAIT_S + FOR_S + 5
        wait_for(
            f"the job waiting {limit} s as Prometheus sees it",
            lambda: (
                max(_served(stack, "nvwatch_scheduler_oldest_pending_seconds"), default=0) > limit
            ),
            60,
        )
        time.sleep(3)  # a few more evaluations on the last scrape
        assert _served(stack, "nvwatch_scheduler_gpus", 'state="idle"') == [0.0]
        # neither pending nor firing at any evaluation of this phase
        phase = int(time.monotonic() - started)
        seen = stack.query(f'count_over_time(ALERTS{{alertname="{ALERT}"}}[{phase}s])')
        assert seen == [], seen
    finally:
        stack.cancel_all()


def test_fires_when_a_job_waits_while_a_gpu_is_idle(stack: Stack) -> None:
    try:
        # one GPU and both CPUs: the other GPU is idle, and no job can have it
        holder = stack.submit("--gres=gpu:1", "--cpus-per-task=2")
        wait_for(
            "one GPU and the CPUs held", lambda: _state(stack, holder).startswith("RUNNING"), 30
        )
        waiting = stack.submit("--gres=gpu:1")
        _waiting_on_resources(stack, waiting)
        assert _idle_gpus_sinfo(stack) == 1
        firing = wait_for(
            "the alert firing",
            lambda: stack.query(f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}'),
            60,
        )
        (alert,) = [s["metric"] for s in firing]
        assert alert["partition"] == PARTITION and alert["cluster"] == CLUSTER
        assert alert["instance"] == stack.agent and alert["severity"] == "warning"
        idle = _served(stack, "nvwatch_scheduler_gpus", 'state="idle"')
        assert idle == [float(_idle_gpus_sinfo(stack))]
    finally:
        stack.cancel_all()


def test_every_queue_panel_has_data_but_fair_share_without_accounting(stack: Stack) -> None:
    """The real source's series fit the dashboard's queries: labels, the histogram's `le`,
    the zeros of every class. The jobs of the tests before have started, waited and held
    GPUs within the range."""
    variables = {
        "cluster": ".*",
        "partition": ".*",
        "__range": "5m",
        "__range_s": "300",
        "__interval": "1s",
        "__rate_interval": "5s",
    }
    dashboard = build_all(mixin_config())["nvwatch-queue.json"]
    empty = {
        (panel["title"], target["refId"])
        for panel in dashboard["panels"]
        for target in panel["targets"]
        if not stack.query(substitute(target["expr"], variables))
    }
    fair_share = {
        (panel["title"], target["refId"])
        for panel in dashboard["panels"]
        for target in panel["targets"]
        if "nvwatch_scheduler_fairshare" in target["expr"]
    }
    assert len(fair_share) == 3
    assert empty == fair_share
