"""NVLink per-link calls: state, version, capabilities, the far end, error counters.

Throughput and the per-link error counters are also answered as field values
(`nvwatch.sim.nvml.fields`), which share the version table and support rules here.
"""

from __future__ import annotations

from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    SUCCESS,
    as_int,
    deref,
    set_out,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call
from nvwatch.sim.nvml.identity import NVIDIA_VENDOR, fill_pci, pci_device_id
from nvwatch.sim.profiles import gpu_pci_bus_id, nvswitch_pci_bus_id

# nvmlNvlinkVersion_t: NVLink 1.0 -> 1, 2.0 -> 2, 3.0 -> 4, 4.0 -> 6 (pynvml constants)
NVLINK_VERSION_ENUM = {
    1: pynvml.NVML_NVLINK_VERSION_1_0,
    2: pynvml.NVML_NVLINK_VERSION_2_0,
    3: pynvml.NVML_NVLINK_VERSION_3_0,
    4: pynvml.NVML_NVLINK_VERSION_4_0,
}
# nvmlNvLinkErrorCounter_t order: DL_REPLAY, DL_RECOVERY, DL_CRC_FLIT, DL_CRC_DATA, DL_ECC_DATA
_ERROR_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data", "ecc")

# NVSwitch generations by the GPU generation they serve (pci.ids: GV100 NVSwitch 1ac1,
# GA100 NVSwitch 1af1, GH100 NVSwitch 22a3)
_NVSWITCH_DEVICE_IDS = {"volta": 0x1AC1, "ampere": 0x1AF1, "hopper": 0x22A3}


def has_nvlink(gpu: SimulatedGpu) -> bool:
    return bool(gpu.links) and gpu.model.nvlink_version > 0


def has_nvlink_ecc(gpu: SimulatedGpu) -> bool:
    return gpu.model.nvlink_version >= 3  # NVLink data ECC counters arrived with NVLink3


def _link_check(gpu: SimulatedGpu, link: Any) -> int:
    """SUCCESS, or why this link cannot be queried."""
    which = as_int(link)
    if gpu.model.nvlink_version == 0 or not gpu.links:
        return ERROR_NOT_SUPPORTED
    if which >= pynvml.NVML_NVLINK_MAX_LINKS or which < 0:
        return ERROR_INVALID_ARGUMENT
    if which >= len(gpu.links):
        return ERROR_NOT_SUPPORTED  # a link this board does not wire up
    return SUCCESS


class NvLinkQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetNvLinkState(self, gpu: SimulatedGpu, link: Any, active: Any) -> int:
        check = _link_check(gpu, link)
        if check == SUCCESS:
            set_out(active, 1 if gpu.links[as_int(link)].up else 0)
        return check

    @device_call
    def nvmlDeviceGetNvLinkVersion(self, gpu: SimulatedGpu, link: Any, version: Any) -> int:
        check = _link_check(gpu, link)
        if check == SUCCESS:
            set_out(version, NVLINK_VERSION_ENUM[gpu.model.nvlink_version])
        return check

    @device_call
    def nvmlDeviceGetNvLinkCapability(
        self, gpu: SimulatedGpu, link: Any, capability: Any, result: Any
    ) -> int:
        check = _link_check(gpu, link)
        if check != SUCCESS:
            return check
        which = as_int(capability)
        if which >= pynvml.NVML_NVLINK_CAP_COUNT:
            return ERROR_INVALID_ARGUMENT
        bridged = gpu.model.fan  # GeForce NVLink is an SLI bridge between two cards
        values = {
            pynvml.NVML_NVLINK_CAP_P2P_SUPPORTED: 1,
            pynvml.NVML_NVLINK_CAP_SYSMEM_ACCESS: 0 if bridged else 1,
            pynvml.NVML_NVLINK_CAP_P2P_ATOMICS: 1,
            pynvml.NVML_NVLINK_CAP_SYSMEM_ATOMICS: 0,
            pynvml.NVML_NVLINK_CAP_SLI_BRIDGE: 1 if bridged else 0,
            pynvml.NVML_NVLINK_CAP_VALID: 1,
        }
        set_out(result, values[which])
        return SUCCESS

    @device_call
    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, gpu: SimulatedGpu, link: Any, info: Any) -> int:
        check = _link_check(gpu, link)
        if check != SUCCESS:
            return check
        end = gpu.links[as_int(link)].end
        if end.remote_type == "gpu":
            remote = self.gpus[end.remote_index]
            bus_id = gpu_pci_bus_id(self.profile, end.remote_index)
            device_id = pci_device_id(remote.model.name)
        else:
            bus_id = nvswitch_pci_bus_id(end.remote_index)
            switch = _NVSWITCH_DEVICE_IDS.get(gpu.model.architecture, 0x1AC1)
            device_id = (switch << 16) | NVIDIA_VENDOR
        fill_pci(deref(info), bus_id, device_id)
        return SUCCESS

    @device_call
    def nvmlDeviceGetNvLinkRemoteDeviceType(
        self, gpu: SimulatedGpu, link: Any, device_type: Any
    ) -> int:
        check = _link_check(gpu, link)
        if check == SUCCESS:
            switch = gpu.links[as_int(link)].end.remote_type == "switch"
            set_out(
                device_type,
                pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
                if switch
                else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU,
            )
        return check

    @device_call
    def nvmlDeviceGetNvLinkErrorCounter(
        self, gpu: SimulatedGpu, link: Any, counter: Any, value: Any
    ) -> int:
        check = _link_check(gpu, link)
        if check != SUCCESS:
            return check
        which = as_int(counter)
        if which >= len(_ERROR_COUNTERS):
            return ERROR_INVALID_ARGUMENT
        kind = _ERROR_COUNTERS[which]
        if kind == "ecc" and not has_nvlink_ecc(gpu):
            return ERROR_NOT_SUPPORTED
        set_out(value, gpu.nvlink_error_count(as_int(link), kind))
        return SUCCESS
