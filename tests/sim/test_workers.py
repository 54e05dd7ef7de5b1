"""Simulated GPU processes are real pids that the simulator starts and reaps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pynvml
import pytest

from nvwatch.agent.config import AgentConfig, parse_scenario
from nvwatch.agent.runtime import runtime
from nvwatch.sim.fleet.fleet import Fleet
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.node.workers import (
    PROCESS_NAME,
    WorkerProcesses,
    from_environment,
    to_environment,
    worker_name,
)


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """True once `pid` no longer runs (reaped, or a zombie of someone else's)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _compute_pids() -> dict[int, list[int]]:
    """GPU index -> pids NVML lists as compute processes, on the installed library."""
    return {
        index: [
            p.pid
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(
                pynvml.nvmlDeviceGetHandleByIndex(index)
            )
        ]
        for index in range(pynvml.nvmlDeviceGetCount())
    }


def test_one_named_child_per_gpu_reaped_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the link's scratch directory in this test's own temp dir: another process's
    # leftovers in the machine's /tmp are not this test's business
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with WorkerProcesses("dgx-a100", [0, 3]) as workers:
        pids = dict(workers.pids)
        assert set(pids) == {0, 3}
        me = psutil.Process()
        for gpu, pid in pids.items():
            child = psutil.Process(pid)
            assert child.ppid() == me.pid
            assert " ".join(child.cmdline()) == worker_name("dgx-a100", gpu)
            assert child.name() == PROCESS_NAME  # what the agent's process metric shows
            assert child.status() != psutil.STATUS_ZOMBIE
    for pid in pids.values():
        assert not psutil.pid_exists(pid)  # killed and reaped: not even a zombie is left
    assert not list(tmp_path.glob("nvwatch-sim-job-*"))


def test_workers_die_with_their_owner_even_by_sigkill() -> None:
    owner_code = (
        "import sys, time\n"
        "from nvwatch.sim.node.workers import WorkerProcesses\n"
        "w = WorkerProcesses('dgx-h100', range(4))\n"
        "print(*w.pids.values(), flush=True)\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        assert owner.stdout is not None
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 4 and all(psutil.pid_exists(p) for p in pids)
        owner.send_signal(signal.SIGKILL)  # no close(), no atexit
        owner.wait(10)
        assert all(_gone(pid) for pid in pids), "a worker outlived its owner"
    finally:
        owner.kill()
        owner.wait(10)


def test_pids_travel_to_a_child_through_the_environment() -> None:
    env = {"NVWATCH_SIM_WORKER_PIDS": to_environment({2: 4102, 0: 4100})}
    assert env["NVWATCH_SIM_WORKER_PIDS"] == "0=4100,2=4102"
    assert from_environment(env) == {0: 4100, 2: 4102}
    assert from_environment({"NVWATCH_SIM_WORKER_PIDS": "x=1,3=,4=9"}) == {4: 9}
    assert from_environment({}) == {}


def test_serve_reports_real_pids_and_reaps_them_when_it_stops() -> None:
    config = AgentConfig(simulate="dgx-h100", sources=("nvml",))
    with runtime(config):
        pynvml.nvmlInit()
        per_gpu = _compute_pids()
        pynvml.nvmlShutdown()
    pids = [pid for pids in per_gpu.values() for pid in pids]
    assert [len(p) for p in per_gpu.values()] == [1] * 8  # one worker per busy GPU
    assert len(set(pids)) == 8
    assert all(_gone(pid, within_s=0) for pid in pids), "workers outlived the runtime"


def test_serve_reported_pids_are_live_processes_while_it_runs() -> None:
    config = AgentConfig(simulate="dgx-a100", sources=("nvml",))
    with runtime(config):
        pynvml.nvmlInit()
        try:
            for index, pids in _compute_pids().items():
                (pid,) = pids
                assert " ".join(psutil.Process(pid).cmdline()) == worker_name("dgx-a100", index)
        finally:
            pynvml.nvmlShutdown()


def test_an_idle_node_starts_no_process() -> None:
    before = {c.pid for c in psutil.Process().children()}
    config = AgentConfig(
        simulate="dgx-a100", sources=("nvml",), scenarios=(parse_scenario("idle"),)
    )
    with runtime(config):
        pynvml.nvmlInit()
        try:
            assert all(pids == [] for pids in _compute_pids().values())
        finally:
            pynvml.nvmlShutdown()
        assert {c.pid for c in psutil.Process().children()} == before


def test_a_node_built_without_workers_keeps_placeholder_pids() -> None:
    node = SimulatedNode("dgx1-v100")
    try:
        assert node.workers.pids == {}
        assert node.nvml.worker_pid(2) == 20002  # seed 0: the placeholder numbering
    finally:
        node.close()


@pytest.mark.timeout(60)
def test_a_fleet_starts_no_process() -> None:
    before = {c.pid for c in psutil.Process().children()}
    fleet = Fleet(["dgx-h100", "dgx-a100"], base_port=0, interval=0.5)
    fleet.start()
    try:
        assert {c.pid for c in psutil.Process().children()} == before
    finally:
        fleet.stop()


def test_simulate_exec_children_see_real_pids_gone_after_the_command() -> None:
    code = (
        "import psutil, pynvml\n"
        "pynvml.nvmlInit()\n"
        "for i in range(pynvml.nvmlDeviceGetCount()):\n"
        "    h = pynvml.nvmlDeviceGetHandleByIndex(i)\n"
        "    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):\n"
        "        name = ' '.join(psutil.Process(p.pid).cmdline())\n"
        "        print(i, p.pid, psutil.pid_exists(p.pid), name)\n"
    )
    command = ["simulate", "exec", "--profile", "dgx1-v100", "--", sys.executable, "-c", code]
    done = subprocess.run(
        [sys.executable, "-m", "nvwatch.agent.cli", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split(" ", 3) for line in done.stdout.splitlines()]
    assert [int(gpu) for gpu, *_ in rows] == list(range(8))
    assert all(alive == "True" for _, _, alive, _ in rows)
    assert [name for *_, name in rows] == [worker_name("dgx1-v100", i) for i in range(8)]
    assert all(_gone(int(pid), within_s=0) for _, pid, _, _ in rows)


def test_mig_instances_jobs_are_real_workers_too(tmp_path: Path) -> None:
    from nvwatch.sim.clock import ManualClock
    from nvwatch.sim.nvml import install, uninstall

    node = SimulatedNode(
        "dgx-a100",
        clock=ManualClock(0.0),
        sysfs_root=tmp_path,
        worker_processes=True,
        mig="0:3g.20gb,2g.10gb,1g.5gb*2",
    )
    install(node.nvml)
    pynvml.nvmlInit()
    try:
        state = node.nvml.mig[0]
        busy = {d.gpu_instance_id for d in state.devices if state.process_memory_bytes(d)}
        assert busy  # the layout's instances run the node's job
        listed = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(0))
        in_instances = {p.gpuInstanceId: p.pid for p in listed}
        assert set(in_instances) == busy
        for instance, pid in in_instances.items():
            child = psutil.Process(pid)  # a real process, ours, named for its instance
            assert child.ppid() == os.getpid()
            assert " ".join(child.cmdline()) == worker_name("dgx-a100", 0, instance)
        # the partitioned GPU gets no whole-GPU worker; the others keep theirs
        assert 0 not in node.workers.pids and 1 in node.workers.pids
        pids = set(in_instances.values())
    finally:
        pynvml.nvmlShutdown()
        node.close()
        uninstall()
    assert all(_gone(pid) for pid in pids)
