"""XID critical errors, counted per GPU and code from the kernel log and NVML's events.

NVML delivers XIDs only as events (nvmlEventSetWait), never as a counter to poll, and
only to a process that is listening when they happen. The driver also prints every XID
to the kernel log, which keeps them since boot (kmsg.py reads it). So:

- Kernel log readable: it is the authority. On start the listener reads the whole ring
  buffer, so XIDs from before the agent (re)started count; then it re-reads the log at
  every wake-up, which an NVML XID event brings forward. Events are still tallied, and a
  GPU's count per code is max(kernel log, events): an event only covers the moment
  before its log line is read, and one XID is never counted twice.
- Kernel log unreadable (no permission, not mounted in a container): the events alone,
  counted since the agent started; Prometheus' rate()/increase() take restarts as resets.
- Kernel log lost while running: the count at that moment, plus the events after it.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pynvml

from nvwatch.agent.sources.nvml.device import error_name
from nvwatch.agent.sources.nvml.kmsg import KernelXidLog, pci_key
from nvwatch.agent.threads import start_thread

log = logging.getLogger(__name__)

#: How long one nvmlEventSetWait blocks; also the worst-case delay of close(), and how
#: often the kernel log is re-read when no event comes.
WAIT_MS = 500
_BACKOFF_START_S = 0.5
_BACKOFF_MAX_S = 30.0
NO_KERNEL_LOG = "no kernel log configured"


def _address(handle: Any) -> int | None:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def combine(
    kernel: Mapping[int, int], events: Mapping[int, int], events_at_loss: Mapping[int, int]
) -> dict[int, int]:
    """XID -> count: max(kernel log, events when the log was lost) + events since then.

    While the log is readable, `events_at_loss` is `events` itself (nothing came after):
    the count is max(kernel log, events). Without a log it is empty: the events alone.
    Each term only grows, so the sum never goes down.
    """
    result = {}
    for xid in sorted(kernel.keys() | events.keys()):
        before = events_at_loss.get(xid, 0)
        result[xid] = max(kernel.get(xid, 0), before) + events.get(xid, 0) - before
    return result


class XidListener:
    """Counts XIDs for a fixed set of GPU handles: kernel log plus NVML events.

    Started after nvmlInit; the thread runs inside a copy of the starting thread's
    contextvars context, because the simulated fleet binds one simulated NVML per
    context and the events must come from the same (simulated) node as the polls.
    `bus_ids` gives the GPUs' NVML bus ids in index order ("" where unknown), read at
    each count so a GPU that answers later still gets its kernel-log lines.
    """

    def __init__(
        self,
        handles: Sequence[tuple[int, Any]],
        *,
        wait_ms: int = WAIT_MS,
        kmsg_path: Path | None = None,
        bus_ids: Callable[[], Sequence[str]] = tuple,
    ) -> None:
        self._handles = list(handles)  # (gpu index, handle)
        self._wait_ms = wait_ms
        self._by_address: dict[int, int] = {}
        self._counts: dict[int, dict[int, int]] = {}  # NVML events: gpu -> xid -> n
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._kmsg = KernelXidLog(kmsg_path) if kmsg_path is not None else None
        self._kmsg_lock = threading.Lock()
        # None while the kernel log is the authority; else the event counts when it was lost
        self._events_at_loss: dict[int, dict[int, int]] | None = None if self._kmsg else {}
        self._bus_ids = bus_ids
        self._unknown_pci: set[str] = set()

    @property
    def kmsg_unreadable(self) -> str | None:
        """Why the kernel log is not counted (XIDs since agent start only), or None."""
        if self._kmsg is None:
            return NO_KERNEL_LOG
        return self._kmsg.unreadable

    def start(self) -> None:
        if self._thread is not None:
            return
        self._read_kernel_log()  # the whole ring buffer: XIDs since boot
        if self._kmsg is not None and self._kmsg.unreadable is None:
            log.info(
                "XID history from %s: %d Xid lines since boot", self._kmsg.path, self._kmsg.records
            )
        if self._handles or self.kmsg_unreadable is None:
            self._thread = start_thread("nvwatch-xid", self._run, daemon=True)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._kmsg is not None:
            with self._kmsg_lock:
                self._kmsg.close()

    def counts(self, gpu: int) -> dict[int, int]:
        """XID code -> XIDs on GPU `gpu`: since boot with a kernel log, else since start."""
        return self.counts_by_gpu().get(gpu, {})

    def counts_by_gpu(self) -> dict[int, dict[int, int]]:
        """GPU -> XID code -> XIDs, for each GPU with any: one read of the kernel log and
        one split of its lines by GPU for the whole node (the source asks once a poll)."""
        self._read_kernel_log()
        kernel = self._kernel_counts()
        with self._lock:
            events = {gpu: dict(counts) for gpu, counts in self._counts.items()}
            at_loss = self._events_at_loss
        result = {}
        for gpu in sorted(kernel.keys() | events.keys()):
            since = events.get(gpu, {})
            before = since if at_loss is None else at_loss.get(gpu, {})
            counts = combine(kernel.get(gpu, {}), since, before)
            if counts:
                result[gpu] = counts
        return result

    def record(self, gpu: int, xid: int) -> None:
        """Tally one NVML XID event."""
        with self._lock:
            per_gpu = self._counts.setdefault(gpu, {})
            per_gpu[xid] = per_gpu.get(xid, 0) + 1

    # --- the kernel log ----------------------------------------------------------------

    def _read_kernel_log(self) -> None:
        if self._kmsg is None:
            return
        with self._kmsg_lock:
            readable = self._kmsg.read()
        if readable:
            return
        with self._lock:
            if self._events_at_loss is not None:
                return
            self._events_at_loss = {gpu: dict(c) for gpu, c in self._counts.items()}
        log.warning(
            "XID history: %s; XIDs are counted from NVML events, since the agent started",
            self._kmsg.unreadable,
        )

    def _kernel_counts(self) -> dict[int, dict[int, int]]:
        """GPU -> XID code -> lines in the kernel log."""
        if self._kmsg is None:
            return {}
        with self._kmsg_lock:
            by_pci = self._kmsg.counts()
        owners = self._gpu_by_pci()
        result: dict[int, dict[int, int]] = {}
        for (pci, xid), count in by_pci.items():
            owner = owners.get(pci)
            if owner is not None:
                result.setdefault(owner, {})[xid] = count
            elif pci not in self._unknown_pci:
                # another node's view (a container given some GPUs) or a GPU NVML lost
                self._unknown_pci.add(pci)
                log.warning(
                    "kernel log: Xid %d on PCI %s, no GPU NVML lists; not counted", xid, pci
                )
        return result

    def _gpu_by_pci(self) -> dict[str, int]:
        owners = {}
        for index, bus_id in enumerate(self._bus_ids()):
            try:
                owners[pci_key(bus_id)] = index
            except ValueError:
                continue  # "" or garbage: that GPU's identity is not known yet
        return owners

    # --- the thread --------------------------------------------------------------------

    def _run(self) -> None:
        backoff = _BACKOFF_START_S
        events = bool(self._handles)
        while not self._stop.is_set():
            # at every wake-up, so an NVML event is followed by a read of its log line
            self._read_kernel_log()
            if not events:
                if self.kmsg_unreadable is not None:
                    break
                self._stop.wait(self._wait_ms / 1000)
                continue
            try:
                events = self._wait_for_event()
                backoff = _BACKOFF_START_S
            except Exception as err:
                # XID 79 (fallen off the bus) and driver trouble surface here as GpuIsLost
                # or Unknown; the set may be unusable, so rebuild it after a pause.
                reason = error_name(err) if isinstance(err, pynvml.NVMLError) else repr(err)
                log.warning("XID listener: %s; retrying in %.1fs", reason, backoff)
                self._free_set()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
        self._free_set()

    def _wait_for_event(self) -> bool:
        """Wait once for an NVML event; False when this node has no XID events."""
        try:
            if self._event_set is None:
                self._event_set = self._create_set()
                if self._event_set is None:
                    return False
            self._wait_once()
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound) as err:
            log.info("XID events not available (%s)", error_name(err))
            self._free_set()
            return False
        return True

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
            log.info("XID events not available on any GPU")
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
