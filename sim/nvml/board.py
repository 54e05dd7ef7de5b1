"""The board and its driver: display, driver model, brand, InfoROM, firmware, modes,
and finding a device by serial, versioned UUID or (for drain state) PCI address."""

from __future__ import annotations

import zlib
from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_GPU_IS_LOST,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    SUCCESS,
    as_int,
    deref,
    set_out,
    write_pointer,
    write_string,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call, lib_call
from nvwatch.sim.nvml.unsupported import answers_not_supported, because
from nvwatch.sim.profiles import gpu_pci_bus_id

# memory interface width in bits (datasheets): HBM2/2e/3 stacks are 1024 bits each
_MEMORY_BUS_BITS = {
    "Tesla P100-SXM2-16GB": 4096,
    "Tesla V100-SXM2-16GB": 4096,
    "Tesla V100-SXM2-32GB": 4096,
    "Tesla V100-DGXS-32GB": 4096,
    "NVIDIA A100-SXM4-40GB": 5120,
    "NVIDIA H100 80GB HBM3": 5120,
    "NVIDIA H200": 6144,  # six HBM3e stacks
    "Tesla T4": 256,
    "NVIDIA GeForce GTX 1080 Ti": 352,
    "NVIDIA GeForce RTX 2080 Ti": 352,
}
# FP32 cores per SM; GP100 (P100) has 64, the GeForce Pascal GP102 128, Hopper 128
_CORES_PER_SM = {"pascal": 64, "volta": 64, "turing": 64, "ampere": 64, "hopper": 128}
_GEFORCE_PASCAL_CORES_PER_SM = 128
# board part numbers as `nvidia-smi -q` prints them (~); GeForce boards report none
_PART_NUMBERS = {
    "Tesla P100-SXM2-16GB": "900-2H403-0000-000",
    "Tesla V100-SXM2-16GB": "900-2G503-0000-000",
    "Tesla V100-SXM2-32GB": "900-2G503-0010-000",
    "Tesla V100-DGXS-32GB": "900-2G500-0010-000",
    "NVIDIA A100-SXM4-40GB": "692-2G506-0200-002",
    "NVIDIA H100 80GB HBM3": "692-2G520-0200-000",
    "NVIDIA H200": "692-2G520-0280-000",
    "Tesla T4": "900-2G183-0000-001",
}
# InfoROM object versions by architecture (~ `nvidia-smi -q`, "Inforom Version")
_INFOROM = {
    "pascal": {pynvml.NVML_INFOROM_OEM: "1.1", pynvml.NVML_INFOROM_ECC: "4.1"},
    "volta": {pynvml.NVML_INFOROM_OEM: "1.1", pynvml.NVML_INFOROM_ECC: "5.0"},
    "turing": {pynvml.NVML_INFOROM_OEM: "1.1", pynvml.NVML_INFOROM_ECC: "5.0"},
    "ampere": {pynvml.NVML_INFOROM_OEM: "2.0", pynvml.NVML_INFOROM_ECC: "6.0"},
    "hopper": {
        pynvml.NVML_INFOROM_OEM: "2.1",
        pynvml.NVML_INFOROM_ECC: "7.0",
        pynvml.NVML_INFOROM_DEN: "7.0",
    },
}
_GSP_DEFAULT_DRIVER = 535  # GSP firmware on by default for Turing/Ampere from R535


def _driver_major(version: str) -> int:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def drives_display(gpu: SimulatedGpu) -> bool:
    """A workstation's first GeForce drives the monitor; data-centre boards never do."""
    return gpu.model.fan and gpu.index == 0


BOARD_NOT_SUPPORTED = {
    **because(
        "Windows only (WDDM/TCC/MCDM): the Linux driver answers NotSupported",
        "nvmlDeviceGetDriverModel",
        "nvmlDeviceGetDriverModel_v2",
    ),
    **because("GOM was a Kepler-era Tesla/Titan setting", "nvmlDeviceGetGpuOperationMode"),
}


