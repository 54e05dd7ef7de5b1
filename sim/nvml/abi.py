"""The C side of the simulated library: return codes, error strings, ctypes arguments.

pynvml calls every function with ctypes objects: out-parameters behind byref() or
pointer(), c_uint values, string buffers with their length, structs. These helpers read
and write them the way the C library would, so the area modules only deal in values.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

# nvmlReturn_t (nvml.h); read from pynvml so the two never disagree
SUCCESS: int = pynvml.NVML_SUCCESS
ERROR_UNINITIALIZED: int = pynvml.NVML_ERROR_UNINITIALIZED
ERROR_INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
ERROR_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
ERROR_NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
ERROR_INSUFFICIENT_SIZE: int = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
ERROR_DRIVER_NOT_LOADED: int = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
ERROR_TIMEOUT: int = pynvml.NVML_ERROR_TIMEOUT
ERROR_GPU_IS_LOST: int = pynvml.NVML_ERROR_GPU_IS_LOST
ERROR_ARGUMENT_VERSION_MISMATCH: int = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
ERROR_UNKNOWN: int = pynvml.NVML_ERROR_UNKNOWN

# nvmlErrorString texts of the real library (NVML 12.x)
_ERROR_STRINGS = {
    0: "Success",
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    5: "Already Initialized",
    6: "Not Found",
    7: "Insufficient Size",
    8: "Insufficient External Power",
    9: "Driver Not Loaded",
    10: "Timeout",
    11: "Interrupt request issue",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    14: "Corrupted infoROM",
    15: "GPU is lost",
    16: "GPU requires restart",
    17: "The operating system has blocked the request.",
    18: "RM has detected an NVML/RM version mismatch.",
    19: "In use by another client",
    20: "Insufficient Memory",
    21: "No data",
    25: "Argument version mismatch",
    999: "Unknown Error",
}

NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId outside MIG

# NVML's byte-rate and byte-count units. The NVLink throughput fields are documented in
# KiB; nvmlDeviceGetPcieThroughput says "KB/s" and is read as KiB/s too (see
# `sim.nvml.identity`), so one constant serves both.
KIB = 1024
MIB = 1024 * 1024


def deref(ref: Any) -> Any:
    """The ctypes object behind a byref() or pointer() argument."""
    obj = getattr(ref, "_obj", None)  # CArgObject from byref()
    if obj is not None:
        return obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


def set_out(ref: Any, value: int | float) -> None:
    """Write a scalar out-parameter (`unsigned int *`, `unsigned long long *`, ...)."""
    deref(ref).value = value


def as_int(arg: Any) -> int:
    """A by-value integer argument, whether pynvml passed a c_uint or a Python int."""
    return int(arg.value) if hasattr(arg, "value") else int(arg)


def address_of(handle: Any) -> int | None:
    """The address an opaque handle (device, event set, GPM sample) carries, if any."""
    if handle is None:
        return None
    if isinstance(handle, int):
        return handle
    if isinstance(handle, ctypes.c_void_p):
        return handle.value
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None
    return int(value) if value is not None else None


def write_pointer(ref: Any, address: int) -> None:
    """Write an opaque handle into a `nvmlDevice_t *`-style out-parameter."""
    ctypes.c_void_p.from_buffer(deref(ref)).value = address


def write_string(buffer: Any, length: Any, text: str) -> int:
    """Copy `text` into a `char *` of `length` bytes, as NVML does (room for the NUL)."""
    encoded = text.encode()
    if len(encoded) + 1 > as_int(length):
        return ERROR_INSUFFICIENT_SIZE
    buffer.value = encoded
    return SUCCESS


def error_string(code: Any) -> bytes:
    """nvmlErrorString: pynvml sets .restype on it, so it must be a plain function."""
    return _ERROR_STRINGS.get(as_int(code), "Unknown Error").encode()
