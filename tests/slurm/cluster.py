"""A real one-node Slurm (Debian's slurm-wlm and munge) on 127.0.0.1, in a temp dir.

What works on a test machine as root: munged on its own
socket, slurmctld and slurmd in the foreground from inside the directory, two fake GPUs
as character devices for GRES, and the cgroup v1 plugin (the hybrid hierarchy has no
usable cgroup v2). `proctrack` picks how jobs are tracked: "cgroup" puts their processes
in `/slurm_<host>/uid_<uid>/job_<id>/...` cgroups, "linuxproc" leaves them where slurmd
runs (then only the job's environment names it). The deploy/slurm prolog and epilog run
for every job, writing the job-mapping directory `map_dir`. With `accounting` the
controller reports to a real slurmdbd and MariaDB (accounting.py) and computes fair share;
without it there is no accounting at all (`accounting_storage/none`).

A `Layout` shapes the cluster beyond that: more (typed) fake GPUs and CPUs on the one
node (slurmd then takes the configured CPUs, config_overrides, rather than draining the
node for having fewer), several partitions sharing it, and nodes that are configured but
never started (DOWN: the controller pings them on a port where nothing listens).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from nvwatch.sim.ports import free_port
from tests.processes import stop
from tests.slurm.accounting import STOP_LIMIT_S, Slurmdbd, accounting_store, start_daemon

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "slurm"
START_LIMIT_S = 60.0
CLUSTER_NAME = "nvwatchtest"


@dataclass(frozen=True)
class Layout:
    """The cluster's shape; the default is slurm-notes' one node, one partition, 2 GPUs."""

    gpus: int = 2
    gpu_type: str | None = None  # typed GRES (gpu:<type>:N) when set
    cpus: int = 2
    partitions: tuple[str, ...] = ("debug",)  # each holds the node; the first is the default
    # configured, never started, so DOWN: (name, GPUs), in the last partition only
    down_nodes: tuple[tuple[str, int], ...] = ()
    partition_options: str = ""  # more settings of every partition (OverSubscribe=FORCE:4)
    extra: str = ""  # more slurm.conf lines

    @property
    def gres(self) -> str:
        return f"gpu:{self.gpu_type}:{{n}}" if self.gpu_type else "gpu:{n}"


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]
    host: str
    map_dir: Path
    out_dir: Path  # world-writable: jobs of other users write here
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(self, *args: str) -> str:
        done = subprocess.run(
            args, env=self.env, capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout.strip()

    def job_state(self, job: str) -> str:
        """RUNNING, PENDING, ...; "" once the controller has forgotten the job."""
        return self.run("squeue", "-h", "-j", job, "-o", "%T") if job else ""

    def wait_for(self, what: str, check: object, limit: float = START_LIMIT_S) -> None:
        deadline = time.monotonic() + limit
        while not check():  # type: ignore[operator]
            if time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                    for p in sorted((self.root / "log").glob("*.log"))
                )
                raise TimeoutError(f"Slurm: {what} within {limit:g}s\n{logs}")
            time.sleep(0.2)

    def restart_controller(self) -> None:
        """Stop slurmctld (it saves its state) and start it again; returns once it answers.
        Running jobs go on; with accounting the restart charges their usage so far."""
        self.stop_controller()
        self.start_controller()

    def stop_controller(self) -> None:
        """Stop slurmctld (by its pid), as a controller that went down."""
        running = self.daemons.pop("slurmctld", None)
        if running is not None:
            stop(running, STOP_LIMIT_S)

    def start_controller(self) -> None:
        """Start slurmctld from its state directory; returns once it answers."""
        self.daemons["slurmctld"] = start_daemon(["slurmctld", "-D"], self.root, self.env)
        self.wait_for("slurmctld answering", lambda: _quiet(self, "sinfo", "-h", "-o", "%T"))


NO_ACCOUNTING = "AccountingStorageType=accounting_storage/none\n"


def _write_config(
    root: Path,
    host: str,
    proctrack: str,
    map_dir: Path,
    health_check: str | None = None,
    accounting: str = NO_ACCOUNTING,
    layout: Layout = Layout(),
) -> None:
    for sub in ("munge", "state", "spool", "log"):
        (root / sub).mkdir()
    (root / "munge").chmod(0o755)  # the socket's directory must be world-executable
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o400)
    for n in range(layout.gpus):
        os.mknod(root / f"fakegpu{n}", 0o666 | 0o020000, os.makedev(195, n))
    for name in ("prolog", "epilog"):
        script = root / f"{name}.sh"
        script.write_text(
            f"#!/bin/sh\nNVWATCH_HPC_JOB_MAPPING_DIR={map_dir} "
            f"exec {DEPLOY / f'nvwatch-{name}.sh'}\n"
        )
        script.chmod(0o755)
    # slurmd runs it at start-up and every interval, with an environment of its own
    health = (
        f"HealthCheckProgram={root}/healthcheck.sh\nHealthCheckInterval=5\n"
        if health_check is not None
        else ""
    )
    if health_check is not None:
        script = root / "healthcheck.sh"
        script.write_text(f"#!/bin/sh\nexport SLURM_CONF={root}/slurm.conf\n{health_check}\n")
        script.chmod(0o755)
    tracking = (
        "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n"
        if proctrack == "cgroup"
        else "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
    )
    (root / "slurm.conf").write_text(
        f"""ClusterName={CLUSTER_NAME}
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.sock
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
{tracking}SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
{accounting}MpiDefault=none
ReturnToService=2
GresTypes=gpu
Prolog={root}/prolog.sh
Epilog={root}/epilog.sh
{health}{_nodes_and_partitions(host, layout)}"""
    )
    kind = f" Type={layout.gpu_type}" if layout.gpu_type else ""
    (root / "gres.conf").write_text(
        f"AutoDetect=off\nNodeName={host} Name=gpu{kind} File={root}/fakegpu[0-{layout.gpus - 1}]\n"
    )
    (root / "cgroup.conf").write_text(
        "CgroupPlugin=cgroup/v1\nConstrainCores=yes\nConstrainDevices=yes\n"
    )


def _nodes_and_partitions(host: str, layout: Layout) -> str:
    lines = [
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={layout.cpus} RealMemory=1000 "
        f"Gres={layout.gres.format(n=layout.gpus)} State=UNKNOWN"
    ]
    # a port of their own: at the node's address and port, slurmd would answer for them
    lines += [
        f"NodeName={name} NodeAddr=127.0.0.1 Port={free_port()} CPUs=2 RealMemory=1000 "
        f"Gres={layout.gres.format(n=gpus)} State=DOWN"
        for name, gpus in layout.down_nodes
    ]
    for index, partition in enumerate(layout.partitions):
        nodes = [host]
        if index == len(layout.partitions) - 1:
            nodes += [name for name, _ in layout.down_nodes]
        default = "YES" if index == 0 else "NO"
        lines.append(
            f"PartitionName={partition} Nodes={','.join(nodes)} Default={default} "
            f"MaxTime=INFINITE State=UP {layout.partition_options}".rstrip()
        )
    if layout.cpus > 2:
        lines.append("SlurmdParameters=config_overrides")
    return "\n".join([*lines, layout.extra, ""])


@contextmanager
def slurm_cluster(
    proctrack: str,
    health_check: str | None = None,
    accounting: bool = False,
    layout: Layout = Layout(),
) -> Iterator[Cluster]:
    """munged + slurmctld + slurmd in a fresh directory under /tmp (not pytest's, which
    other users cannot traverse: jobs run as nobody write to its `out`); every process
    stopped, Slurm's cgroups and the directory removed. `health_check`: a shell command
    slurmd runs as its HealthCheckProgram (with SLURM_CONF set), every 5 s. `accounting`:
    slurmdbd and MariaDB too, the cluster registered in them (accounts are the test's).
    `layout`: the nodes, GPUs and partitions (Layout)."""
    root = Path(tempfile.mkdtemp(prefix="nvwatch-slurm-"))
    root.chmod(0o755)
    try:
        with _running(root, proctrack, health_check, accounting, layout) as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _running(
    root: Path, proctrack: str, health_check: str | None, accounting: bool, layout: Layout
) -> Iterator[Cluster]:
    host = socket.gethostname().split(".")[0]
    map_dir = root / "job-map"
    out_dir = root / "out"
    out_dir.mkdir()
    out_dir.chmod(0o1777)
    munge = root / "munge"
    store = Slurmdbd(free_port(), munge / "munge.sock") if accounting else None
    _write_config(
        root,
        host,
        proctrack,
        map_dir,
        health_check,
        store.slurm_conf() if store else NO_ACCOUNTING,
        layout,
    )
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    cluster = Cluster(root, env, host, map_dir, out_dir)
    daemons = cluster.daemons
    stack = ExitStack()
    try:
        daemons["munged"] = start_daemon(
            [
                "munged",
                "--foreground",
                f"--key-file={munge}/munge.key",
                f"--socket={munge}/munge.sock",
                f"--pid-file={munge}/munged.pid",
                f"--log-file={munge}/munged.log",
                f"--seed-file={munge}/munged.seed",
            ],
            root,
            env,
        )
        cluster.wait_for("munged socket", (munge / "munge.sock").exists)
        if store is not None:
            stack.enter_context(accounting_store(root, env, host, CLUSTER_NAME, store))
        daemons["slurmctld"] = start_daemon(["slurmctld", "-D"], root, env)
        daemons["slurmd"] = start_daemon(["slurmd", "-D"], root, env)
        # a health check may drain the node as it registers
        cluster.wait_for(
            "node registered", lambda: _node_state(cluster) in ("idle", "drained", "draining")
        )
        yield cluster
    finally:
        _cancel_jobs(cluster)
        for name in ("slurmd", "slurmctld"):
            if name in daemons:
                stop(daemons.pop(name), STOP_LIMIT_S)
        stack.close()  # slurmdbd and its database, once the controller no longer reports
        for daemon in daemons.values():
            stop(daemon, STOP_LIMIT_S)
        _kill_stepds(root / "slurm.conf")
        _remove_slurm_cgroups(host)


def _node_state(cluster: Cluster) -> str:
    """The started node's state (sinfo prints it once per partition)."""
    lines = _quiet(cluster, "sinfo", "-h", "-n", cluster.host, "-o", "%T").splitlines()
    return lines[0] if lines else ""


def _cancel_jobs(cluster: Cluster) -> None:
    """Cancel every job and wait (bounded) until slurmd has ended their steps."""
    if "slurmctld" not in cluster.daemons:
        return  # a test stopped the controller: nothing to ask; stepds are killed below
    jobs = _quiet(cluster, "squeue", "-h", "-o", "%A").split()
    if jobs:
        _quiet(cluster, "scancel", "--full", *jobs)
    deadline = time.monotonic() + 20
    while _quiet(cluster, "squeue", "-h", "-o", "%i") and time.monotonic() < deadline:
        time.sleep(0.2)


def _kill_stepds(conf: Path) -> None:
    """A slurmstepd of this cluster that outlived slurmd (it daemonizes): killed by pid,
    found by the SLURM_CONF in its environment, so no other Slurm on the host is touched."""
    marker = f"SLURM_CONF={conf}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "slurmstepd":
                continue
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue  # gone meanwhile


def _quiet(cluster: Cluster, *args: str) -> str:
    try:
        return cluster.run(*args)
    except (RuntimeError, subprocess.TimeoutExpired):
        return ""


def _remove_slurm_cgroups(host: str) -> None:
    """Slurm leaves /sys/fs/cgroup/<controller>/slurm_<host> behind: rmdir it, deepest
    first (a cgroup directory is removed with rmdir, never with its files)."""
    for top in Path("/sys/fs/cgroup").glob(f"*/slurm_{host}"):
        for directory in sorted(
            (Path(d) for d, _, _ in os.walk(top)), key=lambda p: len(p.parts), reverse=True
        ):
            # a task still inside keeps its cgroup: not fatal to the test run
            with contextlib.suppress(OSError):
                directory.rmdir()


def have_slurm() -> bool:
    return all(shutil.which(t) for t in ("munged", "slurmctld", "slurmd", "sbatch"))
