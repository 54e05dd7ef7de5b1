"""Call every public pynvml `nvmlDevice*` query on every GPU, as a user's script would.

Run it under `nvwatch simulate exec --profile P -- python every_device_query.py`. It uses
nothing from nvwatch, only pynvml. Queries are the wrappers named nvmlDevice* that only
read (setters, resets, MIG/GPU-instance creation and the like are left out by name).
Each call's outcome is printed as one JSON line {"gpu", "fn", "outcome", "value"};
outcome "ok", "refused" (see REFUSALS) or the NVML error class name.

Exit 1, with the reason on stderr, when a query raises FunctionNotFound (the library lacks
the C function), another NVML error that only a broken library gives for valid arguments
(Uninitialized, InvalidArgument, ArgumentVersionMismatch, InsufficientSize, Unknown), or
anything that is not an NVMLError (a struct pynvml cannot decode).
"""

from __future__ import annotations

import ctypes
import inspect
import json
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any

import pynvml

ACTIONS = re.compile(
    r"^nvmlDevice(Set|Clear|Reset|Create|Register|Remove|Modify|Discover|Freeze|"
    r"PowerSmoothing|ReadWrite|VgpuForce|WorkloadPowerProfile(Set|Clear|Update))"
)
# lookups that take no handle: called once each with a real key below
LOOKUPS = {
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetHandleBySerial",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByUUIDV",
    "nvmlDeviceQueryDrainState",
}
BROKEN = (
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_INVALID_ARGUMENT,
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    pynvml.NVML_ERROR_INSUFFICIENT_SIZE,  # the wrappers size their own buffers
    pynvml.NVML_ERROR_UNKNOWN,
)

# the documented answer to arguments these calls refuse: a GPU handle given where a MIG
# device handle is wanted
REFUSALS = {
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": pynvml.NVML_ERROR_INVALID_ARGUMENT,
}


def struct(name: str, version: str | None = None) -> Any:
    """A pynvml struct instance, with its version field set when it has one."""
    value = getattr(pynvml, name)()
    if version is not None:
        value.version = getattr(pynvml, version)
    return value


class Call:
    """What the argument builders see: the GPU's handle, a peer's, known clocks."""

    def __init__(self, handle: Any, peer: Any) -> None:
        self.h = handle
        self.peer = peer

    def memory_clock(self) -> int:
        return int(pynvml.nvmlDeviceGetMaxClockInfo(self.h, pynvml.NVML_CLOCK_MEM))


