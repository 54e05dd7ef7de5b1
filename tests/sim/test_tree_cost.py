"""The simulator works in proportion to what is read: its sysfs tree is rewritten only
for an agent that reads it (the infiniband source), once per poll interval."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from nvwatch.agent.config import AgentConfig
from nvwatch.agent.runtime import runtime
from nvwatch.sim.node.node import PollGridClock, SimulatedNode, grid_step

INTERVAL = 0.1  # the smallest interval the agent takes


def _mtimes(root: Path) -> dict[str, int]:
    return {
        str(path): path.stat().st_mtime_ns
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink()
    }


def _sim_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nvwatch-sim"]


def test_without_the_infiniband_source_the_tree_is_never_rewritten() -> None:
    config = AgentConfig(simulate="dgx-h100", sources=("nvml", "host"), interval=INTERVAL)
    with runtime(config) as running:
        root = Path(running.sysfs_root)
        before = _mtimes(root)
        assert any("port_xmit_data" in p for p in before), "the tree exists, written once"
        time.sleep(6 * INTERVAL)  # six polls' worth of ticks
        assert _mtimes(root) == before
        assert _sim_threads() == []  # nothing runs in the background at all


def test_with_the_infiniband_source_counters_move_once_per_interval() -> None:
    config = AgentConfig(simulate="dgx-h100", sources=("infiniband",), interval=INTERVAL)
    with runtime(config) as running:
        counter = Path(running.sysfs_root, "class/infiniband/mlx5_0/ports/1/counters")
        first = (counter / "port_xmit_data").read_text()
        time.sleep(6 * INTERVAL)
        assert (counter / "port_xmit_data").read_text() != first
        assert len(_sim_threads()) == 1


def test_ticker_rewrites_at_the_interval_not_faster(tmp_path: Path) -> None:
    node = SimulatedNode("dgx-h100", sysfs_root=tmp_path)
    path = tmp_path / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"
    seen: set[int] = set()
    try:
        node.start(interval=0.5)
        deadline = time.monotonic() + 1.2  # ticks at 0.25 s and 0.75 s, none faster
        while time.monotonic() < deadline:
            seen.add(os.stat(path).st_mtime_ns)
            time.sleep(0.01)
    finally:
        node.close()
    assert 2 <= len(seen) <= 3  # the first write, then one per interval


def test_grid_clock_reads_one_instant_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    clock = PollGridClock(1.0)
    assert clock() == 100.0  # real time until armed
    clock.arm()
    now[0] = 100.2  # the first poll: the grid centres on it, and never runs backwards
    first = clock()
    assert first == 100.0
    now[0] = 100.4  # later calls of the same poll read the same instant
    assert clock() == first
    now[0] = 101.25  # the next poll, a little late: exactly one step more
    assert clock() == pytest.approx(first + 0.7)  # the grid is 99.7 + k
    now[0] = 102.15
    assert clock() == pytest.approx(101.7)


def test_grid_step_divides_the_interval() -> None:
    assert grid_step(0.1) == pytest.approx(0.1)
    assert grid_step(1.0) == 1.0
    assert grid_step(1.5) == pytest.approx(0.75)
    assert grid_step(60.0) == 1.0
