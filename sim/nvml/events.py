"""Event sets: register for XID/ECC/clock events, then wait on them.

The GPUs queue events as they integrate (`SimulatedGpu.emit_event`); `NvmlCore`'s
advance hands each to the event sets registered for its GPU and type and wakes waiters.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.gpu.state import EVENT_DOUBLE_BIT_ECC, EVENT_XID, GpuEvent
from nvwatch.sim.nvml.abi import (
    ERROR_DRIVER_NOT_LOADED,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    ERROR_TIMEOUT,
    ERROR_UNINITIALIZED,
    NO_INSTANCE,
    SUCCESS,
    address_of,
    as_int,
    deref,
    set_out,
    write_pointer,
)
from nvwatch.sim.nvml.core import EventSet, NvmlCore, device_call, lib_call


def _supported_events(gpu: SimulatedGpu) -> int:
    ecc = (pynvml.nvmlEventTypeSingleBitEccError | EVENT_DOUBLE_BIT_ECC) if gpu.model.ecc else 0
    return int(pynvml.nvmlEventTypePState | EVENT_XID | pynvml.nvmlEventTypeClock | ecc)


class EventQueries(NvmlCore):
    @lib_call
    def nvmlEventSetCreate(self, event_set: Any) -> int:
        address = next(self._next_object)
        self._event_sets[address] = EventSet()
        write_pointer(event_set, address)
        return SUCCESS

    @device_call
    def nvmlDeviceGetSupportedEventTypes(self, gpu: SimulatedGpu, types: Any) -> int:
        set_out(types, _supported_events(gpu))
        return SUCCESS

    @device_call
    def nvmlDeviceRegisterEvents(self, gpu: SimulatedGpu, types: Any, event_set: Any) -> int:
        target = self._event_sets.get(address_of(event_set) or 0)
        if target is None:
            return ERROR_INVALID_ARGUMENT
        mask = as_int(types)
        if mask & ~_supported_events(gpu):
            return ERROR_NOT_SUPPORTED
        target.registered[gpu.index] = target.registered.get(gpu.index, 0) | mask
        return SUCCESS

    def nvmlEventSetWait_v2(self, event_set: Any, data: Any, timeout_ms: Any) -> int:
        """Block up to timeout_ms of real time for an event (polling the injected clock)."""
        deadline = time.monotonic() + as_int(timeout_ms) / 1000.0
        with self._events_changed:
            while True:
                if self.driver_broken():
                    return ERROR_DRIVER_NOT_LOADED
                if not self._init_count:
                    return ERROR_UNINITIALIZED
                target = self._event_sets.get(address_of(event_set) or 0)
                if target is None:
                    return ERROR_INVALID_ARGUMENT
                self._advance_locked()
                if target.queue:
                    self._write_event(target.queue.popleft(), deref(data))
                    return SUCCESS
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return ERROR_TIMEOUT
                # wake early to notice an injected clock that moved without a C call,
                # unless the clock's driver notifies waiters itself (clock_poll_s None)
                poll = self.clock_poll_s
                self._events_changed.wait(remaining if poll is None else min(remaining, poll))

    def _write_event(self, event: GpuEvent, out: Any) -> None:
        """Fill an nvmlEventData_t; the device is the handle nvmlDeviceGetHandle* gives."""
        out.device = ctypes.cast(
            ctypes.c_void_p(self.handle_address(event.gpu)), pynvml.c_nvmlDevice_t
        )
        out.eventType = event.event_type
        out.eventData = event.data
        out.gpuInstanceId = NO_INSTANCE
        out.computeInstanceId = NO_INSTANCE

    @lib_call
    def nvmlEventSetFree(self, event_set: Any) -> int:
        if self._event_sets.pop(address_of(event_set) or 0, None) is None:
            return ERROR_INVALID_ARGUMENT
        return SUCCESS
