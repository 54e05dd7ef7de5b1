"""The hgx-h200 profile: NVIDIA's published H200 figures, as the simulated NVML answers
them (the other profiles' shared checks take it through `PROFILES` too)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from benchmarks.real_gpu.simulator import sim_module

MIB = 1024 * 1024


@pytest.fixture
def handles(tmp_path: Path) -> Iterator[list[object]]:
    clock = sim_module("clock").ManualClock()
    nvml = sim_module("nvml")
    node = sim_module("node.node").SimulatedNode(
        "hgx-h200", clock=clock, sysfs_root=tmp_path, mig="7:1g.18gb*7"
    )
    nvml.install(node.nvml)
    pynvml.nvmlInit()
    try:
        yield [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    finally:
        pynvml.nvmlShutdown()
        node.close()
        nvml.uninstall()


def test_the_profile_is_eight_h200_on_four_nvswitches_with_ndr() -> None:
    profile = sim_module("profiles").get_profile("hgx-h200")
    assert profile.gpu_count == 8 and profile.nvswitch_count == 4
    for gpu, links in zip(profile.gpus, profile.nvlinks, strict=True):
        assert gpu.name == "NVIDIA H200" and gpu.architecture == "hopper"
        assert gpu.memory_bytes == 143771 * MIB  # 141 GB HBM3e as nvidia-smi shows it
        assert gpu.tdp_watts == 700 and gpu.nvlink_version == 4
        assert len(links) == 18 and {end.remote_type for end in links} == {"switch"}
    assert [nic.rate for nic in profile.nics] == ["400 Gb/sec (4X NDR)"] * 8


def test_the_simulated_library_answers_the_h200_figures(handles: list[object]) -> None:
    h = handles[0]
    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H200"
    memory = pynvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2)
    assert memory.total == 143771 * MIB
    assert pynvml.nvmlDeviceGetPciInfo_v3(h).pciDeviceId >> 16 == 0x2335
    assert pynvml.nvmlDeviceGetMemoryBusWidth(h) == 6144
    assert pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) == 1980
    assert pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM) == 3201
    assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) == 700_000
    assert pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice
    links = [pynvml.nvmlDeviceGetNvLinkState(h, link) for link in range(18)]
    assert links == [pynvml.NVML_FEATURE_ENABLED] * 18
    with pytest.raises(pynvml.NVMLError):
        pynvml.nvmlDeviceGetNvLinkState(h, 18)


def test_mig_offers_seven_18gb_slices_and_one_141gb(handles: list[object]) -> None:
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        handles[7], pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE
    )
    assert info.instanceCount == 7 and info.memorySizeMB < 143771 / 7
    whole = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        handles[7], pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE
    )
    assert whole.instanceCount == 1 and whole.multiprocessorCount == 132
    assert whole.memorySizeMB <= 143771
    # GPU 7 holds the layout: seven MIG devices of the 1g.18gb profile
    assert pynvml.nvmlDeviceGetMigMode(handles[7])[0] == pynvml.NVML_DEVICE_MIG_ENABLE
    devices = [pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handles[7], i) for i in range(7)]
    assert len(devices) == 7