@answers_not_supported(BOARD_NOT_SUPPORTED)
class BoardQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetDisplayActive(self, gpu: SimulatedGpu, active: Any) -> int:
        set_out(active, 1 if drives_display(gpu) else 0)
        return SUCCESS

    @device_call
    def nvmlDeviceGetBrand(self, gpu: SimulatedGpu, brand: Any) -> int:
        if gpu.model.fan:
            value = pynvml.NVML_BRAND_GEFORCE
        elif gpu.model.name.startswith("Tesla"):
            value = pynvml.NVML_BRAND_TESLA
        else:
            value = pynvml.NVML_BRAND_NVIDIA  # A100/H100 report the plain NVIDIA brand
        set_out(brand, value)
        return SUCCESS

    @device_call
    def nvmlDeviceGetBoardPartNumber(self, gpu: SimulatedGpu, buffer: Any, length: Any) -> int:
        part = _PART_NUMBERS.get(gpu.model.name)
        if part is None:
            return ERROR_NOT_SUPPORTED
        return write_string(buffer, length, part)

    @device_call
    def nvmlDeviceGetNumGpuCores(self, gpu: SimulatedGpu, cores: Any) -> int:
        model = gpu.model
        per_sm = _CORES_PER_SM[model.architecture]
        if model.architecture == "pascal" and model.fan:
            per_sm = _GEFORCE_PASCAL_CORES_PER_SM
        set_out(cores, model.sm_count * per_sm)
        return SUCCESS

    @device_call
    def nvmlDeviceGetMemoryBusWidth(self, gpu: SimulatedGpu, width: Any) -> int:
        bits = _MEMORY_BUS_BITS.get(gpu.model.name)
        if bits is None:
            return ERROR_NOT_SUPPORTED
        set_out(width, bits)
        return SUCCESS

    # --- InfoROM ------------------------------------------------------------------------

    @device_call
    def nvmlDeviceGetInforomVersion(
        self, gpu: SimulatedGpu, which: Any, buffer: Any, length: Any
    ) -> int:
        obj = as_int(which)
        if obj >= pynvml.NVML_INFOROM_COUNT:
            return ERROR_INVALID_ARGUMENT
        version = _INFOROM[gpu.model.architecture].get(obj)
        if version is None or (obj == pynvml.NVML_INFOROM_ECC and not gpu.model.ecc):
            return ERROR_NOT_SUPPORTED
        return write_string(buffer, length, version)

    @device_call
    def nvmlDeviceGetInforomImageVersion(self, gpu: SimulatedGpu, buffer: Any, length: Any) -> int:
        if gpu.model.fan:
            return ERROR_NOT_SUPPORTED  # GeForce boards carry no InfoROM image version
        # "G<board>.<sku>.00.<rev>", from the board's part number
        part = _PART_NUMBERS.get(gpu.model.name, "000-00000-0000-000")
        _, board, sku, _ = part.split("-")
        return write_string(buffer, length, f"{board[1:]}.{sku}.00.02")

    @device_call
    def nvmlDeviceGetInforomConfigurationChecksum(self, gpu: SimulatedGpu, checksum: Any) -> int:
        if gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        set_out(checksum, zlib.crc32(f"{gpu.model.name}/{gpu.model.vbios_version}".encode()))
        return SUCCESS

    @device_call
    def nvmlDeviceValidateInforom(self, gpu: SimulatedGpu) -> int:
        return ERROR_NOT_SUPPORTED if gpu.model.fan else SUCCESS  # checksums are valid

    # --- modes --------------------------------------------------------------------------

    @device_call
    def nvmlDeviceGetVirtualizationMode(self, gpu: SimulatedGpu, mode: Any) -> int:
        set_out(mode, pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE)  # bare metal
        return SUCCESS

    @device_call
    def nvmlDeviceGetAPIRestriction(self, gpu: SimulatedGpu, api: Any, restricted: Any) -> int:
        if gpu.model.fan:
            return ERROR_NOT_SUPPORTED
        if as_int(api) >= pynvml.NVML_RESTRICTED_API_COUNT:
            return ERROR_INVALID_ARGUMENT
        set_out(restricted, pynvml.NVML_FEATURE_ENABLED)  # clock changes need root
        return SUCCESS

    @device_call
    def nvmlDeviceGetCapabilities(self, gpu: SimulatedGpu, caps: Any) -> int:
        info = deref(caps)
        if info.version != pynvml.nvmlDeviceCapabilities_v1:
            return ERROR_ARGUMENT_VERSION_MISMATCH
        info.capMask = 0  # no extended GPU memory (a Grace-coherent feature)
        return SUCCESS

    @device_call
    def nvmlDeviceGetGspFirmwareMode(self, gpu: SimulatedGpu, enabled: Any, default: Any) -> int:
        on = self._gsp_enabled(gpu)
        set_out(enabled, int(on))
        set_out(default, int(on))
        return SUCCESS

    @device_call
    def nvmlDeviceGetGspFirmwareVersion(self, gpu: SimulatedGpu, version: Any) -> int:
        if not self._gsp_enabled(gpu):
            return ERROR_NOT_SUPPORTED
        deref(version).value = self.profile.driver_version.encode()  # GSP ships with it
        return SUCCESS

    def _gsp_enabled(self, gpu: SimulatedGpu) -> bool:
        """GSP firmware: required on Hopper, default on Turing/Ampere from R535."""
        arch = gpu.model.architecture
        if arch == "hopper":
            return True
        recent = _driver_major(self.profile.driver_version) >= _GSP_DEFAULT_DRIVER
        return arch in ("turing", "ampere") and not gpu.model.fan and recent

    # --- finding a device -----------------------------------------------------------------

    @lib_call
    def nvmlDeviceGetHandleBySerial(self, serial: Any, device: Any) -> int:
        wanted = deref(serial).value
        text = wanted.decode() if isinstance(wanted, bytes) else str(wanted)
        for gpu in self.gpus:
            if not gpu.model.fan and gpu.serial == text:  # GeForce boards have no serial
                if gpu.lost:
                    return ERROR_GPU_IS_LOST
                write_pointer(device, self.handle_address(gpu.index))
                return SUCCESS
        return ERROR_NOT_FOUND

    @lib_call
    def nvmlDeviceGetHandleByUUIDV(self, uuid: Any, device: Any) -> int:
        info = deref(uuid)
        if info.type != pynvml.NVML_UUID_TYPE_ASCII:
            return ERROR_NOT_FOUND  # the binary form of a simulated UUID matches nothing
        text = info.value.str.decode() if isinstance(info.value.str, bytes) else info.value.str
        for gpu in self.gpus:
            if gpu.uuid == text:
                if gpu.lost:
                    return ERROR_GPU_IS_LOST
                write_pointer(device, self.handle_address(gpu.index))
                return SUCCESS
        return ERROR_NOT_FOUND

    @lib_call
    def nvmlDeviceQueryDrainState(self, pci_info: Any, state: Any) -> int:
        wanted = deref(pci_info).busId
        bus_id = wanted.decode() if isinstance(wanted, bytes) else str(wanted)
        for gpu in self.gpus:
            if gpu_pci_bus_id(self.profile, gpu.index).lower() == bus_id.lower():
                set_out(state, pynvml.NVML_FEATURE_DISABLED)  # not being drained
                return SUCCESS
        return ERROR_NOT_FOUND