SM = pynvml.NVML_CLOCK_SM
NODE = pynvml.NVML_AFFINITY_SCOPE_NODE
ARGS: dict[str, Callable[[Call], tuple[Any, ...]]] = {
    "nvmlDeviceGetAPIRestriction": lambda c: (
        c.h,
        pynvml.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS,
    ),
    "nvmlDeviceGetAccountingStats": lambda c: (c.h, 1),
    "nvmlDeviceGetAccountingStats_v2": lambda c: (c.h, 1),
    "nvmlDeviceGetAdaptiveTgpModeInfo_v1": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlAdaptiveTgpModeInfo_v1_t")),
    ),
    "nvmlDeviceGetApplicationsClock": lambda c: (c.h, SM),
    "nvmlDeviceGetBankRemapperStatus_v1": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlEccBankRemapperStatus_v1_t")),
    ),
    "nvmlDeviceGetCapabilities": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlDeviceCapabilities_v1_t", "nvmlDeviceCapabilities_v1")),
    ),
    "nvmlDeviceGetClock": lambda c: (c.h, SM, pynvml.NVML_CLOCK_ID_CURRENT),
    "nvmlDeviceGetClockInfo": lambda c: (c.h, SM),
    "nvmlDeviceGetClockOffsets": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlClockOffset_t", "nvmlClockOffset_v1")),
    ),
    "nvmlDeviceGetConfComputeGpuAttestationReport": lambda c: (c.h, [0] * 32),
    "nvmlDeviceGetCpuAffinity": lambda c: (c.h, 8),
    "nvmlDeviceGetCpuAffinityWithinScope": lambda c: (c.h, 8, NODE),
    "nvmlDeviceGetDefaultApplicationsClock": lambda c: (c.h, SM),
    "nvmlDeviceGetDetailedEccErrors": lambda c: (c.h, 0, 0),
    "nvmlDeviceGetEncoderCapacity": lambda c: (c.h, pynvml.NVML_ENCODER_QUERY_H264),
    "nvmlDeviceGetFanControlPolicy_v2": lambda c: (c.h, 0),
    "nvmlDeviceGetFanSpeed_v2": lambda c: (c.h, 0),
    "nvmlDeviceGetFieldValues": lambda c: (c.h, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT]),
    "nvmlDeviceGetGpuFabricInfo": lambda c: (c.h, ctypes.byref(struct("c_nvmlGpuFabricInfo_t"))),
    "nvmlDeviceGetGpuFabricInfoV": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3")),
    ),
    "nvmlDeviceGetGpuFabricInfo_v4": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlGpuFabricInfo_v4_t")),
    ),
    "nvmlDeviceGetGpuInstanceById": lambda c: (c.h, 0),
    "nvmlDeviceGetGpuInstancePossiblePlacements": lambda c: (
        c.h,
        0,
        (pynvml.c_nvmlGpuInstancePlacement_t * 8)(),
        ctypes.byref(ctypes.c_uint(8)),
    ),
    "nvmlDeviceGetGpuInstanceProfileInfo": lambda c: (c.h, 0),
    "nvmlDeviceGetGpuInstanceProfileInfoV": lambda c: (c.h, 0),
    "nvmlDeviceGetGpuInstanceProfileInfoById": lambda c: (c.h, 0),
    "nvmlDeviceGetGpuInstanceProfileInfoByIdV": lambda c: (c.h, 0),
    "nvmlDeviceGetGpuInstanceRemainingCapacity": lambda c: (c.h, 0),
    "nvmlDeviceGetGpuInstances": lambda c: (
        c.h,
        0,
        (pynvml.c_nvmlGpuInstance_t * 8)(),
        ctypes.byref(ctypes.c_uint(8)),
    ),
    "nvmlDeviceGetInforomVersion": lambda c: (c.h, pynvml.NVML_INFOROM_OEM),
    "nvmlDeviceGetMaxClockInfo": lambda c: (c.h, SM),
    "nvmlDeviceGetMaxCustomerBoostClock": lambda c: (c.h, SM),
    "nvmlDeviceGetMemoryAffinity": lambda c: (c.h, 1, NODE),
    "nvmlDeviceGetMemoryErrorCounter": lambda c: (
        c.h,
        0,
        0,
        pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY,
    ),
    "nvmlDeviceGetMemoryLimits_v1": lambda c: (c.h, struct("c_nvmlGetMemoryLimits_v1_t")),
    "nvmlDeviceGetMigDeviceHandleByIndex": lambda c: (c.h, 0),
    "nvmlDeviceGetMinMaxClockOfPState": lambda c: (c.h, SM, 0),
    "nvmlDeviceGetNvLinkCapability": lambda c: (c.h, 0, pynvml.NVML_NVLINK_CAP_P2P_SUPPORTED),
    "nvmlDeviceGetNvLinkErrorCounter": lambda c: (c.h, 0, 0),
    "nvmlDeviceGetNvLinkInfo": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlNvLinkInfo_v2_t", "nvmlNvLinkInfo_v2")),
    ),
    "nvmlDeviceGetNvLinkRemoteDeviceType": lambda c: (c.h, 0),
    "nvmlDeviceGetNvLinkRemotePciInfo": lambda c: (c.h, 0),
    "nvmlDeviceGetNvLinkState": lambda c: (c.h, 0),
    "nvmlDeviceGetNvLinkTelemetrySamples_v1": lambda c: (c.h, ctypes.c_uint()),
    "nvmlDeviceGetNvLinkUtilizationControl": lambda c: (c.h, 0, 0),
    "nvmlDeviceGetNvLinkUtilizationCounter": lambda c: (c.h, 0, 0),
    "nvmlDeviceGetNvLinkVersion": lambda c: (c.h, 0),
    "nvmlDeviceGetNvlinkBwMode": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlNvlinkGetBwMode_v1_t", "nvmlNvlinkGetBwMode_v1")),
    ),
    "nvmlDeviceGetNvlinkSupportedBwModes": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlNvlinkSupportedBwModes_v1_t", "nvmlNvlinkSupportedBwModes_v1")),
    ),
    "nvmlDeviceGetP2PStatus": lambda c: (c.h, c.peer, pynvml.NVML_P2P_CAPS_INDEX_NVLINK),
    "nvmlDeviceGetPciInfoExt": lambda c: (
        c.h,
        ctypes.byref(struct("nvmlPciInfoExt_v1_t", "nvmlPciInfoExt_v1")),
    ),
    "nvmlDeviceGetPcieThroughput": lambda c: (c.h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
    "nvmlDeviceGetPlatformInfo": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlPlatformInfo_v2_t", "nvmlPlatformInfo_v2")),
    ),
    "nvmlDeviceGetPowerMizerMode_v1": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlDevicePowerMizerModes_v1_t")),
    ),
    "nvmlDeviceGetProcessUtilization": lambda c: (c.h, 0),
    "nvmlDeviceGetProcessesUtilizationInfo": lambda c: (c.h, 0),
    "nvmlDeviceGetRemappedRows_v2": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlRemappedRowsInfo_v2_t")),
    ),
    "nvmlDeviceGetRetiredPages": lambda c: (
        c.h,
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    ),
    "nvmlDeviceGetRetiredPages_v2": lambda c: (
        c.h,
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    ),
    "nvmlDeviceGetRunningProcessDetailList": lambda c: (
        c.h,
        pynvml.nvmlProcessDetailList_v1,
        pynvml.NVML_PROCESS_MODE_COMPUTE,
    ),
    "nvmlDeviceGetSamples": lambda c: (c.h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0),
    "nvmlDeviceGetSramEccErrorStatus": lambda c: (c.h, ctypes.byref(ctypes.c_uint())),
    "nvmlDeviceGetSramUniqueUncorrectedEccErrorCounts": lambda c: (
        c.h,
        ctypes.byref(struct("c_nvmlEccSramUniqueUncorrectedErrorCounts_v1_t")),
    ),
    "nvmlDeviceGetSupportedGraphicsClocks": lambda c: (c.h, c.memory_clock()),
    "nvmlDeviceGetTargetFanSpeed": lambda c: (c.h, 0),
    "nvmlDeviceGetTemperature": lambda c: (c.h, pynvml.NVML_TEMPERATURE_GPU),
    "nvmlDeviceGetTemperatureThreshold": lambda c: (
        c.h,
        pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
    ),
    "nvmlDeviceGetTemperatureV": lambda c: (c.h, pynvml.NVML_TEMPERATURE_GPU),
    "nvmlDeviceGetTemperatureV1": lambda c: (c.h, pynvml.NVML_TEMPERATURE_GPU),
    "nvmlDeviceGetThermalSettings": lambda c: (c.h, pynvml.NVML_THERMAL_TARGET_ALL),
    "nvmlDeviceGetTopologyCommonAncestor": lambda c: (c.h, c.peer),
    "nvmlDeviceGetTopologyNearestGpus": lambda c: (c.h, pynvml.NVML_TOPOLOGY_SYSTEM),
    "nvmlDeviceGetTotalEccErrors": lambda c: (c.h, 0, 0),
    "nvmlDeviceGetVgpuCapabilities": lambda c: (c.h, 0),
    "nvmlDeviceGetVgpuInstancesUtilizationInfo": lambda c: (c.h, 0),
    "nvmlDeviceGetVgpuProcessUtilization": lambda c: (c.h, 0),
    "nvmlDeviceGetVgpuProcessesUtilizationInfo": lambda c: (c.h, 0),
    "nvmlDeviceGetVgpuSchedulerLog_v2": lambda c: (c.h, struct("c_nvmlVgpuSchedulerLogInfo_v2_t")),
    "nvmlDeviceGetVgpuSchedulerState_v2": lambda c: (
        c.h,
        struct("c_nvmlVgpuSchedulerStateInfo_v2_t"),
    ),
    "nvmlDeviceGetVgpuTypeCreatablePlacements": lambda c: (c.h, 1),
    "nvmlDeviceGetVgpuTypeSupportedPlacements": lambda c: (c.h, 1),
    "nvmlDeviceGetVgpuUtilization": lambda c: (c.h, 0),
    "nvmlDeviceGetViolationStatus": lambda c: (c.h, pynvml.NVML_PERF_POLICY_POWER),
    "nvmlDeviceOnSameBoard": lambda c: (c.h, c.peer),
    "nvmlDevicePerfMetricsGetSamples_v1": lambda c: (c.h, struct("c_nvmlPerfMetricsSamples_v1_t")),
    "nvmlDeviceReadPRMCounters_v1": lambda c: (c.h, pynvml.c_nvmlPRMCounterList_v1_t(1)),
    "nvmlDeviceWorkloadPowerProfileGetCurrentProfiles": lambda c: (
        c.h,
        ctypes.byref(
            struct(
                "c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t",
                "nvmlWorkloadPowerProfileCurrentProfiles_v1",
            )
        ),
    ),
    "nvmlDeviceWorkloadPowerProfileGetProfilesInfo": lambda c: (
        c.h,
        ctypes.byref(
            struct(
                "c_nvmlWorkloadPowerProfileProfilesInfo_v1_t",
                "nvmlWorkloadPowerProfileProfilesInfo_v1",
            )
        ),
    ),
}


