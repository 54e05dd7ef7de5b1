"""The NVML tape (benchmarks/real_gpu/tape.py): what a poll asks is recorded at the C
level, and played back the agent exports the same series, whatever order it asks in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from benchmarks.real_gpu.simulator import sim_module
from benchmarks.real_gpu.tape import (
    Recorder,
    read_tape,
    record_calls,
    replaying,
    tape_document,
    write_tape,
)


@pytest.fixture
def simulated(tmp_path: Path) -> Iterator[Any]:
    clock = sim_module("clock").ManualClock(0.0)
    node = sim_module("node.node").SimulatedNode(
        "dgx-a100", seed=3, clock=clock, sysfs_root=tmp_path
    )
    nvml = sim_module("nvml")
    nvml.install(node.nvml)
    try:
        yield clock
    finally:
        node.close()
        nvml.uninstall()


def _two_polls(clock: Any) -> tuple[str, Recorder]:
    from nvwatch.agent.exposition.render import prepare
    from nvwatch.agent.exposition.text import render_text
    from nvwatch.agent.sources.nvml.source import NvmlSource

    recorder = Recorder()
    with record_calls(recorder):
        source = NvmlSource(clock=clock)
        try:
            recorder.mode = "record"
            source.collect()
            clock.advance(5.0)
            sample = source.collect()
            recorder.mode = "off"
        finally:
            source.close()
    return render_text([prepare("nvml", sample)]).decode(), recorder


def _replayed(calls: list[dict[str, Any]]) -> tuple[str, list[str]]:
    from nvwatch.agent.exposition.render import prepare
    from nvwatch.agent.exposition.text import render_text
    from nvwatch.agent.sources.nvml.source import NvmlSource

    now = [0.0]
    with replaying(calls) as lib:
        source = NvmlSource(clock=lambda: now[0])
        try:
            source.collect()
            now[0] += 5.0
            sample = source.collect()
        finally:
            source.close()
        return render_text([prepare("nvml", sample)]).decode(), list(lib.misses)


def _without_processes(text: str) -> list[str]:
    # process names come from psutil by pid on this host, gone by replay time
    return [line for line in text.splitlines() if "nvwatch_gpu_process_" not in line]


def test_a_replayed_poll_exports_what_the_recorded_poll_did(simulated: Any, tmp_path: Path) -> None:
    live, recorder = _two_polls(simulated)
    assert {c["fn"] for c in recorder.calls} >= {
        "nvmlInitWithFlags",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetMemoryInfo_v2",
    }
    path = tmp_path / "tape.json.gz"
    write_tape(path, tape_document(recorder, phase="test"))
    replayed, misses = _replayed(read_tape(path)["calls"])
    assert not misses
    assert _without_processes(replayed) == _without_processes(live)


def test_the_field_batch_replays_entry_by_entry_in_any_order(simulated: Any) -> None:
    _, recorder = _two_polls(simulated)
    with replaying(recorder.calls):
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        ids = [
            (pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 0),
            (pynvml.NVML_FI_DEV_MEMORY_TEMP, 0),
        ]
        forward = pynvml.nvmlDeviceGetFieldValues(handle, ids)
        backward = pynvml.nvmlDeviceGetFieldValues(handle, ids[::-1])
        assert [v.fieldId for v in backward] == [i for i, _ in ids[::-1]]
        assert forward[1].value.uiVal == backward[0].value.uiVal
        assert all(v.nvmlReturn == pynvml.NVML_SUCCESS for v in (*forward, *backward))
        unknown = pynvml.nvmlDeviceGetFieldValues(
            handle, [(pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0)]
        )
        assert unknown[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_what_the_tape_lacks_is_not_supported_or_missing(simulated: Any) -> None:
    _, recorder = _two_polls(simulated)
    with replaying(recorder.calls) as lib:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetTemperatureThreshold(handle, 7)  # never asked for 7
        assert lib.misses
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetEncoderCapacity(handle, 0)  # never called at all
        # a value asked once is answered again once its answers run out
        first = pynvml.nvmlDeviceGetPowerUsage(handle)
        assert all(pynvml.nvmlDeviceGetPowerUsage(handle) >= 0 for _ in range(3)) and first
