"""A fleet with a Slurm queue: the jobs the queue places on a node are the jobs that
node's agent attributes its GPUs to, at every moment the queue is brought to; `--job`s
stay pinned where they were placed; the queue's squeue, sinfo and sshare print it to the
scheduler source's own runner, and the fleet's Slurm controller (the real source over
them) exports it; bad queue input is one line and exit 2."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.sources.scheduler.fairshare import read_fairshare
from nvwatch.agent.sources.scheduler.slurm_commands import SchedulerError, run_slurm
from nvwatch.sim.fleet.fleet import Fleet
from nvwatch.sim.fleet.jobs import FleetJob
from nvwatch.sim.fleet.node import FleetNode
from nvwatch.sim.fleet.queue import QueueSpec
from nvwatch.sim.history.scheduler import CONTROLLER, SchedulerSeries

HOUR = 3600.0
LABEL = re.compile(r'(\w+)="([^"]*)"')
PINNED = FleetJob(3, (0, 1), "1001", "alice", "ml")

Held = dict[int, tuple[str, str, str]]  # GPU -> (job id, user, account)


def _attributed(node: FleetNode) -> Held:
    """What the node's agent exports as its GPUs' allocations, after one refresh and one
    poll (the refresher's own thread runs at the fleet's interval)."""
    (source,) = [s for s in node.agent.sources if s.name == "attribution"]
    source.refresher.refresh()  # type: ignore[attr-defined]
    node.agent.poller.poll_once()
    exposition = node.agent.exposition()
    assert exposition is not None
    held: Held = {}
    for family in text_string_to_metric_families(exposition.text.decode()):
        for s in family.samples:
            if s.name == "nvwatch_gpu_allocation_info":
                assert int(s.labels["gpu"]) not in held, "one job per GPU in a queue"
                held[int(s.labels["gpu"])] = (
                    s.labels["job_id"],
                    s.labels["user"],
                    s.labels["account"],
                )
    return held


def _placed(fleet: Fleet, index: int) -> Held:
    assert fleet.queue is not None
    return {
        gpu: (job.job_id, job.user, job.account)
        for job in fleet.queue.jobs_on(index)
        for gpu in job.gpus or ()
    }


def test_each_agent_attributes_its_gpus_to_the_jobs_the_queue_placed_there() -> None:
    fleet = Fleet(
        ["dgx-a100", "dgx-a100", "dgx1-v100", "dgx1-v100"],
        base_port=0,
        interval=60.0,  # the test moves the queue itself; the ticker hardly runs
        seed=4,
        hold_time=True,
        queue=QueueSpec(1.1),
        jobs=[PINNED],
    )
    fleet.start()
    try:
        assert fleet.queue is not None
        start = fleet.clock()
        seen: list[dict[int, Held]] = []
        for later in (0.0, 2 * HOUR, 7 * HOUR):
            fleet.run_queue(start + later)
            placed = {node.index: _placed(fleet, node.index) for node in fleet.nodes}
            assert {node.index: _attributed(node) for node in fleet.nodes} == placed
            seen.append(placed)
        pinned = {gpu: ("1001", "alice", "ml") for gpu in PINNED.gpus or ()}
        for placed in seen:
            assert {g: placed[3][g] for g in pinned} == pinned
            assert sum(len(held) for held in placed.values()) > 8  # a busy queue
        assert seen[0] != seen[1] != seen[2]  # jobs ended, others started
        state = fleet.queue.model.state()
        held = sum(len(h) for h in seen[-1].values())
        assert held == sum(n for (_, s), n in state.gpus.items() if s == "allocated")
        assert {p for p, _ in state.gpus} == {"a100", "v100"}
        _the_queues_commands_print_it(fleet)
        _the_controller_exports_it(fleet)
    finally:
        fleet.stop()
    assert fleet.controller is None


def _the_controller_exports_it(fleet: Fleet) -> None:
    """The fleet's Slurm controller, scraped over HTTP after a refresh, exports what the
    history would write for the same queue (its gauges; sim/history/scheduler.py)."""
    assert fleet.queue is not None and fleet.controller is not None
    controller = fleet.controller
    assert controller.source.refresh() is not None
    controller.agent.poller.poll_once()
    with urllib.request.urlopen(controller.url, timeout=10) as response:
        body = response.read().decode()
    scraped = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    series = SchedulerSeries("sim")
    rows, _ = series.scrape(fleet.queue.model.state())
    compared = 0
    for name, labels, value in rows:
        if name.startswith("nvwatch_scheduler_") and not name.endswith("_total"):
            own = frozenset((k, v) for k, v in LABEL.findall(labels) if k not in series.target)
            if (name, own) in scraped:  # a pair this agent has not seen since it started
                assert scraped[name, own] == pytest.approx(value, abs=1e-6), (name, own)
                compared += 1
    assert compared > 50
    assert scraped["nvwatch_agent_simulated", frozenset({("profile", "slurm")})] == 1.0
    assert scraped["nvwatch_agent_source_up", frozenset({("source", "scheduler")})] == 1.0
    (group,) = [g for g in fleet.file_sd() if g["labels"]["instance"] == CONTROLLER]
    assert group["targets"] == [controller.address]


def test_a_limited_account_waits_while_gpus_idle() -> None:
    """--queue-limit: the account never holds more than its limit, and its jobs wait for
    it with GPUs of their partition idle: what the fragmentation alert is for."""
    fleet = Fleet(
        ["dgx-a100"] * 3,
        base_port=0,
        interval=60.0,
        seed=8,
        hold_time=True,
        queue=QueueSpec(0.5, limits=(("robotics", 2),)),
    )
    fleet.start()
    try:
        assert fleet.queue is not None
        start, waited_idle = fleet.clock(), 0
        for hour in range(1, 13):
            fleet.run_queue(start + hour * HOUR)
            model = fleet.queue.model
            held = sum(
                j.request.gpus for j in model.running.values() if j.request.account == "robotics"
            )
            assert held <= 2
            state = model.state()
            limited = state.pending_gpus.get(("a100", "robotics", "limits"), 0)
            if limited and state.gpus["a100", "idle"] > 0:
                waited_idle += 1
        assert waited_idle >= 6
    finally:
        fleet.stop()


def _the_queues_commands_print_it(fleet: Fleet) -> None:
    """Through the scheduler source's own runner and sshare reader, as its subprocesses."""
    assert fleet.queue is not None and fleet.slurm is not None
    model, env = fleet.queue.model, fleet.slurm.env()
    jobs = json.loads(run_slurm(("squeue", "--json"), 10, env))["jobs"]
    running = {j["job_id"] for j in jobs if j["job_state"] == "RUNNING"}
    assert running == set(model.running) and len(jobs) >= len(model.running) + len(model.pending)
    nodes = json.loads(run_slurm(("sinfo", "--json"), 10, env))["nodes"]
    assert [n["name"] for n in nodes] == [node.name for node in fleet.nodes]
    shares = read_fairshare(10, env)
    assert shares is not None
    expected = model.fair_shares()
    assert {s.account for s in shares} == set(expected)
    for share in shares:
        truth = expected[share.account]
        assert share.shares_norm == pytest.approx(truth.shares_norm, abs=1e-6)
        assert share.usage_effective == pytest.approx(truth.usage_effective, abs=1e-6)
        assert share.factor == pytest.approx(truth.factor, abs=1e-6)
    with pytest.raises(SchedulerError) as failed:
        run_slurm(("squeue", "-h", "-o", "%i"), 10, env)
    assert str(failed.value) == "squeue failed: squeue: simulated: only 'squeue --json' is answered"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "0"], "invalid queue load 0: use more than 0 and at most 10"),
        (["--queue", "11"], "invalid queue load 11"),
        (["--queue", "1", "--job", "0:0,id=abc"], "job abc: with --queue a job id is a number"),
        (
            ["--queue", "1", "--job", "0:0-1", "--job", "0:1"],
            "with --queue, job 1002: GPU 1 of dgx-000 is taken",
        ),
        (["--queue-limit", "nlp:2"], "--queue-limit needs --queue"),
        (["--queue", "1", "--queue-limit", "physics:2"], "--queue-limit physics: no such account"),
        (["--queue", "1", "--queue-limit", "nlp"], "invalid queue limit 'nlp': use ACCOUNT:GPUS"),
    ],
)
def test_bad_queue_input_is_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from nvwatch.agent.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "fleet", "--profile", "dgx1-v100:2", "--base-port", "0", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