def queries() -> list[str]:
    """The public nvmlDevice* wrappers that only read, per device."""
    return sorted(
        name
        for name, fn in vars(pynvml).items()
        if name.startswith("nvmlDevice")
        and callable(fn)
        and inspect.isfunction(fn)
        and not ACTIONS.match(name)
        and name not in LOOKUPS
    )


def _short(value: Any) -> Any:
    """A JSON-able summary of a return value."""
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [_short(v) for v in value[:8]]
    return type(value).__name__


def run() -> int:
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    failures: list[str] = []
    for index, handle in enumerate(handles):
        call = Call(handle, handles[(index + 1) % count])
        for name in queries():
            failures += _call(index, name, call)
        failures += _lookups(index, handle)
    pynvml.nvmlShutdown()
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


def _call(index: int, name: str, call: Call) -> list[str]:
    fn = getattr(pynvml, name)
    builder = ARGS.get(name)
    if builder is None:
        required = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.default is inspect.Parameter.empty
        ]
        if len(required) != 1:
            return [f"GPU {index} {name}: no arguments known for {len(required)} parameters"]
        builder = lambda c: (c.h,)  # noqa: E731
    try:
        value = fn(*builder(call))
        outcome = "ok"
    except pynvml.NVMLError as error:
        value, outcome = None, type(error).__name__
        if error.value == REFUSALS.get(name):
            outcome = "refused"
        elif error.value in BROKEN:
            return [f"GPU {index} {name}: {outcome}"]
    except Exception:  # a struct pynvml cannot decode, a wrong signature: a bug
        return [f"GPU {index} {name}: {traceback.format_exc(limit=3)}"]
    print(json.dumps({"gpu": index, "fn": name, "outcome": outcome, "value": _short(value)}))
    return []


