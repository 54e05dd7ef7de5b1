"""XID critical-error events: a listener thread that counts them per GPU and code.

NVML delivers XIDs only as events (nvmlEventSetWait), never as a counter to poll, so
the agent counts them itself: `nvwatch_gpu_xid_errors_total` is "seen since the agent
started", and Prometheus' rate()/increase() handle the agent's restarts like resets.
The kernel log (`dmesg | grep Xid`) shows the same codes.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from typing import Any

import pynvml

from agent.sources.nvml.device import error_name
from agent.threads import start_thread

log = logging.getLogger(__name__)

#: How long one nvmlEventSetWait blocks; also the worst-case delay of close().
WAIT_MS = 500
_BACKOFF_START_S = 0.5
_BACKOFF_MAX_S = 30.0


def _address(handle: Any) -> int | None:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


class XidListener:
    """Counts XID events for a fixed set of GPU handles on a background thread.

    Started after nvmlInit; the thread runs inside a copy of the starting thread's
    contextvars context, because the simulated fleet binds one simulated NVML per
    context and the events must come from the same (simulated) node as the polls.
    """

    def __init__(self, handles: Sequence[tuple[int, Any]], *, wait_ms: int = WAIT_MS) -> None:
        self._handles = list(handles)  # (gpu index, handle)
        self._wait_ms = wait_ms
        self._by_address: dict[int, int] = {}
        self._counts: dict[int, dict[int, int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = start_thread("nvwatch-xid", self._run, daemon=True)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def counts(self, gpu: int) -> dict[int, int]:
        """XID code -> events seen on GPU `gpu` so far."""
        with self._lock:
            return dict(self._counts.get(gpu, {}))

    def record(self, gpu: int, xid: int) -> None:
        with self._lock:
            per_gpu = self._counts.setdefault(gpu, {})
            per_gpu[xid] = per_gpu.get(xid, 0) + 1

    # --- the thread --------------------------------------------------------------------

    def _run(self) -> None:
        backoff = _BACKOFF_START_S
        while not self._stop.is_set():
            try:
                if self._event_set is None:
                    self._event_set = self._create_set()
                    if self._event_set is None:
                        return
                self._wait_once()
                backoff = _BACKOFF_START_S
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound) as err:
                log.info("XID events not available (%s)", error_name(err))
                break
            except Exception as err:
                # XID 79 (fallen off the bus) and driver trouble surface here as GpuIsLost
                # or Unknown; the set may be unusable, so rebuild it after a pause.
                reason = error_name(err) if isinstance(err, pynvml.NVMLError) else repr(err)
                log.warning("XID listener: %s; retrying in %.1fs", reason, backoff)
                self._free_set()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
        self._free_set()

    def _create_set(self) -> Any:
        event_set = pynvml.nvmlEventSetCreate()
        registered = 0
        for index, handle in self._handles:
            try:
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, event_set
                )
            except pynvml.NVMLError as err:
                log.info("GPU %d: no XID events (%s)", index, error_name(err))
                continue
            address = _address(handle)
            if address is not None:
                self._by_address[address] = index
            registered += 1
        if registered == 0:
            _free(event_set)
            log.info("XID events not available on any GPU; nvwatch_gpu_xid_errors_total absent")
            return None
        return event_set

    def _wait_once(self) -> None:
        try:
            data = pynvml.nvmlEventSetWait_v2(self._event_set, self._wait_ms)
        except pynvml.NVMLError_Timeout:
            return
        if not int(data.eventType) & pynvml.nvmlEventTypeXidCriticalError:
            return
        gpu = self._gpu_of(data.device)
        if gpu is None:
            log.debug("XID %d from an unknown device handle", int(data.eventData))
            return
        self.record(gpu, int(data.eventData))

    def _gpu_of(self, handle: Any) -> int | None:
        address = _address(handle)
        if address is not None and address in self._by_address:
            return self._by_address[address]
        try:
            index = int(pynvml.nvmlDeviceGetIndex(handle))
        except pynvml.NVMLError:
            return None
        return index if any(i == index for i, _ in self._handles) else None

    def _free_set(self) -> None:
        if self._event_set is not None:
            _free(self._event_set)
            self._event_set = None
            self._by_address.clear()


def _free(event_set: Any) -> None:
    try:
        pynvml.nvmlEventSetFree(event_set)
    except pynvml.NVMLError as err:
        log.debug("nvmlEventSetFree: %s", error_name(err))
