"""Memory errors: ECC mode and counters, retired pages (pre-Ampere), remapped rows."""

from __future__ import annotations

from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_INSUFFICIENT_SIZE,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    SUCCESS,
    as_int,
    deref,
    set_out,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call
from nvwatch.sim.nvml.unsupported import answers_not_supported, because

# DRAM banks tracked by the row remapper per GiB of HBM (~: `nvidia-smi -q` shows 640
# banks at "Max" on a 40 GB A100)
BANKS_PER_GIB = 16


def _ecc_total(gpu: SimulatedGpu, error_type: int, counter_type: int) -> int | None:
    ecc = gpu.ecc
    corrected = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    uncorrected = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    table = {
        (corrected, pynvml.NVML_VOLATILE_ECC): ecc.corrected_volatile,
        (uncorrected, pynvml.NVML_VOLATILE_ECC): ecc.uncorrected_volatile,
        (corrected, pynvml.NVML_AGGREGATE_ECC): ecc.corrected_aggregate,
        (uncorrected, pynvml.NVML_AGGREGATE_ECC): ecc.uncorrected_aggregate,
    }
    return table.get((error_type, counter_type))


def _retired(gpu: SimulatedGpu, cause: int) -> list[tuple[int, float]] | None:
    if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS:
        return gpu.ecc.retired_sbe
    if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
        return gpu.ecc.retired_dbe
    return None


def page_retirement_supported(gpu: SimulatedGpu) -> bool:
    # Ampere+ replaced page retirement by row remapping: NVML says NotSupported
    return gpu.model.ecc and not gpu.model.row_remapping


ECC_NOT_SUPPORTED = {
    **because(
        "deprecated: per-location counts come from nvmlDeviceGetMemoryErrorCounter, and "
        "the driver answers NotSupported here on these generations",
        "nvmlDeviceGetDetailedEccErrors",
    ),
    **because(
        "SRAM error status, bank remapper, unrepairable-memory flag and TPC/channel repair "
        "status are Blackwell-generation reports",
        "nvmlDeviceGetSramEccErrorStatus",
        "nvmlDeviceGetSramUniqueUncorrectedEccErrorCounts",
        "nvmlDeviceGetBankRemapperStatus_v1",
        "nvmlDeviceGetUnrepairableMemoryFlag_v1",
        "nvmlDeviceGetRepairStatus",
    ),
}


