"""Queries every simulated board answers with NotSupported, as the real driver would.

Each exists so that a tool calling it gets the driver's answer, not FunctionNotFound
(which pynvml-based tools report as an incompatible driver). Grouped by why:
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nvwatch.agent.sim.gpu_model import SimulatedGpu
from nvwatch.agent.sim.nvml.abi import ERROR_NOT_SUPPORTED
from nvwatch.agent.sim.nvml.core import NvmlCore, device_call

# vGPU: bare-metal nodes run the plain driver, without the vGPU manager
VGPU_HOST = (
    "nvmlDeviceGetHostVgpuMode",
    "nvmlDeviceGetSupportedVgpus",
    "nvmlDeviceGetCreatableVgpus",
    "nvmlDeviceGetActiveVgpus",
    "nvmlDeviceGetVgpuMetadata",
    "nvmlDeviceGetPgpuMetadataString",
    "nvmlDeviceGetVgpuCapabilities",
    "nvmlDeviceGetVgpuHeterogeneousMode",
    "nvmlDeviceGetVgpuSchedulerCapabilities",
    "nvmlDeviceGetVgpuSchedulerLog",
    "nvmlDeviceGetVgpuSchedulerLog_v2",
    "nvmlDeviceGetVgpuSchedulerState",
    "nvmlDeviceGetVgpuSchedulerState_v2",
    "nvmlDeviceGetVgpuUtilization",
    "nvmlDeviceGetVgpuProcessUtilization",
    "nvmlDeviceGetVgpuInstancesUtilizationInfo",
    "nvmlDeviceGetVgpuProcessesUtilizationInfo",
    "nvmlDeviceGetVgpuTypeCreatablePlacements",
    "nvmlDeviceGetVgpuTypeSupportedPlacements",
    "nvmlVgpuTypeGetMaxInstances",
    "nvmlDeviceGetGridLicensableFeatures_v4",
)
# confidential computing: only Hopper has it, and no simulated node turns it on
CONFIDENTIAL_COMPUTING = (
    "nvmlDeviceGetConfComputeMemSizeInfo",
    "nvmlDeviceGetConfComputeProtectedMemoryUsage",
    "nvmlDeviceGetConfComputeGpuCertificate",
    "nvmlDeviceGetConfComputeGpuAttestationReport",
)
# later hardware: Grace (C2C, addressing modes), Blackwell (platform info, PDI, DRAM
# encryption, fabric host names, black-box recorder, PRM registers, performance
# metrics, workload power profiles, adaptive TGP), and mobile (power source, limits)
LATER_HARDWARE = (
    "nvmlDeviceGetC2cModeInfoV",
    "nvmlDeviceGetAddressingMode",
    "nvmlDeviceGetPlatformInfo",
    "nvmlDeviceGetPdi",
    "nvmlDeviceGetDramEncryptionMode",
    "nvmlDeviceGetHostname_v1",
    "nvmlDeviceGetBBXTimeData_v1",
    "nvmlDeviceGetLastBBXFlushTime",
    "nvmlDeviceReadPRMCounters_v1",
    "nvmlDevicePerfMetricsGetSamples_v1",
    "nvmlDeviceWorkloadPowerProfileGetCurrentProfiles",
    "nvmlDeviceWorkloadPowerProfileGetProfilesInfo",
    "nvmlDeviceGetAdaptiveTgpModeInfo_v1",
    "nvmlDeviceGetPowerSource",
    "nvmlDeviceGetMemoryLimits_v1",
)
NOT_SUPPORTED_ANYWHERE = VGPU_HOST + CONFIDENTIAL_COMPUTING + LATER_HARDWARE


def _not_supported(name: str) -> Callable[..., int]:
    def answer(self: NvmlCore, gpu: SimulatedGpu, /, *args: Any) -> int:
        return ERROR_NOT_SUPPORTED

    answer.__name__ = name  # device_call counts calls under the C function's name
    return device_call(answer)


class UnsupportedQueries(NvmlCore):
    """The C functions named in NOT_SUPPORTED_ANYWHERE (a handle first, then anything)."""


for _name in NOT_SUPPORTED_ANYWHERE:
    setattr(UnsupportedQueries, _name, _not_supported(_name))
