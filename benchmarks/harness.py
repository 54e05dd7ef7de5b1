"""An in-process agent on a simulated node, driven by a ManualClock, with CPU timers.

The real Poller runs the real sources on their worker threads; thin wrappers read each
thread's CPU clock around `collect()` (on the source's worker), `prepare()` (the
per-source render into families) and `build_exposition()` (text + gzip), so the cost of
each stage is measured where the agent actually spends it. The simulator is advanced
between polls, outside every timer, so counters move but the tick is not counted.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import scratch_dir
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.exposition.render import Exposition, build_exposition, prepare
from nvwatch.agent.poller import Poller, Snapshot
from nvwatch.agent.sources import Source
from nvwatch.agent.sources.registry import build_sources
from nvwatch.sim.clock import ManualClock

# Simulated seconds between polls: the agent's default interval, so rates look real.
POLL_INTERVAL_S = 5.0
SOURCES = ("nvml", "infiniband", "host")


class _TimedSource:
    """Wraps a source; records the CPU its worker thread spent in collect()."""

    def __init__(self, inner: Source, record: Callable[[str, float], None]) -> None:
        self.inner = inner
        self.name = inner.name
        self._record = record

    def collect(self) -> object:
        started = time.thread_time()
        try:
            return self.inner.collect()
        finally:
            self._record(self.name, time.thread_time() - started)

    def close(self) -> None:
        self.inner.close()


@dataclass
class PollTimes:
    """CPU seconds per poll, one list per stage."""

    total: list[float] = field(default_factory=list)  # process CPU around poll_once
    collect: dict[str, list[float]] = field(default_factory=dict)
    prepare: dict[str, list[float]] = field(default_factory=dict)
    build: list[float] = field(default_factory=list)


class Harness:
    """One simulated node and an agent polling it; use as `with simulated_agent(...)`."""

    def __init__(
        self,
        profile: str,
        nvlink_detail: str,
        sources: tuple[str, ...],
        config_changes: Mapping[str, Any] | None = None,
        process_file: Path | None = None,
    ) -> None:
        from nvwatch.sim import nvml as sim_nvml
        from nvwatch.sim.node.node import SimulatedNode
        from nvwatch.sim.node.process_file import ProcessFile

        self.profile = profile
        self.clock = ManualClock(1000.0)
        self._root = scratch_dir(f"nvwatch-bench-{profile}-")
        self.node = SimulatedNode(profile, clock=self.clock, sysfs_root=self._root)
        if process_file is not None:  # real pids the simulated GPUs report
            self.node.nvml.process_file = ProcessFile(process_file, self.node.profile.gpu_count)
        sim_nvml.install(self.node.nvml)
        self.config = AgentConfig(
            sources=sources, sysfs_root=self.node.sysfs_root, nvlink_detail=nvlink_detail
        )
        self.config = dataclasses.replace(self.config, **(config_changes or {}))
        self.times = PollTimes()
        self._recording = False
        self.exposition: Exposition | None = None
        self.raw_sources = build_sources(self.config)
        timed = [_TimedSource(s, self._record_collect) for s in self.raw_sources]
        self.poller = Poller(
            timed,
            interval=POLL_INTERVAL_S,
            timeout=30.0,  # generous: a slow machine must not turn a poll into a timeout
            prepare=self._prepare,
            on_snapshot=self._publish,
        )

    def _record_collect(self, name: str, seconds: float) -> None:
        if self._recording:
            self.times.collect.setdefault(name, []).append(seconds)

    def _prepare(self, name: str, sample: object) -> object:
        started = time.thread_time()
        prepared = prepare(name, sample)
        if self._recording:
            self.times.prepare.setdefault(name, []).append(time.thread_time() - started)
        return prepared

    def _publish(self, snapshot: Snapshot) -> None:
        started = time.thread_time()
        self.exposition = build_exposition(snapshot)
        if self._recording:
            self.times.build.append(time.thread_time() - started)

    def advance(self) -> None:
        """Move simulated time one interval and bring NVML and the sysfs files up to it."""
        self.clock.advance(POLL_INTERVAL_S)
        self.node.tick()

    def poll(self, record: bool) -> Snapshot:
        self._recording = record
        started = time.process_time()
        snapshot = self.poller.poll_once()
        if record:
            self.times.total.append(time.process_time() - started)
        down = {n: s.error for n, s in snapshot.sources.items() if not s.up}
        if down:
            raise RuntimeError(f"{self.profile}: sources down during the benchmark: {down}")
        return snapshot

    def run(self, polls: int, *, warmup: int, time_limit: float) -> int:
        """Warm up, then record up to `polls` polls or until `time_limit` seconds pass."""
        for _ in range(warmup):
            self.advance()
            self.poll(record=False)
        deadline = time.monotonic() + time_limit
        done = 0
        while done < polls and time.monotonic() < deadline:
            self.advance()
            self.poll(record=True)
            done += 1
        return done

    def series(self) -> int:
        assert self.exposition is not None
        return count_samples(self.exposition.text)

    def close(self) -> None:
        from nvwatch.sim import nvml as sim_nvml

        try:
            self.poller.stop(timeout=2.0)
        finally:
            self.node.close()
            sim_nvml.uninstall()
            shutil.rmtree(self._root, ignore_errors=True)


@contextmanager
def simulated_agent(
    profile: str,
    nvlink_detail: str = "link",
    sources: tuple[str, ...] = SOURCES,
    *,
    config_changes: Mapping[str, Any] | None = None,
    process_file: Path | None = None,
) -> Iterator[Harness]:
    """`config_changes`: AgentConfig fields to set (--attribution ...); `process_file`: the
    simulator's file of real pids on its GPUs (sim/node/process_file.py)."""
    harness = Harness(profile, nvlink_detail, sources, config_changes, process_file)
    try:
        yield harness
    finally:
        harness.close()


def count_samples(text: bytes) -> int:
    """Series in an exposition: every line that is neither a comment nor blank."""
    return sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