@answers_not_supported(ECC_NOT_SUPPORTED)
class EccQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetEccMode(self, gpu: SimulatedGpu, current: Any, pending: Any) -> int:
        if not gpu.model.ecc:
            return ERROR_NOT_SUPPORTED
        set_out(current, pynvml.NVML_FEATURE_ENABLED)
        set_out(pending, pynvml.NVML_FEATURE_ENABLED)
        return SUCCESS

    @device_call
    def nvmlDeviceGetTotalEccErrors(
        self, gpu: SimulatedGpu, error_type: Any, counter_type: Any, count: Any
    ) -> int:
        if not gpu.model.ecc:
            return ERROR_NOT_SUPPORTED
        value = _ecc_total(gpu, as_int(error_type), as_int(counter_type))
        if value is None:
            return ERROR_INVALID_ARGUMENT
        set_out(count, value)
        return SUCCESS

    @device_call
    def nvmlDeviceGetMemoryErrorCounter(
        self, gpu: SimulatedGpu, error_type: Any, counter_type: Any, location: Any, count: Any
    ) -> int:
        if not gpu.model.ecc:
            return ERROR_NOT_SUPPORTED
        value = _ecc_total(gpu, as_int(error_type), as_int(counter_type))
        where = as_int(location)
        if value is None or where >= pynvml.NVML_MEMORY_LOCATION_COUNT:
            return ERROR_INVALID_ARGUMENT
        # the simulated faults are all in device DRAM; caches and SRAM stay clean
        set_out(count, value if where == pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY else 0)
        return SUCCESS

    # --- retired pages (Pascal to Turing) ----------------------------------------------

    def _write_pages(
        self, gpu: SimulatedGpu, cause: Any, count: Any, addresses: Any, times: Any | None
    ) -> int:
        if not page_retirement_supported(gpu):
            return ERROR_NOT_SUPPORTED
        pages = _retired(gpu, as_int(cause))
        if pages is None:
            return ERROR_INVALID_ARGUMENT
        available = as_int(deref(count))
        set_out(count, len(pages))
        if addresses is None or available < len(pages):
            return ERROR_INSUFFICIENT_SIZE if pages else SUCCESS
        out = deref(addresses)
        for i, (address, when) in enumerate(pages):
            out[i] = address
            if times is not None:
                deref(times)[i] = self._epoch_us(when)
        return SUCCESS

    @device_call
    def nvmlDeviceGetRetiredPages(
        self, gpu: SimulatedGpu, cause: Any, count: Any, addresses: Any
    ) -> int:
        return self._write_pages(gpu, cause, count, addresses, None)

    @device_call
    def nvmlDeviceGetRetiredPages_v2(
        self, gpu: SimulatedGpu, cause: Any, count: Any, addresses: Any, times: Any = None
    ) -> int:
        # pynvml's size query passes only four arguments
        return self._write_pages(gpu, cause, count, addresses, times)

    @device_call
    def nvmlDeviceGetRetiredPagesPendingStatus(self, gpu: SimulatedGpu, pending: Any) -> int:
        if not page_retirement_supported(gpu):
            return ERROR_NOT_SUPPORTED
        set_out(pending, 1 if gpu.ecc.retired_pending else 0)
        return SUCCESS

    # --- remapped rows (Ampere+) -------------------------------------------------------

    @device_call
    def nvmlDeviceGetRemappedRows(
        self, gpu: SimulatedGpu, correctable: Any, uncorrectable: Any, pending: Any, failure: Any
    ) -> int:
        if not gpu.model.row_remapping:
            return ERROR_NOT_SUPPORTED
        set_out(correctable, gpu.ecc.remapped_correctable)
        set_out(uncorrectable, gpu.ecc.remapped_uncorrectable)
        set_out(pending, 1 if gpu.ecc.remap_pending else 0)
        set_out(failure, 1 if gpu.ecc.remap_failure else 0)
        return SUCCESS

    @device_call
    def nvmlDeviceGetRemappedRows_v2(self, gpu: SimulatedGpu, info: Any) -> int:
        if not gpu.model.row_remapping:
            return ERROR_NOT_SUPPORTED
        rows = deref(info)
        rows.corrActiveRemaps = gpu.ecc.remapped_correctable
        rows.uncActiveRemaps = gpu.ecc.remapped_uncorrectable
        rows.corrInactiveRemaps = rows.uncInactiveRemaps = 0  # none undone by a reset
        rows.bPending = 1 if gpu.ecc.remap_pending else 0
        rows.bfailureOccurred = 1 if gpu.ecc.remap_failure else 0
        return SUCCESS

    @device_call
    def nvmlDeviceGetRowRemapperHistogram(self, gpu: SimulatedGpu, histogram: Any) -> int:
        if not gpu.model.row_remapping:
            return ERROR_NOT_SUPPORTED
        # banks by spare rows left; each remap takes a spare row of some bank, moving it
        # from "max" (all spares left) to "high"
        banks = BANKS_PER_GIB * (gpu.model.memory_bytes >> 30)
        used = min(banks, gpu.ecc.remapped_correctable + gpu.ecc.remapped_uncorrectable)
        values = deref(histogram)
        values.max, values.high = banks - used, used
        values.partial = values.low = values.none = 0
        return SUCCESS

    @device_call
    def nvmlDeviceGetDefaultEccMode(self, gpu: SimulatedGpu, default: Any) -> int:
        if not gpu.model.ecc:
            return ERROR_NOT_SUPPORTED
        set_out(default, pynvml.NVML_FEATURE_ENABLED)
        return SUCCESS