def _lookups(index: int, handle: Any) -> list[str]:
    """The lookups that take a key instead of a handle, with this GPU's keys."""
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    bus_id = pynvml.nvmlDeviceGetPciInfo(handle).busId
    found = {
        "nvmlDeviceGetHandleByUUID": pynvml.nvmlDeviceGetHandleByUUID(uuid),
        "nvmlDeviceGetHandleByUUIDV": pynvml.nvmlDeviceGetHandleByUUIDV(
            uuid, pynvml.NVML_UUID_TYPE_ASCII
        ),
        "nvmlDeviceGetHandleByPciBusId": pynvml.nvmlDeviceGetHandleByPciBusId(bus_id),
    }
    failures = [
        f"GPU {index} {name}: found GPU {pynvml.nvmlDeviceGetIndex(other)}"
        for name, other in found.items()
        if pynvml.nvmlDeviceGetIndex(other) != index
    ]
    try:
        serial_handle = pynvml.nvmlDeviceGetHandleBySerial(pynvml.nvmlDeviceGetSerial(handle))
        if pynvml.nvmlDeviceGetIndex(serial_handle) != index:
            failures.append(f"GPU {index} nvmlDeviceGetHandleBySerial: another GPU")
    except pynvml.NVMLError_NotSupported:
        pass  # a board without a serial number
    drain = pynvml.nvmlDeviceQueryDrainState(pynvml.nvmlDeviceGetPciInfo(handle))
    print(
        json.dumps(
            {"gpu": index, "fn": "nvmlDeviceQueryDrainState", "outcome": "ok", "value": drain}
        )
    )
    return failures


if __name__ == "__main__":
    sys.exit(run())
