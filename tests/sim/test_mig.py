"""Simulated MIG through the REAL pynvml bindings: layouts, instances, handles, answers."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pynvml
import pytest

from nvwatch.sim.gpu.mig_layout import MigLayoutError, parse_layout, place
from nvwatch.sim.gpu.mig_profiles import MEMORY_SLICES
from nvwatch.sim.node.process_file import ProcessFile
from nvwatch.sim.nvml import SimulatedNvml
from nvwatch.sim.profiles import get_profile
from tests.sim.conftest import start

A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"
MIB = 1024 * 1024

# NVIDIA's valid A100-40GB mixes ("Supported MIG Profiles", as nebuly-ai/nos lists them)
A100_VALID = [
    "7g.40gb",
    "4g.20gb,2g.10gb,1g.5gb",
    "4g.20gb,1g.5gb*3",
    "3g.20gb*2",
    "3g.20gb,2g.10gb,1g.5gb",
    "3g.20gb,1g.5gb*3",
    "2g.10gb*2,3g.20gb",
    "2g.10gb,1g.5gb*2,3g.20gb",
    "2g.10gb*3,1g.5gb",
    "2g.10gb*2,1g.5gb*3",
    "2g.10gb,1g.5gb*5",
    "1g.5gb*7",
]


def _plan(text: str, gpus: int = 8) -> dict[int, object]:
    return dict(parse_layout(text, gpus))


@pytest.mark.parametrize("mix", A100_VALID)
def test_every_mix_nvidia_lists_for_the_a100_is_placed(mix: str) -> None:
    placed = place(parse_layout(f"0:{mix}", 1)[0], A100, 0)
    used = [0] * MEMORY_SLICES
    for instance in placed:
        assert instance.start in instance.profile.starts
        for i in range(instance.start, instance.start + instance.profile.placement_size):
            used[i] += 1
    assert max(used) == 1  # no memory slice given twice
    assert len({p.gpu_instance_id for p in placed}) == len(placed)


@pytest.mark.parametrize(
    ("layout", "gpu", "message"),
    [
        ("0:3g.40gb,3g.40gb,1g.10gb", H100, "cannot place"),  # 7 slices, no room
        ("0:1g.10gb*7,1g.10gb", H100, "at most 7 x 1g.10gb"),
        ("0:4g.40gb,4g.40gb", H100, "at most 1 x 4g.40gb"),
        ("0:7g.80gb,1g.10gb", H100, "need 8"),
        ("0:3g.20gb", H100, "3g.20gb is not a MIG profile of GPU 0 (NVIDIA H100 80GB HBM3)"),
        ("0:7g.80gb", A100, "not a MIG profile of GPU 0 (NVIDIA A100-SXM4-40GB)"),
        ("0:1g.5gb", "Tesla V100-SXM2-16GB", "does not support MIG"),
    ],
)
def test_layouts_a_gpu_cannot_hold_say_why(layout: str, gpu: str, message: str) -> None:
    with pytest.raises(MigLayoutError, match=message.replace("(", r"\(").replace(")", r"\)")):
        place(parse_layout(layout, 8)[0], gpu, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty layout"),
        ("3g.40gb", "is not GPUS:PROFILES"),
        ("8:7g.80gb", "no GPU 8 on this node"),
        ("3-1:7g.80gb", "runs backwards"),
        ("0:7g.80gb;0:none", "GPU 0 is given twice"),
        ("all:3g", "is not a MIG profile such as"),
        ("all:1g.10gb*9", "a count of 1..7"),
    ],
)
def test_layout_syntax_errors_are_one_line(text: str, message: str) -> None:
    with pytest.raises(MigLayoutError, match=message) as caught:
        parse_layout(text, 8)
    assert "\n" not in str(caught.value)


def test_instances_are_mig_devices_with_their_own_uuid_memory_and_ids() -> None:
    lib, _ = start("dgx-h100", mig=parse_layout("0:3g.40gb,2g.20gb,1g.10gb*2;1:7g.80gb", 8))
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMigMode(parent) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    state = lib.mig[0]
    seen = []
    for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, index)
        except pynvml.NVMLError_NotFound:
            continue
        device = state.devices[len(seen)]
        seen.append(pynvml.nvmlDeviceGetUUID(handle))
        assert pynvml.nvmlDeviceIsMigDeviceHandle(handle).value == 1
        assert pynvml.nvmlDeviceGetGpuInstanceId(handle) == device.gpu_instance_id
        assert pynvml.nvmlDeviceGetComputeInstanceId(handle) == 0
        assert pynvml.nvmlDeviceGetName(handle) == f"{H100} MIG {device.profile_name}"
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2)
        assert memory.total == device.placed.profile.memory_bytes
        assert memory.used == state.memory_used_bytes(device)
        back = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
        assert (
            ctypes.cast(back, ctypes.c_void_p).value == ctypes.cast(parent, ctypes.c_void_p).value
        )
        gi = pynvml.nvmlDeviceGetGpuInstanceById(parent, device.gpu_instance_id)
        info = pynvml.nvmlGpuInstanceGetInfo(gi)
        assert (info.profileId, info.placement.start) == (
            device.placed.profile.profile_id,
            device.placed.start,
        )
        ci = pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0))
        assert ci.placement.size == device.placed.profile.compute_slices
    assert sorted(p.name for p in (d.placed.profile for d in state.devices)) == sorted(
        ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    )
    assert len(set(seen)) == 4 and all(u.startswith("MIG-") for u in seen)
    # the whole board under MIG: what the instances hold, and no utilization rates
    whole = pynvml.nvmlDeviceGetMemoryInfo(parent, pynvml.nvmlMemory_v2)
    assert whole.used == state.memory_used_total_bytes()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetUtilizationRates(parent)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(parent)
    assert {p.gpuInstanceId for p in procs} == {
        d.gpu_instance_id for d in state.devices if state.process_memory_bytes(d)
    }


def test_gpu_wide_readings_are_not_supported_on_a_mig_device() -> None:
    start("dgx-a100", mig=parse_layout("all:3g.20gb*2", 8))
    handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(2), 1)
    for call in (
        pynvml.nvmlDeviceGetPowerUsage,
        pynvml.nvmlDeviceGetUtilizationRates,
        pynvml.nvmlDeviceGetEnforcedPowerLimit,
        lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        pynvml.nvmlDeviceGetMigMode,
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call(handle)
    # the GPU itself still reads power and clocks
    assert pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(2)) > 0


def test_gpus_outside_the_layout_keep_mig_off_and_pending_waits_for_a_reset() -> None:
    start("dgx-a100", mig=parse_layout("1:pending", 8))
    plain, pending = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert pynvml.nvmlDeviceGetMigMode(plain) == [0, 0]
    assert pynvml.nvmlDeviceGetMigMode(pending) == [0, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(pending) == 0
    assert pynvml.nvmlDeviceGetUtilizationRates(pending).gpu >= 0  # MIG not active yet
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pending, 0)
    assert pynvml.nvmlDeviceIsMigDeviceHandle(plain).value == 0


def test_boards_without_mig_say_not_supported() -> None:
    start("dgx1-v100")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(handle)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)


def test_gpm_per_gpu_instance_is_its_share_of_the_gpu_activity() -> None:
    lib, clock = start("dgx-h100", mig=parse_layout("0:4g.40gb,3g.40gb", 8))
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    state = lib.mig[0]
    for device in state.devices:
        first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmMigSampleGet(parent, device.gpu_instance_id, first)
        before = state.activity(device)
        clock.advance(10.0)
        pynvml.nvmlGpmMigSampleGet(parent, device.gpu_instance_id, second)
        after = state.activity(device)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1, request.sample2 = first, second
        request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
        pynvml.nvmlGpmMetricsGet(request)
        expected = 100.0 * (after.sm_active - before.sm_active) / (after.time - before.time)
        assert request.metrics[0].value == pytest.approx(expected)
        if device.load == 0.0:
            assert request.metrics[0].value == 0.0
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpmMigSampleGet(parent, 13, pynvml.nvmlGpmSampleAlloc())


def test_an_all_idle_mig_gpu_draws_idle_power() -> None:
    lib, clock = start("dgx-a100", mig=parse_layout("all:none", 8))
    clock.advance(600.0)
    gpu = lib.gpus[0]
    assert gpu.mig_load == 0.0
    assert pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0)) == round(
        gpu.model.idle_watts * 1000
    )


def test_a_layout_for_a_gpu_the_node_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="no GPU 9"):
        SimulatedNvml(get_profile("dgx-h100"), mig=_plan("9:7g.80gb", 10))  # type: ignore[arg-type]


def test_a_process_file_places_real_processes_in_mig_instances(tmp_path: Path) -> None:
    lib, _ = start("dgx-h100", mig=parse_layout("0:3g.40gb,3g.40gb", 8))
    first, second = lib.mig[0].devices
    listing = tmp_path / "procs"
    me = os.getpid()  # a live process: the file's pids are checked for being alive
    listing.write_text(f"0/{second.gpu_instance_id} {me} 512\n0 {os.getppid()}\n")
    lib.process_file = ProcessFile(listing, 8)
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    on_gpu = {p.pid: p for p in pynvml.nvmlDeviceGetComputeRunningProcesses(parent)}
    assert on_gpu[me].gpuInstanceId == second.gpu_instance_id
    assert on_gpu[me].usedGpuMemory == 512 * MIB
    assert on_gpu[os.getppid()].gpuInstanceId == 0xFFFFFFFF  # in no instance
    by_device = {}
    for index, device in enumerate((first, second)):
        handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, index)
        by_device[device.gpu_instance_id] = {
            p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        }
    assert me in by_device[second.gpu_instance_id]
    assert me not in by_device[first.gpu_instance_id]
