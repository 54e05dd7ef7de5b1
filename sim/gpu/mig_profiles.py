"""MIG GPU-instance profiles of the boards the simulator models: names, sizes, placements.

Sources: NVIDIA's MIG user guide ("Supported MIG Profiles": fractions of memory and SMs,
instance counts, and the placement diagrams) and `nvidia-smi mig -lgip` / `-lgipp` as
printed on the boards (memory in GiB to two decimals, SM, copy-engine, decoder, JPEG and
OFA counts). Values marked ~ were not confirmed on a board: the A100 80GB memory sizes
follow NVIDIA's go-nvml mock server (pkg/nvml/mock/shared/gpus/a100.go).

A placement is in memory slices (8 per GPU, NVML's nvmlGpuInstancePlacement_t): a
3g.40gb takes 3 of the 7 compute slices but 4 of the 8 memory slices, so it starts at
0 or 4 only. Two instances fit together when their memory-slice ranges do not overlap;
with every profile's allowed starts that reproduces NVIDIA's list of valid mixes (e.g.
4g+3g, 3g+2g+1g, 2g x3 + 1g, but never 3g x2 + 1g).

This module is data and the two lookups over it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pynvml

MEMORY_SLICES = 8
COMPUTE_SLICES = 7
#: nvmlDeviceGetMaxMigDeviceCount on every MIG board here: seven 1g instances at most
MAX_MIG_DEVICES = 7


@dataclass(frozen=True)
class GpuInstanceProfile:
    """One row of `nvidia-smi mig -lgip` (nvmlGpuInstanceProfileInfo_v2_t)."""

    name: str  # "3g.40gb"; NVML's name field is "MIG 3g.40gb"
    nvml_profile: int  # NVML_GPU_INSTANCE_PROFILE_* (the index NVML's info call takes)
    profile_id: int  # the ID nvidia-smi prints and nvmlGpuInstanceInfo_t.profileId holds
    compute_slices: int
    placement_size: int  # memory slices
    starts: tuple[int, ...]  # allowed placement starts, in memory slices
    instance_count: int  # how many fit on an empty GPU
    sm_count: int
    memory_mib: int
    copy_engines: int
    decoders: int
    jpegs: int
    ofas: int

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 1024 * 1024


def _row(
    name: str,
    nvml_profile: int,
    profile_id: int,
    slices: tuple[int, int, tuple[int, ...], int],
    sm_count: int,
    memory_gib: float,
    engines: tuple[int, int, int, int],
) -> GpuInstanceProfile:
    compute, size, starts, count = slices
    copy, dec, jpeg, ofa = engines
    return GpuInstanceProfile(
        name, nvml_profile, profile_id, compute, size, starts, count, sm_count,
        round(memory_gib * 1024), copy, dec, jpeg, ofa,
    )  # fmt: skip


# NVML's GPU-instance profile indices (NVML_GPU_INSTANCE_PROFILE_*)
_1G = pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE
_1G_ME = pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1  # +me: media engines
_1G_2M = pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2  # 1 compute, 2 memory slices
_2G = pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE
_3G = pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE
_4G = pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE
_7G = pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE
_ANY_1G = (0, 1, 2, 3, 4, 5, 6)  # a 1g instance may not start at slice 7
_EVEN = (0, 2, 4, 6)

# nvidia-smi mig -lgip on an A100-SXM4-40GB: 4.75 / 9.62 / 19.50 / 39.25 GiB
A100_40GB: tuple[GpuInstanceProfile, ...] = (
    _row("1g.5gb", _1G, 19, (1, 1, _ANY_1G, 7), 14, 4.75, (1, 0, 0, 0)),
    _row("1g.5gb+me", _1G_ME, 20, (1, 1, _ANY_1G, 1), 14, 4.75, (1, 1, 1, 1)),
    _row("1g.10gb", _1G_2M, 15, (1, 2, _EVEN, 4), 14, 9.625, (1, 1, 0, 0)),
    _row("2g.10gb", _2G, 14, (2, 2, (0, 2, 4), 3), 28, 9.625, (2, 1, 0, 0)),
    _row("3g.20gb", _3G, 9, (3, 4, (0, 4), 2), 42, 19.5, (3, 2, 0, 0)),
    _row("4g.20gb", _4G, 5, (4, 4, (0,), 1), 56, 19.5, (4, 2, 0, 0)),
    _row("7g.40gb", _7G, 0, (7, 8, (0,), 1), 98, 39.25, (7, 5, 1, 1)),
)  # fmt: skip

# ~ A100-SXM4-80GB: the same slices with twice the memory per slice
A100_80GB: tuple[GpuInstanceProfile, ...] = (
    _row("1g.10gb", _1G, 19, (1, 1, _ANY_1G, 7), 14, 9.625, (1, 0, 0, 0)),
    _row("1g.10gb+me", _1G_ME, 20, (1, 1, _ANY_1G, 1), 14, 9.625, (1, 1, 1, 1)),
    _row("1g.20gb", _1G_2M, 15, (1, 2, _EVEN, 4), 14, 19.5, (1, 1, 0, 0)),
    _row("2g.20gb", _2G, 14, (2, 2, (0, 2, 4), 3), 28, 19.5, (2, 1, 0, 0)),
    _row("3g.40gb", _3G, 9, (3, 4, (0, 4), 2), 42, 39.25, (3, 2, 0, 0)),
    _row("4g.40gb", _4G, 5, (4, 4, (0,), 1), 56, 39.25, (4, 2, 0, 0)),
    _row("7g.80gb", _7G, 0, (7, 8, (0,), 1), 98, 78.5, (7, 5, 1, 1)),
)  # fmt: skip

# nvidia-smi mig -lgip on an H100 80GB HBM3: 9.75 / 19.62 / 39.50 / 79.25 GiB
H100_80GB: tuple[GpuInstanceProfile, ...] = (
    _row("1g.10gb", _1G, 19, (1, 1, _ANY_1G, 7), 16, 9.75, (1, 1, 1, 0)),
    _row("1g.10gb+me", _1G_ME, 20, (1, 1, _ANY_1G, 1), 16, 9.75, (1, 1, 1, 1)),
    _row("1g.20gb", _1G_2M, 15, (1, 2, _EVEN, 4), 26, 19.625, (1, 1, 1, 0)),
    _row("2g.20gb", _2G, 14, (2, 2, (0, 2, 4), 3), 32, 19.625, (2, 2, 2, 0)),
    _row("3g.40gb", _3G, 9, (3, 4, (0, 4), 2), 60, 39.5, (3, 3, 3, 0)),
    _row("4g.40gb", _4G, 5, (4, 4, (0,), 1), 64, 39.5, (4, 4, 4, 0)),
    _row("7g.80gb", _7G, 0, (7, 8, (0,), 1), 132, 79.25, (8, 7, 7, 1)),
)  # fmt: skip

# ~ H200 (141 GB HBM3e): the H100's slices, SMs and engines (same GH100 die) with the
# memory of each scaled to the larger board (NVIDIA's MIG guide names 1g.18gb to
# 7g.141gb, seven instances at most); check the GiB with `nvidia-smi mig -lgip` there
H200_141GB: tuple[GpuInstanceProfile, ...] = (
    _row("1g.18gb", _1G, 19, (1, 1, _ANY_1G, 7), 16, 17.125, (1, 1, 1, 0)),
    _row("1g.18gb+me", _1G_ME, 20, (1, 1, _ANY_1G, 1), 16, 17.125, (1, 1, 1, 1)),
    _row("1g.35gb", _1G_2M, 15, (1, 2, _EVEN, 4), 26, 34.5, (1, 1, 1, 0)),
    _row("2g.35gb", _2G, 14, (2, 2, (0, 2, 4), 3), 32, 34.5, (2, 2, 2, 0)),
    _row("3g.71gb", _3G, 9, (3, 4, (0, 4), 2), 60, 69.5, (3, 3, 3, 0)),
    _row("4g.71gb", _4G, 5, (4, 4, (0,), 1), 64, 69.5, (4, 4, 4, 0)),
    _row("7g.141gb", _7G, 0, (7, 8, (0,), 1), 132, 139.75, (8, 7, 7, 1)),
)  # fmt: skip

#: GPU model name (nvmlDeviceGetName) -> its GPU-instance profiles
PROFILES_BY_GPU: dict[str, tuple[GpuInstanceProfile, ...]] = {
    "NVIDIA A100-SXM4-40GB": A100_40GB,
    "NVIDIA A100-SXM4-80GB": A100_80GB,
    "NVIDIA H100 80GB HBM3": H100_80GB,
    "NVIDIA H200": H200_141GB,
}

#: compute-instance slice count -> NVML_COMPUTE_INSTANCE_PROFILE_* (also the CI profile
#: ID `nvidia-smi mig -lcip` prints)
COMPUTE_PROFILE_OF_SLICES: dict[int, int] = {
    1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
    7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
}


def profiles_for(gpu_name: str) -> tuple[GpuInstanceProfile, ...]:
    """The GPU-instance profiles of a board; () for boards without MIG."""
    return PROFILES_BY_GPU.get(gpu_name, ())


def by_nvml_profile(gpu_name: str, nvml_profile: int) -> GpuInstanceProfile | None:
    for profile in profiles_for(gpu_name):
        if profile.nvml_profile == nvml_profile:
            return profile
    return None
