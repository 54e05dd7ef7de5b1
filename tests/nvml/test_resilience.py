"""NVML missing, faults, NotSupported memory, counter monotonicity."""

from __future__ import annotations

import ctypes
import itertools
import random
from typing import Any

import pynvml
import pytest

from nvwatch.agent.sources import SourceUnavailable
from nvwatch.agent.sources.nvml import NvmlSource
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.clock import ManualClock
from tests.nvml.conftest import NodeFactory
from tests.nvml.helpers import CountingNvml, exposition, names_for_gpu, poll


def test_no_library_is_unavailable_with_a_reason_and_backs_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim_nvml.uninstall()  # this machine has no libnvidia-ml: a plain nvmlInit fails
    attempts = []
    real_init = pynvml.nvmlInit

    def counting_init() -> None:
        attempts.append(clock())
        real_init()

    monkeypatch.setattr(pynvml, "nvmlInit", counting_init)
    clock = ManualClock(0.0)
    source = NvmlSource(clock=clock, init_retry_max=4.0)
    try:
        for _ in range(40):
            with pytest.raises(SourceUnavailable, match="NVML library not found"):
                source.collect()
            clock.advance(0.5)
    finally:
        source.close()
    # back-off 1, 2, 4, then capped at init_retry_max=4 s
    assert attempts[:4] == [0.0, 1.0, 3.0, 7.0]
    gaps = [b - a for a, b in itertools.pairwise(attempts[3:])]
    assert gaps == [4.0] * (len(attempts) - 4)


def test_recovers_once_the_library_appears() -> None:
    sim_nvml.uninstall()
    clock = ManualClock(0.0)
    source = NvmlSource(clock=clock)
    try:
        with pytest.raises(SourceUnavailable):
            source.collect()
        sim_nvml.install(sim_nvml.SimulatedNvml("inference-t4", clock=clock))
        with pytest.raises(SourceUnavailable):
            source.collect()  # still inside the back-off: NVML not asked again
        clock.advance(1.0)
        assert [g.up for g in source.collect().gpus] == [True] * 4
    finally:
        source.close()
        sim_nvml.uninstall()


def test_random_faults_never_escape_collect(node: NodeFactory) -> None:
    codes = (
        pynvml.NVML_ERROR_UNKNOWN,
        pynvml.NVML_ERROR_TIMEOUT,
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_INVALID_ARGUMENT,
        pynvml.NVML_ERROR_INSUFFICIENT_SIZE,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NO_DATA,
        12345,  # a code this pynvml does not know
    )
    faults: list[sim_nvml.FaultInjectingNvml] = []
    for seed in range(4):

        def wrap(lib: object, seed: int = seed) -> object:
            faults.append(sim_nvml.FaultInjectingNvml(lib, rate=0.1, seed=seed, codes=codes))
            return faults[-1]

        n = node("dgx1-v100", wrap=wrap, seed=seed)
        source = n.source(reprobe_interval=20.0)
        collected = 0
        for _ in range(60):
            n.clock.advance(5)
            try:
                sample = source.collect()
            except SourceUnavailable:
                continue  # only enumeration at init may be failed
            exposition(sample)  # and it renders
            collected += 1
        assert collected > 30
        assert faults[-1].injected > 100
        source.close()


class _FaultsOnOneGpu:
    """Fails a fraction of the calls made with one GPU's handle; the others untouched."""

    def __init__(self, inner: sim_nvml.SimulatedNvml, victim: int, rate: float, seed: int) -> None:
        self.inner = inner
        self.victim = inner.handle_address(victim)
        self.rate = rate
        self.random = random.Random(seed)
        self.codes: tuple[int, ...] = (
            pynvml.NVML_ERROR_UNKNOWN,
            pynvml.NVML_ERROR_TIMEOUT,
            pynvml.NVML_ERROR_NOT_SUPPORTED,
            pynvml.NVML_ERROR_GPU_IS_LOST,
        )

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)
        if not name.startswith("nvmlDevice") or not callable(real):
            return real

        def maybe_fail(*args: Any) -> Any:
            try:
                address = ctypes.cast(args[0], ctypes.c_void_p).value if args else None
            except (TypeError, ctypes.ArgumentError):
                address = None
            if address == self.victim and self.random.random() < self.rate:
                return self.random.choice(self.codes)
            return real(*args)

        return maybe_fail


