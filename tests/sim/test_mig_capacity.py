"""MIG capacity queries (sim/nvml/mig_capacity.py) agree with the MIG calls beside
them: an empty MIG GPU holds as many instances of each profile as its profile info says,
placements are the profile's, info by ID equals info by index, a MIG device's attributes
are its GPU instance's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from nvwatch.sim.clock import ManualClock
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.nvml import install, uninstall

# GPU 0: two instances; GPU 1: MIG on, no instances; GPU 2: MIG off
LAYOUT = "0:3g.40gb,2g.20gb;1:none"
PROFILE_INDICES = range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


@pytest.fixture
def handles(tmp_path: Path) -> Iterator[list[object]]:
    node = SimulatedNode("dgx-h100", clock=ManualClock(), sysfs_root=tmp_path, mig=LAYOUT)
    install(node.nvml)
    pynvml.nvmlInit()
    try:
        yield [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    finally:
        pynvml.nvmlShutdown()
        node.close()
        uninstall()


def offered(handle: object) -> dict[int, object]:
    """NVML profile index -> its v2 profile info, for the profiles the GPU offers."""
    infos = {}
    for index in PROFILE_INDICES:
        try:
            infos[index] = pynvml.nvmlDeviceGetGpuInstanceProfileInfoV(handle, index)
        except pynvml.NVMLError_NotSupported:
            continue
    return infos


def test_an_empty_mig_gpu_holds_each_profiles_instance_count(handles: list[object]) -> None:
    infos = offered(handles[1])
    assert infos
    for index, info in infos.items():
        remaining = pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handles[1], index)
        assert remaining == info.instanceCount, info.name


def test_instances_take_capacity(handles: list[object]) -> None:
    full, empty = handles[0], handles[1]
    for index in offered(empty):
        left = pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(full, index)
        assert left <= pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(empty, index)
    # the 3g.40gb holds memory slices 0-3 and the 2g.20gb two of 4-7: neither a 7g nor a
    # second 3g (which may only start at slice 4) fits any more
    for index in (
        pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE,
        pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE,
    ):
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(full, index) == 0


def test_placements_and_info_by_id(handles: list[object]) -> None:
    for index, info in offered(handles[1]).items():
        count = pynvml.c_uint(8)
        slots = (pynvml.c_nvmlGpuInstancePlacement_t * 8)()
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            handles[1], index, slots, pynvml.byref(count)
        )
        placements = [(slots[i].start, slots[i].size) for i in range(count.value)]
        assert len(placements) >= info.instanceCount
        assert len({size for _, size in placements}) == 1
        assert all(start + size <= 8 for start, size in placements)  # 8 memory slices
        by_id = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(handles[1], info.id)
        assert (by_id.name, by_id.memorySizeMB, by_id.multiprocessorCount) == (
            info.name,
            info.memorySizeMB,
            info.multiprocessorCount,
        )


def test_mig_off_and_gpu_handles_answer_not_supported(handles: list[object]) -> None:
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handles[2], 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetAttributes_v2(handles[0])  # a GPU, not a MIG device


def test_a_mig_devices_attributes_are_its_instances(handles: list[object]) -> None:
    infos = {info.id: info for info in offered(handles[1]).values()}
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handles[0])):
        try:
            device = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handles[0], slot)
        except pynvml.NVMLError_NotFound:
            continue
        attributes = pynvml.nvmlDeviceGetAttributes_v2(device)
        gi = pynvml.nvmlDeviceGetGpuInstanceId(device)
        instance = pynvml.nvmlDeviceGetGpuInstanceById(handles[0], gi)
        info = infos[pynvml.nvmlGpuInstanceGetInfo(instance).profileId]
        assert attributes.multiprocessorCount == info.multiprocessorCount
        assert attributes.memorySizeMB == info.memorySizeMB
        assert attributes.gpuInstanceSliceCount == info.sliceCount
