"""A thin device layer over pynvml: one entry point for every per-GPU NVML call.

Modelled on nvitop's `nvmlQuery`: the rest of the source never sees an NVMLError.

- NotSupported -> None (the reading is absent), remembered per (GPU, key) so the call is
  not repeated every poll; it is probed again after `reprobe_interval` seconds, because
  some "not supported" answers are really "not yet" (e.g. right after a driver load).
- FunctionNotFound -> None for good (the installed libnvidia-ml is older than pynvml),
  logged once per function.
- GpuIsLost, Unknown and the codes that mean the driver is gone -> `GpuDown`, which the
  source turns into `nvwatch_gpu_up 0` for that GPU only.
- Any other error (NoPermission, Timeout, InvalidArgument, ...) -> None for this poll.
- Bytes are decoded to str; NVML's "value not available" sentinels become None.
- nvmlDeviceGetFieldValues, the batch of many readings, is in fields.py.
- A failed nvmlInit becomes one operator-facing sentence (`init_reason`).

Works unchanged on a real libnvidia-ml and on the simulated one (which sits below
pynvml as `pynvml.nvmlLib`), since both go through pynvml's own wrappers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from nvwatch.agent.sources.pci_address import sysfs_bus_id

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Codes after which nothing else this GPU says this poll can be trusted.
DOWN_CODES = frozenset(
    {
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_UNKNOWN,
        pynvml.NVML_ERROR_RESET_REQUIRED,
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_IRQ_ISSUE,
    }
)

# NVML reports "no value" in unsigned fields as all ones.
NO_VALUE_SENTINELS = frozenset({0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})


class GpuDown(Exception):
    """The GPU stopped answering; its sample for this poll is `up=False`."""


def error_name(err: pynvml.NVMLError) -> str:
    """Short name of an NVML error for logs, without calling nvmlErrorString."""
    return type(err).__name__.removeprefix("NVMLError_") or f"NVML error {err.value}"


def text(value: object) -> str:
    """NVML strings arrive as bytes from struct fields and str from pynvml's wrappers."""
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode("utf-8", errors="replace").strip()
    if isinstance(value, str):
        return value.strip()
    return ""


def plain_number(value: object) -> float | None:
    """A finite, non-sentinel number, else None: garbage from one call stays in one value."""
    if isinstance(value, int) and type(value) is not bool:
        return None if value in NO_VALUE_SENTINELS or value < 0 else float(value)
    if isinstance(value, float):
        return value if 0.0 <= value < math.inf else None  # NaN fails both comparisons
    return None


def plain_int(value: object) -> int | None:
    number = plain_number(value)
    return int(number) if number is not None else None


def bus_key(value: str) -> str | None:
    """A bus id NVML reported, in the sysfs form used for lookups; None if malformed."""
    try:
        return sysfs_bus_id(value)
    except ValueError:
        return None


class NvmlSession:
    """State shared by the devices of one nvmlInit: the clock and the log-once sets."""

    def __init__(self, *, clock: Callable[[], float], reprobe_interval: float) -> None:
        self.clock = clock
        self.reprobe_interval = reprobe_interval
        self._logged: set[str] = set()

    def log_once(self, key: str, level: int, message: str, *args: object) -> None:
        if key in self._logged:
            return
        self._logged.add(key)
        log.log(level, message, *args)


class Device:
    """One GPU handle and what has been learnt about which of its calls work."""

    def __init__(self, session: NvmlSession, index: int, handle: Any) -> None:
        self.session = session
        self.index = index
        self.handle = handle
        # key -> clock time from which the call may be tried again (inf: never)
        self._unsupported: dict[str, float] = {}

    def is_unsupported(self, key: str) -> bool:
        until = self._unsupported.get(key)
        return until is not None and self.session.clock() < until

    def call(self, key: str, fn: Callable[..., T], *args: Any) -> T | None:
        """`fn(handle, *args)` or None; raises only `GpuDown`.

        `key` names the reading for the NotSupported memory: one key per (metric,
        argument) whose support can differ, e.g. "ecc:1:0" or "nvlink_state:3".
        """
        if self.is_unsupported(key):
            return None
        try:
            return fn(self.handle, *args)
        except pynvml.NVMLError_NotSupported:
            self._unsupported[key] = self.session.clock() + self.session.reprobe_interval
            return None
        except pynvml.NVMLError_FunctionNotFound:
            self._unsupported[key] = math.inf
            name = getattr(fn, "__name__", key)
            self.session.log_once(
                "missing:" + name,
                logging.INFO,
                "NVML function behind %s is missing from this libnvidia-ml (older driver); "
                "its metric is not exported",
                name,
            )
            return None
        except pynvml.NVMLError as err:
            self.raise_if_down(err)
            self.session.log_once(
                f"error:{key}:{err.value}",
                logging.DEBUG,
                "GPU %d: %s failed with %s; value skipped this poll",
                self.index,
                key,
                error_name(err),
            )
            return None

    def raise_if_down(self, err: pynvml.NVMLError) -> None:
        if err.value in DOWN_CODES:
            raise GpuDown(f"GPU {self.index}: {error_name(err)}") from err

    def raw(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(handle, *args)` for callers that must tell NotSupported from other errors.

        Raises GpuDown for the down codes and the NVMLError itself otherwise.
        """
        try:
            return fn(self.handle, *args)
        except pynvml.NVMLError as err:
            self.raise_if_down(err)
            raise


def system_call(fn: Callable[..., T], *args: Any) -> T | None:
    """A system-wide NVML call (no device handle) whose failure just leaves a value out."""
    try:
        return fn(*args)
    except pynvml.NVMLError as err:
        log.debug("%s failed: %s", getattr(fn, "__name__", fn), error_name(err))
        return None


def init_reason(err: pynvml.NVMLError) -> str:
    """An operator-facing sentence for a failed nvmlInit."""
    if isinstance(err, pynvml.NVMLError_LibraryNotFound):
        return (
            "NVML library not found: libnvidia-ml.so.1 could not be loaded "
            "(is the NVIDIA driver installed, and its libraries visible to this process?)"
        )
    if isinstance(err, pynvml.NVMLError_DriverNotLoaded):
        return "NVIDIA driver not loaded: NVML found no kernel module (check `lsmod | grep nvidia`)"
    if isinstance(err, pynvml.NVMLError_NoPermission):
        return (
            "NVML init denied: no permission to open /dev/nvidia* "
            "(run the agent as root or a user in the video group)"
        )
    if isinstance(err, pynvml.NVMLError_LibRmVersionMismatch):
        return (
            "NVML and the loaded NVIDIA kernel module are different versions "
            "(a driver upgrade without reboot or module reload)"
        )
    return f"NVML init failed: {error_name(err)}"
