"""The NVML source: every GPU on the node, its NVLink links, XID events and GPM.

Per poll and per GPU the source reads through `Device.call` (see device.py), so one
GPU that is lost, or one value that is garbage, never spoils the rest of the sample.

Where each reading comes from:
  reads.py   one GPU's readings, a small function per area (identity, memory, power,
             thermal, clocks, PCIe, ECC and retirement)
  fields.py  the nvmlDeviceGetFieldValues batch per GPU: request, call, answer
  plan.py    each GPU's plan: the field/call decisions, the request and link sources
  nvlink.py  link discovery, far-end info and per-link readings
  gpm.py     GPU Performance Monitoring ratios (Hopper+)
  mig.py     MIG mode and each MIG instance's memory and GPM (Ampere+)
  processes.py  compute processes: memory, utilization since the previous poll, owner
  xid.py     the XID listener thread: NVML events and the kernel log (kmsg.py)
  units.py   NVML's units and the conversions to base units
  static.py  static readings (limits, thresholds, maxima), kept between slow re-reads
This module keeps the GPUs between polls: init with back-off, re-attach, close.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import NoReturn

import pynvml

from nvwatch.agent.sources import SourceAbsent, SourceUnavailable
from nvwatch.agent.sources.nvml import reads
from nvwatch.agent.sources.nvml.device import (
    Device,
    GpuDown,
    NvmlSession,
    bus_key,
    error_name,
    init_reason,
    system_call,
    text,
)
from nvwatch.agent.sources.nvml.gpm import GpmReading, GpmSampler
from nvwatch.agent.sources.nvml.mig import MigReader, MigReading, with_pids
from nvwatch.agent.sources.nvml.nvlink import GpuLinks
from nvwatch.agent.sources.nvml.plan import GpuPlan, new_plan
from nvwatch.agent.sources.nvml.processes import (
    MAX_PROCESSES,
    ProcessOwners,
    ProcessReader,
    processes,
)
from nvwatch.agent.sources.nvml.samples import (
    NVLINK_DETAIL_CHOICES,
    GpuInfo,
    GpuSample,
    NvmlSample,
    ProcessAttribution,
)
from nvwatch.agent.sources.nvml.static import STATIC_REFRESH_S, Kept
from nvwatch.agent.sources.nvml.xid import XidListener
from nvwatch.agent.sources.presence import PCI_VENDOR_NVIDIA, plural, scan_pci

log = logging.getLogger(__name__)

_INIT_BACKOFF_START_S = 1.0


@dataclass
class _GpuState:
    """What the source keeps about one GPU between polls."""

    index: int
    device: Device | None
    info: GpuInfo
    down: bool = False
    links: GpuLinks = field(default_factory=GpuLinks)
    plan: GpuPlan = field(default_factory=new_plan)
    kept: Kept = field(default_factory=Kept)
    gpm: GpmSampler | None = None
    mig: MigReader | None = None
    processes: ProcessReader = field(default_factory=ProcessReader)
    info_read_at: float | None = None  # when identity was last read in full


class NvmlSource:
    """GPUs through NVML (pynvml), following the `nvwatch.agent.sources.Source` protocol.

    `nvlink_detail`: "link" exports NVLink series per link; "gpu" aggregates per GPU
    with link="all": bytes and errors summed over the links, nvwatch_nvlink_up the
    number of links up, the speed summed over links that are up, and no remote_info
    (the per-link wiring is what "gpu" leaves out). A sum is left out for a poll in
    which any link failed to answer, so an aggregate counter never dips.

    `sysfs_root`: where to count the node's NVIDIA PCI functions, to tell a node without
    GPUs (absent) from GPUs NVML cannot read (down). None: not counted, and every NVML
    failure is down.

    `attribution`: the job or pod of each process, from attribution's cache (a dict
    lookup per process); it is shown each poll's GPUs so that it can resolve new pids
    on its own thread. None: process series have empty job and pod labels.
    """

    name = "nvml"

    def __init__(
        self,
        *,
        nvlink_detail: str = "link",
        sysfs_root: Path | None = None,
        reprobe_interval: float = 300.0,
        init_retry_max: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        kmsg_path: Path | None = None,
        attribution: ProcessAttribution | None = None,
    ) -> None:
        if nvlink_detail not in NVLINK_DETAIL_CHOICES:
            raise ValueError(
                f"nvlink_detail must be one of {', '.join(NVLINK_DETAIL_CHOICES)}, "
                f"not {nvlink_detail!r}"
            )
        self.nvlink_detail = nvlink_detail
        self._sysfs_root = sysfs_root
        self._reprobe_interval = reprobe_interval
        self._init_retry_max = init_retry_max
        self._clock = clock
        self._session: NvmlSession | None = None
        self._gpus: list[_GpuState] = []
        self._bus_to_index: dict[str, int] = {}
        self._driver_version = ""
        self._cuda_version = ""
        self._xid: XidListener | None = None
        self._kmsg_path = kmsg_path  # the kernel log XIDs are counted from (xid.py)
        self._attribution = attribution
        self._owners = ProcessOwners()  # process name and user, read once per process
        # this poll's XID counts by GPU (_xid_counts); None: to be read and split again,
        # at each poll and whenever the bus map changes
        self._poll_xids: dict[int, dict[int, int]] | None = None
        self._next_init_at = 0.0
        self._init_backoff = _INIT_BACKOFF_START_S
        # raised again while backing off: (SourceAbsent or SourceUnavailable, message)
        self._init_failure: tuple[type[Exception], str] = (SourceUnavailable, "")

    # --- Source protocol ---------------------------------------------------------------

    def collect(self) -> NvmlSample:
        self._ensure_initialised()
        self._poll_xids = None
        gpus = tuple(self._collect_gpu(state) for state in self._gpus)
        self._owners.end_poll()
        if self._attribution is not None:
            self._attribution.observe(gpus)
        return NvmlSample(
            gpus=gpus,
            driver_version=self._driver_version,
            cuda_version=self._cuda_version,
            nvlink_detail=self.nvlink_detail,
        )

    def close(self) -> None:
        if self._xid is not None:
            self._xid.stop()
            self._xid = None
        for state in self._gpus:
            if state.gpm is not None:
                state.gpm.close()
            if state.mig is not None:
                state.mig.close()
        self._gpus = []
        if self._session is not None:
            self._session = None
            system_call(pynvml.nvmlShutdown)

    # --- initialisation ----------------------------------------------------------------

    def _ensure_initialised(self) -> None:
        if self._session is not None:
            return
        now = self._clock()
        if now < self._next_init_at:
            kind, message = self._init_failure
            raise kind(message)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            self._init_failed(self._classify(None, init_reason(err)))
        try:
            self._enumerate()
        except pynvml.NVMLError as err:
            system_call(pynvml.nvmlShutdown)
            reason = f"NVML could not list the GPUs: {error_name(err)}"
            self._init_failed(self._classify(None, reason))
        failure = self._classify(len(self._gpus), "")
        if failure is not None:
            # fewer GPUs than the PCI bus has: drop the session, so that a retry after
            # the back-off enumerates afresh (a GPU that failed to initialise may return
            # after a driver reload)
            self.close()
            self._init_failed(failure)
        self._init_backoff = _INIT_BACKOFF_START_S
        self._start_xid_listener()

    def _classify(self, nvml_count: int | None, reason: str) -> Exception | None:
        """Absent, down or fine, from NVML's answer and the NVIDIA functions on PCI.

        `nvml_count` None: NVML failed, for `reason`. Without a sysfs root or a readable
        PCI tree presence is unknown and NVML's answer stands (failure is down).
        """
        scan = scan_pci(self._sysfs_root) if self._sysfs_root is not None else None
        if scan is None or not scan.listed:
            return SourceUnavailable(reason) if nvml_count is None else None
        on_pci = len(scan.nvidia_gpus())
        if on_pci == 0 and not nvml_count:
            return SourceAbsent(
                f"no NVIDIA GPU on this node (no PCI function with vendor "
                f"0x{PCI_VENDOR_NVIDIA:04x} in {scan.directory})"
            )
        gpus = plural(on_pci, "NVIDIA GPU")
        if nvml_count is None:
            return SourceUnavailable(f"{gpus} on PCI but NVML failed: {reason}")
        if nvml_count < on_pci:
            return SourceUnavailable(
                f"{gpus} on PCI but NVML sees only {nvml_count}: a GPU failed to "
                "initialise or fell off the bus (see `nvidia-smi`, the kernel log for NVRM)"
            )
        return None

    def _init_failed(self, failure: Exception | None) -> NoReturn:
        assert failure is not None  # NVML failed: _classify always has a verdict then
        self._init_failure = (type(failure), str(failure))
        self._next_init_at = self._clock() + self._init_backoff
        self._init_backoff = min(self._init_backoff * 2, self._init_retry_max)
        raise failure

    def _enumerate(self) -> None:
        session = NvmlSession(clock=self._clock, reprobe_interval=self._reprobe_interval)
        count = pynvml.nvmlDeviceGetCount()  # nvidia-smi --query-gpu=count
        self._driver_version = text(system_call(pynvml.nvmlSystemGetDriverVersion))
        cuda = system_call(pynvml.nvmlSystemGetCudaDriverVersion)
        self._cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else ""
        gpus = []
        for index in range(count):
            state = _GpuState(index=index, device=None, info=GpuInfo())
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError as err:
                log.warning("GPU %d: no handle (%s); reported down", index, error_name(err))
                state.down = True
            else:
                state.device = Device(session, index, handle)
                state.gpm = GpmSampler(state.device)
                state.mig = MigReader(state.device)
                try:
                    self._refresh_info(state)
                except GpuDown as err:
                    log.warning("%s at start; reported down", err)
                    state.down = True
            gpus.append(state)
        self._session = session
        self._gpus = gpus
        self._rebuild_bus_map()

    def gpu_bus_ids(self) -> tuple[str, ...]:
        """PCI bus ids in NVML index order ("" where unknown), for InfiniBand affinity.

        Called from the InfiniBand source's thread: the map is replaced whole, never
        mutated, so reading it here needs no lock. Empty until NVML first enumerates.
        """
        by_index = {index: bus for bus, index in self._bus_to_index.items()}
        if not by_index:
            return ()
        return tuple(by_index.get(i, "") for i in range(max(by_index) + 1))

    def _rebuild_bus_map(self) -> None:
        keys = {s.index: bus_key(s.info.pci_bus_id) for s in self._gpus if s.info.pci_bus_id}
        self._bus_to_index = {key: index for index, key in keys.items() if key is not None}
        self._poll_xids = None  # split by the old map: a GPU just known would get none

    def _start_xid_listener(self) -> None:
        handles = [(s.index, s.device.handle) for s in self._gpus if s.device is not None]
        if handles:
            # bus ids map the kernel log's PCI addresses to GPUs
            self._xid = XidListener(handles, kmsg_path=self._kmsg_path, bus_ids=self.gpu_bus_ids)
            self._xid.start()

    def _refresh_info(self, state: _GpuState) -> None:
        """Descriptive fields; re-read while some are missing (e.g. after recovery)."""
        if state.device is None:
            return
        before = state.info
        now = self._clock()
        read_at = state.info_read_at
        due = read_at is None or now - read_at >= STATIC_REFRESH_S
        if due:
            state.info_read_at = now
        state.info = reads.identity(
            state.device, before, self._driver_version, self._cuda_version, refresh=due
        )
        if state.info.pci_bus_id != before.pci_bus_id:
            self._rebuild_bus_map()

    # --- one GPU -----------------------------------------------------------------------

    def _collect_gpu(self, state: _GpuState) -> GpuSample:
        try:
            if state.down or state.device is None:
                self._reattach(state)
            self._refresh_info(state)
            sample = self._read_gpu(state)
        except GpuDown as err:
            if not state.down:
                log.warning("%s; reporting it down until it answers again", err)
            state.down = True
            return _down_sample(state)
        if state.down:
            log.warning("GPU %d answers again", state.index)
            state.down = False
        return sample

    def _reattach(self, state: _GpuState) -> None:
        """Find the GPU's handle again: by UUID when known (indices can move), else index."""
        assert self._session is not None
        try:
            if state.info.uuid:
                handle = pynvml.nvmlDeviceGetHandleByUUID(state.info.uuid)
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(state.index)
        except pynvml.NVMLError as err:
            raise GpuDown(f"GPU {state.index}: {error_name(err)}") from err
        if state.device is None:
            state.device = Device(self._session, state.index, handle)
            state.gpm = GpmSampler(state.device)
            state.mig = MigReader(state.device)
        else:
            state.device.handle = handle

    def _read_gpu(self, state: _GpuState) -> GpuSample:
        dev = state.device
        assert dev is not None
        found = state.links.refresh(dev, self._clock(), self._reprobe_interval)
        if found is not None:
            state.plan = state.plan.relinked(found)
        answers, state.plan = state.plan.read(dev)
        plan = state.plan
        kept = state.kept
        kept.now = self._clock()
        # area by area in this order, as NVML is called; unpacked into GpuSample below,
        # where mypy checks every name and type (readings.py)
        util = reads.utilization(dev)
        memory = reads.memory(dev)
        power = reads.power(dev, kept, plan, answers)
        thermal = reads.thermal(dev, kept, answers)
        clocks = reads.clocks(dev, kept, plan, answers)
        pcie = reads.pcie(dev, kept, plan, answers)
        ecc = reads.ecc(dev, plan, answers)
        retirement = reads.retirement(dev, plan, answers)
        gpm = state.gpm.read() if state.gpm is not None else GpmReading()
        running = state.processes.running(dev)
        mig = state.mig.read() if state.mig is not None else MigReading()
        # the processes that get series: utilization is read for them alone
        listed = tuple(row.pid for row in running[:MAX_PROCESSES])
        utilization = state.processes.utilization(dev, listed)
        return GpuSample(
            index=state.index,
            uuid=state.info.uuid,
            info=state.info,
            up=True,
            **util,
            **memory,
            **power,
            **thermal,
            **clocks,
            **pcie,
            **ecc,
            **retirement,
            sm_active_ratio=gpm.sm_active_ratio,
            sm_occupancy_ratio=gpm.sm_occupancy_ratio,
            tensor_active_ratio=gpm.tensor_active_ratio,
            dram_active_ratio=gpm.dram_active_ratio,
            mig_mode_current=mig.mig_mode_current,
            mig_mode_pending=mig.mig_mode_pending,
            mig_devices=with_pids(mig.mig_devices, running),
            xid_counts=MappingProxyType(self._xid_counts(state.index)),
            processes=processes(running, self._attribution, utilization, self._owners),
            nvlinks=state.links.read(dev, plan.nvlinks, answers, self._bus_to_index),
        )

    def _xid_counts(self, index: int) -> dict[int, int]:
        """GPU `index`'s XID counts. The kernel log is read and split by GPU once a poll,
        not once per GPU, and again when a GPU's bus id became known since: a GPU lost
        at start gets its log lines from the poll it comes back in, the same poll as its
        nvwatch_gpu_up 1 (else a history XID would look new to the alert)."""
        if self._xid is None:
            return {}
        if self._poll_xids is None:
            self._poll_xids = self._xid.counts_by_gpu()
        return self._poll_xids.get(index, {})


# --- helpers ---------------------------------------------------------------------------


def _down_sample(state: _GpuState) -> GpuSample:
    return GpuSample(index=state.index, uuid=state.info.uuid, info=state.info, up=False)
