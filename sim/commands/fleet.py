"""`nvwatch simulate fleet`: many simulated agents in one process."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import FrameType

import click
import psutil

from nvwatch.agent import logs
from nvwatch.agent.cli.options import agent_options, option
from nvwatch.agent.config import (
    FLEET_DURATION_BOUNDS,
    INTERVAL_BOUNDS,
    SCENARIO_SYNTAX,
    ConfigError,
    split_scenarios,
)
from nvwatch.common.durations import DURATION_FORMAT, parse_duration
from nvwatch.common.outputs import output_file, writing
from nvwatch.sim.commands.group import simulate_group
from nvwatch.sim.fleet.fleet import Fleet
from nvwatch.sim.fleet.jobs import JOB_SYNTAX, NodeJobs, parse_job
from nvwatch.sim.fleet.plan import (
    DEFAULT_CLUSTER,
    DEFAULT_NODES_PER_RACK,
    FleetError,
    expand_profiles,
    parse_node_mig,
    parse_node_scenario,
)
from nvwatch.sim.fleet.queue import LIMIT_SYNTAX, QueueSpec, parse_limit
from nvwatch.sim.history.queue import ACCOUNTS
from nvwatch.sim.scenario_names import SLOWDOWN_SCENARIOS, known_scenarios

_SCENARIOS = ", ".join(known_scenarios())
_SLOWING = ", ".join(SLOWDOWN_SCENARIOS)


@simulate_group.command("fleet")
@option("--nodes", type=int, help="Number of nodes (needed with a plain --profile PROFILE).")
@option(
    "--profile",
    required=True,
    metavar="PROFILE[:COUNT],...",
    help="Hardware profile of every node, or a mix: dgx1-v100:100,dgx-a100:24.",
)
@option(
    "--base-port",
    type=int,
    default=9500,
    show_default=True,
    help="Node i listens on BASE+i; the management host probing their BMCs on BASE+N; "
    "with --queue, the Slurm controller's agent on BASE+N+1.",
)
@option(
    "--scenario",
    multiple=True,
    metavar=f"[NODE:]{SCENARIO_SYNTAX}",
    help="A scenario in the syntax of `serve --simulate`, on node NODE (0-based) or, "
    "without NODE:, on every node: 3:thermal-runaway@2, 5:ib-congestion@mlx5_1, "
    f"4:ecc-dbe@2,from=1m,until=5m. A fault that slows what it hits takes slowdown=S "
    f"(0 < S < 1, that part at 1 - S of its speed): 2:gpu-slow@3,slowdown=0.2 "
    f"({_SLOWING}). Repeatable. Scenarios: {_SCENARIOS}.",
)
@option(
    "--mig",
    multiple=True,
    metavar="NODE[-NODE]:LAYOUT",
    help="MIG layout of nodes (as `serve --mig`): 0-3:all:3g.40gb,3g.40gb. Repeatable.",
)
@option(
    "--job",
    multiple=True,
    metavar=JOB_SYNTAX,
    help="A simulated Slurm job on GPUs of node NODE (0-based; GPUS: N, N-M or all): "
    "0:0-3,user=alice,account=ml. Its node's agent runs with --attribution slurm over a "
    "job-mapping directory and /proc the fleet writes. NODE may be a range or a list "
    "(0-3, 0,2,4-5): one synchronous data-parallel job across them, each step waiting "
    "for its slowest rank, the others idling in NCCL (sync=yes makes a one-node job "
    "synchronous too). Repeatable; ids count from 1001.",
)
@option(
    "--queue",
    type=float,
    metavar="LOAD",
    help="Run a Slurm queue over the fleet: GPU jobs of four accounts arrive at LOAD times "
    "each partition's GPUs (a partition per node class; 1.2: demand above capacity), wait, "
    "start on free GPUs and end; every node's agent attributes its GPUs to them (--job's "
    "are pinned in the queue), and the cluster's Slurm controller (an agent running the "
    "scheduler source over the queue's simulated squeue, sinfo and sshare) listens on "
    "BASE+N+1. Seeded by --seed.",
)
@option(
    "--queue-limit",
    multiple=True,
    metavar=LIMIT_SYNTAX,
    help="With --queue: the account's running jobs hold at most GPUS GPUs (Slurm's "
    "GrpTRES=gres/gpu=GPUS); its other jobs wait for the limit, GPUs idle or not. "
    "Accounts: " + ", ".join(a.name for a in ACCOUNTS) + ". Repeatable.",
)
@option(
    "--repair-file",
    type=click.Path(dir_okay=False),
    help="Repair while running: each line NODE, NODE:NAME[@TARGET] or NODE:TARGET "
    "written to this file (echo 3:ecc-dbe@2 >> FILE) repairs those scenarios at the "
    "next tick; the file is consumed.",
)
@option(
    "--interval",
    default="15s",
    show_default=True,
    metavar="DURATION",
    help=f"Poll and simulation tick interval, {INTERVAL_BOUNDS}; {DURATION_FORMAT}.",
)
@option("--listen-host", default="127.0.0.1", show_default=True, help="Address every node binds.")
@option("--seed", type=int, default=0, show_default=True, help="Node i uses seed SEED+i.")
@option(
    "--file-sd",
    type=click.Path(dir_okay=False),
    help="Write a Prometheus file_sd JSON of the nodes here.",
)
@option(
    "--bmc-file-sd",
    type=click.Path(dir_okay=False),
    help="Write the nodes' BMCs here, file_sd targets of an `nvwatch-bmc` job that probes "
    "them through the management host (BASE+N, printed at start), with the nodes' labels.",
)
@option(
    "--time-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Simulated seconds per real second (faults unfold faster in tests and demos).",
)
@option("--cluster", default=DEFAULT_CLUSTER, show_default=True, help="`cluster` target label.")
@option(
    "--nodes-per-rack",
    type=int,
    default=DEFAULT_NODES_PER_RACK,
    show_default=True,
    help="Nodes per `rack` label.",
)
@option(
    "--duration",
    metavar="DURATION",
    help=f"Stop after this long, {FLEET_DURATION_BOUNDS} (default: run until SIGTERM/SIGINT).",
)
@option(
    "--stats-every",
    type=int,
    default=4,
    show_default=True,
    help="Every this many intervals print the process's CPU (share of one core, simulator "
    "included), RSS and polls done (0: never).",
)
@agent_options("log-format")
def simulate_fleet(
    nodes: int | None,
    profile: str,
    base_port: int,
    scenario: tuple[str, ...],
    mig: tuple[str, ...],
    job: tuple[str, ...],
    queue: float | None,
    queue_limit: tuple[str, ...],
    repair_file: str | None,
    interval: str,
    listen_host: str,
    seed: int,
    file_sd: str | None,
    bmc_file_sd: str | None,
    time_scale: float,
    cluster: str,
    nodes_per_rack: int,
    duration: str | None,
    stats_every: int,
    log_format: str,
) -> None:
    """Serve N simulated nodes from one process, each an agent on its own port.

    Every node has its own simulated NVML and InfiniBand sysfs tree; all share the real
    host's CPU and memory figures (the host source reads this machine), but for the nodes
    of a synchronous job or with cpu-starved, whose CPU figures are simulated.
    """
    logs.configure(log_format)
    fleet = _build_fleet(
        nodes,
        profile,
        scenario,
        interval,
        base_port=base_port,
        seed=seed,
        time_scale=time_scale,
        listen_host=listen_host,
        cluster=cluster,
        nodes_per_rack=nodes_per_rack,
        repair_file=Path(repair_file) if repair_file else None,
        mig=mig,
        jobs=job,
        queue=queue,
        queue_limits=queue_limit,
    )
    limit = parse_duration(duration, "duration", FLEET_DURATION_BOUNDS) if duration else None
    sd_path = output_file(file_sd, "--file-sd") if file_sd else None
    bmc_sd_path = output_file(bmc_file_sd, "--bmc-file-sd") if bmc_file_sd else None
    stop = _stop_on_signals()
    started = time.monotonic(), time.process_time()
    _start(fleet)
    try:
        if sd_path is not None:
            with writing("--file-sd"):
                fleet.write_file_sd(sd_path)
        if bmc_sd_path is not None:
            with writing("--bmc-file-sd"):
                fleet.write_bmc_file_sd(bmc_sd_path)
        _announce(fleet, started)
        _wait(fleet, stop, limit, stats_every)
    finally:
        fleet.stop()


def _build_fleet(
    nodes: int | None,
    profile: str,
    scenario: tuple[str, ...],
    interval: str,
    *,
    base_port: int,
    seed: int,
    time_scale: float,
    listen_host: str,
    cluster: str,
    nodes_per_rack: int,
    repair_file: Path | None = None,
    mig: tuple[str, ...] = (),
    jobs: tuple[str, ...] = (),
    queue: float | None = None,
    queue_limits: tuple[str, ...] = (),
) -> Fleet:
    """The planned fleet, not yet started; ConfigError on any bad option."""
    if nodes is not None and nodes < 1:
        raise ConfigError("--nodes must be at least 1")
    if time_scale <= 0:
        raise ConfigError("--time-scale must be greater than zero")
    try:
        return Fleet(
            expand_profiles(profile, nodes),
            base_port=base_port,
            interval=parse_duration(interval, "interval", INTERVAL_BOUNDS),
            scenarios=[parse_node_scenario(s) for s in split_scenarios(scenario)],
            seed=seed,
            time_scale=time_scale,
            listen_host=listen_host,
            cluster=cluster,
            nodes_per_rack=nodes_per_rack,
            repair_file=repair_file,
            mig=[parse_node_mig(m) for m in mig],
            jobs=[parse_job(text, number) for number, text in enumerate(jobs)],
            queue=_queue(queue, queue_limits),
        )
    except FleetError as exc:
        raise ConfigError(str(exc)) from exc


def _queue(load: float | None, limits: tuple[str, ...]) -> QueueSpec | None:
    if load is None:
        if limits:
            raise FleetError("--queue-limit needs --queue")
        return None
    return QueueSpec(load, limits=tuple(parse_limit(text) for text in limits))


def _stop_on_signals() -> threading.Event:
    """An event that SIGTERM and SIGINT set: the command stops the fleet in order."""
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def _start(fleet: Fleet) -> None:
    try:
        fleet.start()
    except (OSError, FleetError) as exc:
        # a node's port in use is a FleetError naming the node, the address and why
        fleet.stop()
        raise ConfigError(f"cannot start the fleet: {exc}") from exc


def _announce(fleet: Fleet, started: tuple[float, float]) -> None:
    """One line per node on stdout, then how long starting took on stderr."""
    for node in fleet.nodes:
        faults = " ".join(str(s) for s in node.spec.scenarios)
        held = "" if fleet.queue is not None else _jobs_line(fleet.node_jobs.get(node.index))
        click.echo(
            f"{node.name}  {node.spec.profile:<20} {node.spec.rack}  {node.url}  {faults}  {held}"
        )
    if fleet.queue is not None:
        click.echo(fleet.queue.summary())
    if fleet.controller is not None:
        click.echo(f"Slurm controller: {fleet.controller.url} (--sources scheduler)")
    if fleet.management is not None:
        click.echo(
            f"management host: http://{fleet.management.address}/probe?target=BMC&module=default"
            f" (BMCs {fleet.specs[0].bmc} .. {fleet.specs[-1].bmc})"
        )
    wall, cpu = started
    click.echo(
        f"fleet: {len(fleet.nodes)} nodes up in {time.monotonic() - wall:.1f}s "
        f"({time.process_time() - cpu:.1f}s CPU); Ctrl-C stops",
        err=True,
    )


def _jobs_line(jobs: NodeJobs | None) -> str:
    """The simulated Slurm jobs of a node, for its start-up line."""
    if jobs is None:
        return ""
    return " ".join(
        f"job {j.job_id} ({j.user}) GPUs {','.join(map(str, jobs.gpus_of(j)))}" for j in jobs.jobs
    )


def _wait(fleet: Fleet, stop: threading.Event, limit: float | None, stats_every: int) -> None:
    deadline = None if limit is None else time.monotonic() + limit
    period = fleet.interval * stats_every if stats_every > 0 else None
    last_cpu, last_wall, last_polls = time.process_time(), time.monotonic(), _polls(fleet)
    while True:
        waits = [w for w in (period, deadline and deadline - time.monotonic()) if w is not None]
        if stop.wait(min(waits) if waits else None):
            return
        if deadline is not None and time.monotonic() >= deadline:
            return
        cpu, wall, polls = time.process_time(), time.monotonic(), _polls(fleet)
        click.echo(
            _stats_line(fleet, cpu - last_cpu, wall - last_wall, polls - last_polls), err=True
        )
        last_cpu, last_wall, last_polls = cpu, wall, polls


def _polls(fleet: Fleet) -> int:
    """Polls every node's agent has completed so far (each snapshot is numbered)."""
    return sum(
        latest.sequence for node in fleet.nodes if (latest := node.agent.poller.latest) is not None
    )


def _stats_line(fleet: Fleet, cpu: float, wall: float, polls: int) -> str:
    """The whole process's CPU over the last period as a share of one core (simulator,
    agents and servers together), its RSS, and the polls done in the period."""
    down = sum(
        1
        for node in fleet.nodes
        if node.listening and node.agent.poller.latest is not None
        for status in node.agent.poller.latest.sources.values()
        if not status.up
    )
    rss_mb = psutil.Process().memory_info().rss / 1e6
    return (
        f"fleet: {len(fleet.nodes)} nodes, CPU {100 * cpu / wall:.1f}% "
        f"of one core over {wall:.0f}s, RSS {rss_mb:.0f} MB, {polls} polls, "
        f"ticks {fleet.tick_cpu_seconds:.2f}s CPU per round, {down} sources down"
    )
