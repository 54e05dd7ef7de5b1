"""Identity and PCI: names, UUIDs, serials, modes, PCI info, and the PCIe link."""

from __future__ import annotations

from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    KIB,
    SUCCESS,
    as_int,
    deref,
    set_out,
    write_string,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call
from nvwatch.sim.profiles import gpu_pci_bus_id

_ARCHITECTURES = {
    "pascal": pynvml.NVML_DEVICE_ARCH_PASCAL,
    "volta": pynvml.NVML_DEVICE_ARCH_VOLTA,
    "turing": pynvml.NVML_DEVICE_ARCH_TURING,
    "ampere": pynvml.NVML_DEVICE_ARCH_AMPERE,
    "hopper": pynvml.NVML_DEVICE_ARCH_HOPPER,
}

# PCI device ids (pci.ids, vendor 10de); pciDeviceId is (device << 16) | vendor
_PCI_DEVICE_IDS = {
    "Tesla P100-SXM2-16GB": 0x15F9,
    "Tesla V100-SXM2-16GB": 0x1DB1,
    "Tesla V100-SXM2-32GB": 0x1DB5,
    "Tesla V100-DGXS-32GB": 0x1DB7,
    "NVIDIA A100-SXM4-40GB": 0x20B0,
    "NVIDIA H100 80GB HBM3": 0x2330,
    "NVIDIA H200": 0x2335,  # pci.ids: GH100 [H200 SXM 141GB]
    "Tesla T4": 0x1EB8,
    "NVIDIA GeForce GTX 1080 Ti": 0x1B06,
    "NVIDIA GeForce RTX 2080 Ti": 0x1E07,
}
NVIDIA_VENDOR = 0x10DE

# NVML documents nvmlDeviceGetPcieThroughput in "KB/s" without saying which KB. nvwatch
# reads it as KiB/s, as nvitop does and as the same header counts NVLink data (in KiB):
# the agent multiplies by 1024 (`KIB` in agent/sources/nvml/units.py), so the simulator
# answers in units of 1024 bytes, or exported values would sit 2.4% above the
# simulator's own state. A measurement on a real GPU has the final word
# (docs/hardware-notes.md, "Assumptions to confirm").
PCIE_THROUGHPUT_UNIT_BYTES = KIB


def pci_device_id(name: str) -> int:
    """pciDeviceId of a board by its marketing name (unknown names read as a V100)."""
    return (_PCI_DEVICE_IDS.get(name, 0x1DB1) << 16) | NVIDIA_VENDOR


def fill_pci(info: Any, bus_id: str, device_id: int) -> None:
    """Fill an nvmlPciInfo_t for the device at `bus_id` ("0000:3b:00.0")."""
    domain, bus, rest = bus_id.split(":")
    info.busId = bus_id.encode()
    info.busIdLegacy = bus_id[4:].encode()  # 4-digit domain form, 16-byte field
    info.domain = int(domain, 16)
    info.bus = int(bus, 16)
    info.device = int(rest.split(".")[0], 16)
    info.pciDeviceId = device_id
    info.pciSubSystemId = (device_id & 0xFFFF0000) | NVIDIA_VENDOR  # ~ NVIDIA-built board


class IdentityQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetIndex(self, gpu: SimulatedGpu, index: Any) -> int:
        set_out(index, gpu.index)
        return SUCCESS

    @device_call
    def nvmlDeviceGetMinorNumber(self, gpu: SimulatedGpu, minor: Any) -> int:
        set_out(minor, gpu.index)
        return SUCCESS

    @device_call
    def nvmlDeviceGetName(self, gpu: SimulatedGpu, buffer: Any, length: Any) -> int:
        return write_string(buffer, length, gpu.model.name)

    @device_call
    def nvmlDeviceGetUUID(self, gpu: SimulatedGpu, buffer: Any, length: Any) -> int:
        return write_string(buffer, length, gpu.uuid)

    @device_call
    def nvmlDeviceGetSerial(self, gpu: SimulatedGpu, buffer: Any, length: Any) -> int:
        if gpu.model.fan:  # GeForce boards have no board serial in the InfoROM
            return ERROR_NOT_SUPPORTED
        return write_string(buffer, length, gpu.serial)

    @device_call
    def nvmlDeviceGetVbiosVersion(self, gpu: SimulatedGpu, buffer: Any, length: Any) -> int:
        return write_string(buffer, length, gpu.model.vbios_version)

    @device_call
    def nvmlDeviceGetPciInfo_v3(self, gpu: SimulatedGpu, info: Any) -> int:
        bus_id = gpu_pci_bus_id(self.profile, gpu.index)
        fill_pci(deref(info), bus_id, pci_device_id(gpu.model.name))
        return SUCCESS

    @device_call
    def nvmlDeviceGetArchitecture(self, gpu: SimulatedGpu, arch: Any) -> int:
        set_out(arch, _ARCHITECTURES[gpu.model.architecture])
        return SUCCESS

    @device_call
    def nvmlDeviceGetCudaComputeCapability(self, gpu: SimulatedGpu, major: Any, minor: Any) -> int:
        set_out(major, gpu.model.cuda_compute_capability[0])
        set_out(minor, gpu.model.cuda_compute_capability[1])
        return SUCCESS

    @device_call
    def nvmlDeviceGetPersistenceMode(self, gpu: SimulatedGpu, mode: Any) -> int:
        # DGX OS enables persistence mode; desktops run without the daemon
        set_out(mode, 0 if gpu.model.fan else 1)
        return SUCCESS

    @device_call
    def nvmlDeviceGetComputeMode(self, gpu: SimulatedGpu, mode: Any) -> int:
        set_out(mode, pynvml.NVML_COMPUTEMODE_DEFAULT)
        return SUCCESS

    @device_call
    def nvmlDeviceGetDisplayMode(self, gpu: SimulatedGpu, mode: Any) -> int:
        # a workstation's first GeForce drives the monitor
        set_out(mode, 1 if gpu.model.fan and gpu.index == 0 else 0)
        return SUCCESS

    @device_call
    def nvmlDeviceGetMigMode(self, gpu: SimulatedGpu, current: Any, pending: Any) -> int:
        if not gpu.model.mig:
            return ERROR_NOT_SUPPORTED
        set_out(current, 0)
        set_out(pending, 0)
        return SUCCESS

    # --- PCIe link -------------------------------------------------------------------

    @device_call
    def nvmlDeviceGetPcieThroughput(self, gpu: SimulatedGpu, counter: Any, value: Any) -> int:
        which = as_int(counter)
        if which == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            rate = gpu.pcie_tx_rate
        elif which == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            rate = gpu.pcie_rx_rate
        else:
            return ERROR_INVALID_ARGUMENT
        set_out(value, int(rate / PCIE_THROUGHPUT_UNIT_BYTES))
        return SUCCESS

    @device_call
    def nvmlDeviceGetPcieReplayCounter(self, gpu: SimulatedGpu, value: Any) -> int:
        set_out(value, int(gpu.pcie_replays))
        return SUCCESS

    @device_call
    def nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: SimulatedGpu, value: Any) -> int:
        set_out(value, gpu.pcie_generation_current)
        return SUCCESS

    @device_call
    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: SimulatedGpu, value: Any) -> int:
        set_out(value, gpu.model.pcie_generation)
        return SUCCESS

    @device_call
    def nvmlDeviceGetCurrPcieLinkWidth(self, gpu: SimulatedGpu, value: Any) -> int:
        set_out(value, gpu.pcie_width_current)
        return SUCCESS

    @device_call
    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: SimulatedGpu, value: Any) -> int:
        set_out(value, gpu.model.pcie_width)
        return SUCCESS
