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

Works unchanged on a real libnvidia-ml and on the simulated one (which sits below
pynvml as `pynvml.nvmlLib`), since both go through pynvml's own wrappers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

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
_SENTINELS = frozenset({0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})


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
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return None if value in _SENTINELS or value < 0 else float(value)
    return value if math.isfinite(value) and value >= 0 else None


def plain_int(value: object) -> int | None:
    number = plain_number(value)
    return int(number) if number is not None else None


def normalise_bus_id(bus_id: str) -> str:
    """Canonical sysfs form "0000:3b:00.0" of an NVML ("00000000:3B:00.0") or sysfs id."""
    bus_id = bus_id.strip().lower()
    parts = bus_id.split(":")
    if len(parts) == 3:
        domain = parts[0][-4:].rjust(4, "0")
        return f"{domain}:{parts[1]}:{parts[2]}"
    if len(parts) == 2:  # no domain: "3b:00.0"
        return f"0000:{bus_id}"
    return bus_id


@dataclass(frozen=True)
class FieldReading:
    """One entry of an nvmlDeviceGetFieldValues answer."""

    field_id: int
    scope_id: int
    status: int  # the entry's own nvmlReturn
    value: float | None  # decoded according to valueType; None unless status is SUCCESS


_VALUE_MEMBERS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


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

    def field_values(self, ids: Sequence[tuple[int, int]]) -> list[FieldReading] | None:
        """nvmlDeviceGetFieldValues: many readings in one driver round trip.

        None when the call itself failed (see `is_unsupported("field_values")` for
        whether that was NotSupported/FunctionNotFound rather than a transient error).
        """
        if not ids:
            return []
        raw = self.call("field_values", pynvml.nvmlDeviceGetFieldValues, list(ids))
        if raw is None:
            return None
        readings = []
        for entry, (field_id, scope_id) in zip(raw, ids, strict=False):
            status = int(entry.nvmlReturn)
            value: float | None = None
            if status == pynvml.NVML_SUCCESS:
                member = _VALUE_MEMBERS.get(int(entry.valueType))
                if member is not None:
                    value = plain_number(getattr(entry.value, member))
            elif status in DOWN_CODES:
                self.raise_if_down(pynvml.NVMLError(status))
            readings.append(FieldReading(field_id, scope_id, status, value))
        return readings


def system_call(fn: Callable[..., T], *args: Any) -> T | None:
    """A system-wide NVML call (no device handle) whose failure just leaves a value out."""
    try:
        return fn(*args)
    except pynvml.NVMLError as err:
        log.debug("%s failed: %s", getattr(fn, "__name__", fn), error_name(err))
        return None
