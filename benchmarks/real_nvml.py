"""On a machine with NVIDIA GPUs: NvmlSource polls and batched vs per-call NVML reads.

Nothing here installs the simulator: the calls go to whatever libnvidia-ml pynvml finds,
and without a driver the run stops with one clear line (RealNvmlUnavailable). The smoke
test runs the same code with the simulated library installed, only to keep it working.

Three ways to read the same NVLink values of every GPU, each once per "poll":
- batched: one nvmlDeviceGetFieldValues per GPU with every (field, link) pair (what
  NvmlSource does);
- per field: nvmlDeviceGetFieldValues with one pair at a time (same values, same driver
  path, one round trip each: isolates what batching saves);
- per call: the classic per-link functions (nvmlDeviceGetNvLinkState,
  nvmlDeviceGetNvLinkErrorCounter), the path a source without field values would take.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from benchmarks.common import percentile


class RealNvmlUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class Timing:
    median_wall: float
    p99_wall: float
    median_cpu: float
    count: int


@dataclass(frozen=True)
class RealNvmlResult:
    driver_version: str
    gpus: list[str]
    links_per_gpu: list[int]
    source_poll: Timing  # NvmlSource.collect(), every GPU
    batched: Timing  # all GPUs, one FieldValues call each
    per_field: Timing  # all GPUs, one FieldValues call per value
    per_call: Timing  # all GPUs, per-link functions
    values_per_gpu: int
    per_call_calls_per_gpu: int


_ERROR_COUNTERS = (
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
)


def open_driver() -> tuple[str, list[Any]]:
    """nvmlInit on the real library; the driver version and one handle per GPU."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise RealNvmlUnavailable(
            f"NVML is not available on this machine ({err}); --real-nvml needs an NVIDIA "
            "driver and a GPU (run it on a DGX node, not in the simulator)"
        ) from err
    version = pynvml.nvmlSystemGetDriverVersion()
    driver = version.decode() if isinstance(version, bytes) else str(version)
    count = pynvml.nvmlDeviceGetCount()
    if count == 0:
        raise RealNvmlUnavailable("NVML is loaded but reports no GPUs")
    return driver, [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]


def _name(handle: Any) -> str:
    name = pynvml.nvmlDeviceGetName(handle)
    return name.decode() if isinstance(name, bytes) else str(name)


def _active_links(handle: Any) -> list[int]:
    links = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED:
                links.append(link)
        except pynvml.NVMLError:
            continue
    return links


def _field_ids(links: list[int]) -> list[tuple[int, int]]:
    ids: list[tuple[int, int]] = []
    for field in (
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        pynvml.NVML_FI_DEV_NVLINK_GET_SPEED,
        pynvml.NVML_FI_DEV_NVLINK_GET_STATE,
    ):
        ids += [(field, link) for link in links]
    return ids


def _time(fn: Callable[[], object], polls: int, deadline: float) -> Timing:
    walls: list[float] = []
    cpus: list[float] = []
    fn()  # first call pays one-off costs (function pointer lookup, driver caches)
    while len(walls) < polls and time.monotonic() < deadline:
        wall, cpu = time.perf_counter(), time.thread_time()
        fn()
        cpus.append(time.thread_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return Timing(percentile(walls, 50), percentile(walls, 99), percentile(cpus, 50), len(walls))


def measure_real_nvml(polls: int, time_limit: float) -> RealNvmlResult:
    from nvwatch.agent.sources.nvml.source import NvmlSource

    driver, handles = open_driver()
    deadline = time.monotonic() + time_limit
    try:
        names = [_name(h) for h in handles]
        links = [_active_links(h) for h in handles]
        ids = [_field_ids(link_list) for link_list in links]

        def batched() -> None:
            for handle, wanted in zip(handles, ids, strict=True):
                if wanted:
                    pynvml.nvmlDeviceGetFieldValues(handle, wanted)

        def per_field() -> None:
            for handle, wanted in zip(handles, ids, strict=True):
                for pair in wanted:
                    pynvml.nvmlDeviceGetFieldValues(handle, [pair])

        def per_call() -> None:
            for handle, link_list in zip(handles, links, strict=True):
                for link in link_list:
                    pynvml.nvmlDeviceGetNvLinkState(handle, link)
                    for counter in _ERROR_COUNTERS:
                        try:
                            pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter)
                        except pynvml.NVMLError:
                            continue

        share = max(1.0, (deadline - time.monotonic()) / 4)
        source = NvmlSource(nvlink_detail="link")
        try:
            source_timing = _time(source.collect, polls, time.monotonic() + share)
        finally:
            source.close()
        batched_timing = _time(batched, polls, time.monotonic() + share)
        per_field_timing = _time(per_field, polls, time.monotonic() + share)
        per_call_timing = _time(per_call, polls, time.monotonic() + share)
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    most_links = max((len(x) for x in links), default=0)
    return RealNvmlResult(
        driver_version=driver,
        gpus=names,
        links_per_gpu=[len(x) for x in links],
        source_poll=source_timing,
        batched=batched_timing,
        per_field=per_field_timing,
        per_call=per_call_timing,
        values_per_gpu=max((len(x) for x in ids), default=0),
        per_call_calls_per_gpu=most_links * (1 + len(_ERROR_COUNTERS)),
    )