def test_faults_on_one_gpu_leave_the_others_fully_served(node: NodeFactory) -> None:
    clean = node("dgx-a100")
    baseline = exposition(poll(clean.source(), clean.clock, 3)[-1])
    clean.sources[-1].close()

    n = node("dgx-a100", wrap=lambda lib: _FaultsOnOneGpu(lib, victim=5, rate=0.2, seed=1))
    source = n.source()
    victim_down = 0
    for sample in poll(source, n.clock, 40):
        series = exposition(sample)
        for gpu in range(8):
            if gpu == 5:
                victim_down += not sample.gpus[5].up
                continue
            assert sample.gpus[gpu].up
            assert names_for_gpu(baseline, gpu) <= names_for_gpu(series, gpu), gpu
    assert victim_down > 0


def test_lost_gpu_comes_back_with_all_series(node: NodeFactory) -> None:
    wrapper: list[_FaultsOnOneGpu] = []

    def wrap(lib: sim_nvml.SimulatedNvml) -> object:
        wrapper.append(_FaultsOnOneGpu(lib, victim=1, rate=1.0, seed=0))
        wrapper[-1].codes = (pynvml.NVML_ERROR_GPU_IS_LOST,)
        wrapper[-1].rate = 0.0
        return wrapper[-1]

    n = node("dgx-station", wrap=wrap)
    source = n.source()
    healthy = exposition(poll(source, n.clock, 2)[-1])
    wrapper[-1].rate = 1.0
    lost = poll(source, n.clock, 3)[-1]
    assert not lost.gpus[1].up and lost.gpus[0].up
    wrapper[-1].rate = 0.0
    back = exposition(poll(source, n.clock, 1)[-1])
    assert names_for_gpu(healthy, 1) <= names_for_gpu(back, 1)


def test_not_supported_is_asked_once_per_reprobe_interval(node: NodeFactory) -> None:
    counting: list[CountingNvml] = []

    def wrap(lib: object) -> object:
        counting.append(CountingNvml(lib))
        return counting[-1]

    n = node("geforce-workstation", wrap=wrap)
    source = n.source(reprobe_interval=300.0)
    poll(source, n.clock, 20)  # 100 s
    calls = counting[-1].calls
    # ECC: 4 (type, scope) keys per GPU, each NotSupported on GeForce and asked once
    assert calls["nvmlDeviceGetTotalEccErrors"] == 4 * 4
    assert calls["nvmlDeviceGetViolationStatus"] == 6 * 4
    assert calls["nvmlDeviceGetPowerUsage"] == 20 * 4  # supported: every poll
    poll(source, n.clock, 50)  # past the reprobe interval: asked again, once
    assert calls["nvmlDeviceGetTotalEccErrors"] == 2 * 4 * 4


def test_counters_never_go_down(node: NodeFactory) -> None:
    n = node(
        "dgx1-v100",
        wrap=lambda lib: sim_nvml.FaultInjectingNvml(lib, rate=0.03, seed=7),
        gpu_scenarios={1: "nvlink-degraded", 2: "ecc-dbe", 3: "thermal-runaway"},
    )
    source = n.source()
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    checked = 0
    for _ in range(80):
        n.clock.advance(5)
        try:
            series = exposition(source.collect())
        except SourceUnavailable:
            continue
        for s in series:
            if not s.name.endswith("_total"):
                continue
            key = (s.name, tuple(sorted(s.labels.items())))
            assert s.value >= last.get(key, 0.0), key
            last[key] = s.value
            checked += 1
    assert checked > 1000
