"""C functions the simulated library answers with NotSupported, as the real driver would,
declared as tables: C function name -> why the driver says NotSupported.

Each exists so that a tool calling it gets the driver's answer, not FunctionNotFound
(which pynvml-based tools report as an incompatible driver). An area module keeps the
table of its own area beside the functions that do answer, and puts it on its class with
`@answers_not_supported(TABLE)`, so that the function keeps its place in
`SimulatedNvml`'s MRO. The functions no simulated board has in any area are here,
grouped by why, on `UnsupportedQueries`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import ERROR_NOT_SUPPORTED
from nvwatch.sim.nvml.core import NvmlCore, device_call

# C function name -> why the driver answers NotSupported (the docstring of its answer)
NotSupportedTable = Mapping[str, str]
# what turns an answer into a C entry point: core.device_call, or mig_handles.mig_call()
Wrapper = Callable[[Callable[..., int]], Callable[..., int]]
C = TypeVar("C", bound=type[NvmlCore])


def because(reason: str, *functions: str) -> dict[str, str]:
    """The table entries of `functions`, which answer NotSupported for one `reason`."""
    return dict.fromkeys(functions, reason)


def not_supported(name: str, reason: str, via: Wrapper = device_call) -> Callable[..., int]:
    """C function `name`: NotSupported for every handle it is given (a handle first, then
    anything), after the checks `via` makes (init, a lost GPU, ...)."""

    def answer(self: NvmlCore, gpu: SimulatedGpu, /, *args: Any) -> int:
        return ERROR_NOT_SUPPORTED

    answer.__name__ = name  # device_call counts calls under the C function's name
    answer.__doc__ = f"NotSupported: {reason}"
    return via(answer)


def answers_not_supported(table: NotSupportedTable, via: Wrapper = device_call) -> Callable[[C], C]:
    """Class decorator: the class answers every C function in `table` with NotSupported."""

    def install(cls: C) -> C:
        for name, reason in table.items():
            if name in vars(cls):
                raise TypeError(f"{cls.__name__}.{name} is written out and in a NotSupported table")
            setattr(cls, name, not_supported(name, reason, via))
        return cls

    return install


VGPU_HOST = because(
    "vGPU: bare-metal nodes run the plain driver, without the vGPU manager",
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
CONFIDENTIAL_COMPUTING = because(
    "confidential computing: only Hopper has it, and no simulated node turns it on",
    "nvmlDeviceGetConfComputeMemSizeInfo",
    "nvmlDeviceGetConfComputeProtectedMemoryUsage",
    "nvmlDeviceGetConfComputeGpuCertificate",
    "nvmlDeviceGetConfComputeGpuAttestationReport",
)
LATER_HARDWARE = {
    **because(
        "Grace: C2C links and addressing modes",
        "nvmlDeviceGetC2cModeInfoV",
        "nvmlDeviceGetAddressingMode",
    ),
    **because(
        "Blackwell: platform info, PDI, DRAM encryption, fabric host names, black-box "
        "recorder, PRM registers, performance metrics, workload power profiles, adaptive TGP",
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
    ),
    **because(
        "mobile GPUs: power source, memory limits",
        "nvmlDeviceGetPowerSource",
        "nvmlDeviceGetMemoryLimits_v1",
    ),
}
NOT_SUPPORTED_ANYWHERE: NotSupportedTable = {
    **VGPU_HOST,
    **CONFIDENTIAL_COMPUTING,
    **LATER_HARDWARE,
}


@answers_not_supported(NOT_SUPPORTED_ANYWHERE)
class UnsupportedQueries(NvmlCore):
    """The C functions of no simulated board's area: NOT_SUPPORTED_ANYWHERE."""
