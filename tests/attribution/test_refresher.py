"""The refresher and the attribution source: cadence, wake-up, isolation, staleness."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence

import pytest

from nvwatch.agent.sources import SourceDegraded
from nvwatch.agent.sources.attribution.model import (
    Allocation,
    AttributionSample,
    GpuRef,
    Owner,
    Resolution,
)
from nvwatch.agent.sources.attribution.refresher import AttributionRefresher, Cached
from nvwatch.agent.sources.attribution.source import AttributionSource
from nvwatch.agent.sources.nvml.samples import GpuInfo, GpuSample, ProcessOwnerLabels, ProcessSample
from nvwatch.sim.clock import ManualClock


class Recording:
    """A resolver that owns every pid it is shown for job "7", and counts its calls."""

    name = "slurm"

    def __init__(self) -> None:
        self.calls = 0
        self.seen: list[tuple[int, ...]] = []
        self.called = threading.Event()

    def resolve(self, gpus: Sequence[GpuRef]) -> Resolution:
        self.calls += 1
        pids = tuple(pid for g in gpus for pid in g.pids)
        self.seen.append(pids)
        self.called.set()
        owners = {pid: Owner("slurm", "7", "alice") for pid in pids}
        first = [(g, g.pids[0]) for g in gpus if g.pids]
        return Resolution(tuple(Allocation(g.index, g.uuid, owners[p]) for g, p in first), owners)

    def close(self) -> None:
        pass


def _wait_published(refresher: AttributionRefresher, done: Callable[[Cached], bool]) -> None:
    """The resolver has returned; wait (bounded) until the refresh it was part of is the
    cache, so that what a test observes next is compared with it."""
    deadline = time.monotonic() + 10
    while not done(refresher.cached()):
        assert time.monotonic() < deadline, "the refresh was never published"
        time.sleep(0.01)


class Broken:
    name = "kubernetes"

    def resolve(self, gpus: Sequence[GpuRef]) -> Resolution:
        raise RuntimeError("kubelet said something odd")

    def close(self) -> None:
        pass


def _gpu(index: int, *pids: int) -> GpuSample:
    return GpuSample(
        index=index,
        uuid=f"GPU-{index}",
        info=GpuInfo(uuid=f"GPU-{index}"),
        up=True,
        processes=tuple(ProcessSample(pid=p, memory_bytes=1) for p in pids),
    )


def test_a_new_pid_wakes_the_thread_and_polls_read_the_cache() -> None:
    resolver = Recording()
    refresher = AttributionRefresher([resolver], interval=3600.0, min_gap=0.0)
    refresher.start()
    try:
        assert resolver.called.wait(10)  # the first refresh, at start
        resolver.called.clear()
        refresher.observe((_gpu(0, 101),))
        assert resolver.called.wait(10), "a new pid did not wake the refresher"
        assert resolver.seen[-1] == (101,)
        _wait_published(refresher, lambda cache: 101 in cache.pids_seen)
        calls = resolver.calls
        for _ in range(50):  # polls with the same pids read the cache, nothing else
            refresher.observe((_gpu(0, 101),))
            assert refresher.labels_of(101) == ProcessOwnerLabels(job="7")
        assert resolver.calls == calls
    finally:
        refresher.stop(timeout=5)


def test_one_failing_resolver_leaves_the_others_owners() -> None:
    refresher = AttributionRefresher([Broken(), Recording()], interval=10.0)
    refresher.observe((_gpu(2, 55),))
    cache = refresher.refresh()
    assert [a.owner.job_id for a in cache.allocations] == ["7"]
    assert cache.errors == ("kubernetes: RuntimeError: kubelet said something odd",)
    source = AttributionSource(refresher, stale_after=60.0)
    with pytest.raises(SourceDegraded) as raised:
        source.collect()
    partial = raised.value.sample
    assert isinstance(partial, AttributionSample)
    assert [(a.gpu, a.owner.job_id) for a in partial.allocations] == [(2, "7")]
    assert "kubelet said something odd" in str(raised.value)
    refresher.stop(timeout=1)


def test_a_cache_that_stopped_refreshing_is_served_as_no_owners() -> None:
    clock = ManualClock(1000.0)
    resolver = Recording()
    refresher = AttributionRefresher([resolver], interval=3600.0, clock=clock)
    refresher.observe((_gpu(0, 9),))
    source = AttributionSource(refresher, stale_after=25.0)
    try:
        source.collect()  # starts the thread, which refreshes once and then waits an hour
        assert resolver.called.wait(10)
        assert [a.owner.job_id for a in source.collect().allocations] == ["7"]
        clock.advance(30.0)  # no refresh for longer than stale_after: the thread is stuck
        with pytest.raises(SourceDegraded, match=r"no attribution refresh for 30\.0s") as raised:
            source.collect()
        partial = raised.value.sample
        assert isinstance(partial, AttributionSample) and partial.allocations == ()
    finally:
        source.close()


def test_processes_of_a_mig_gpu_go_to_their_instance() -> None:
    from nvwatch.agent.sources.attribution.model import InstanceRef
    from nvwatch.agent.sources.attribution.refresher import gpu_ref
    from nvwatch.agent.sources.nvml.samples import MigDeviceSample

    gpu = dataclasses.replace(
        _gpu(4),
        processes=(
            ProcessSample(pid=10, memory_bytes=1, gpu_instance_id=1, compute_instance_id=0),
            ProcessSample(pid=11, memory_bytes=1, gpu_instance_id=2, compute_instance_id=0),
            ProcessSample(pid=12, memory_bytes=1),
        ),
        mig_devices=(
            MigDeviceSample(1, 0, "MIG-a", "3g.40gb", pids=(10,)),
            MigDeviceSample(2, 0, "MIG-b", "3g.40gb", pids=(11,)),
        ),
    )
    assert gpu_ref(gpu) == GpuRef(
        4,
        "GPU-4",
        (12,),
        (InstanceRef(1, "MIG-a", (10,)), InstanceRef(2, "MIG-b", (11,))),
    )


def test_the_first_gpus_wake_the_thread_without_any_process() -> None:
    """A node whose jobs are only in the mapping directory (no GPU process yet) is
    attributed from the first poll's GPUs on, not an interval later."""
    resolver = Recording()
    refresher = AttributionRefresher([resolver], interval=3600.0, min_gap=0.0)
    refresher.start()
    try:
        assert resolver.called.wait(10)  # the start-up refresh: no GPUs known yet
        resolver.called.clear()
        refresher.observe((_gpu(0), _gpu(1)))
        assert resolver.called.wait(10), "the first GPUs did not wake the refresher"
        _wait_published(refresher, lambda cache: bool(cache.units_seen))
        calls = resolver.calls
        refresher.observe((_gpu(0), _gpu(1)))  # the same GPUs: nothing new
        time.sleep(0.2)  # time enough for a wrongly woken thread to call the resolver
        assert resolver.calls == calls
    finally:
        refresher.stop(timeout=5)
