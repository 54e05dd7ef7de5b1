"""The NVML source: every GPU on the node, its NVLink links, XID events and GPM.

Per poll and per GPU the source reads through `Device.call` (see device.py), so one
GPU that is lost, or one value that is garbage, never spoils the rest of the sample.

Batching. The NVLink counters (data TX/RX, state, speed, error counters) and the memory
temperature and energy readings go through one nvmlDeviceGetFieldValues call per GPU:
one ioctl into the driver for ~50-80 values, where the per-call functions cost one ioctl
each (an H100 with 18 links would need ~130 round trips per poll for NVLink alone).
Each field "family" (e.g. nvlink_tx) is decided once per GPU from the first answer:
"field" when the batch serves it, "call" when every entry said NotSupported or the batch
call itself is missing. The decision sticks, so a counter never switches between two
sources from one poll to the next (they need not agree, and a switch would look like a
counter going backwards without a reset).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

import psutil
import pynvml

from agent.sources import SourceUnavailable
from agent.sources.nvml.device import (
    Device,
    FieldReading,
    GpuDown,
    NvmlSession,
    error_name,
    normalise_bus_id,
    plain_int,
    plain_number,
    system_call,
    text,
)
from agent.sources.nvml.gpm import GpmSampler
from agent.sources.nvml.samples import (
    CLOCK_EVENT_REASONS,
    NVLINK_DETAIL_CHOICES,
    NVLINK_ERROR_TYPES,
    THROTTLE_POLICIES,
    GpuInfo,
    GpuSample,
    NvLinkSample,
    NvmlSample,
    ProcessSample,
)
from agent.sources.nvml.xid import XidListener

log = logging.getLogger(__name__)

MHZ = 1_000_000
#: NVML's "KB" in nvmlDeviceGetPcieThroughput is KiB: the NVLink throughput fields of the
#: same header say KiB explicitly, and nvitop/DCGM scale both by 1024.
KIB = 1024
#: NVML_FI_DEV_NVLINK_GET_SPEED is in MBps, decimal like NVIDIA's link rates (25781 MBps
#: on an NVLink2 link is the "25 GB/s" of the datasheet).
MBPS = 1_000_000
MAX_PROCESSES = 8
_INIT_BACKOFF_START_S = 1.0

# nvmlDeviceGetNvLinkVersion -> nominal data rate per link per direction, for GPUs whose
# field values cannot report the speed (NVML_NVLINK_VERSION_1_0 .. _5_0).
_NVLINK_VERSION_SPEED = {1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 25e9, 6: 25e9, 7: 50e9}

_REMOTE_TYPES = {
    pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu",
    pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU: "cpu",  # POWER9 NVLink to the CPU
    pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch",
}


def _lane_field(prefix: str, link: int) -> int | None:
    return getattr(pynvml, f"NVML_FI_DEV_NVLINK_{prefix}_L{link}", None)


# Per-link error counter field ids exist for links 0..11 only (the header calls them
# "lanes"); a GPU with more links (H100: 18) reads its error counters per call.
_ERROR_FIELD_PREFIX = {
    "replay": "REPLAY_ERROR_COUNT",
    "recovery": "RECOVERY_ERROR_COUNT",
    "crc_flit": "CRC_FLIT_ERROR_COUNT",
    "crc_data": "CRC_DATA_ERROR_COUNT",
    "ecc": "ECC_DATA_ERROR_COUNT",
}

FIELD_MODE = "field"
CALL_MODE = "call"


@dataclass
class _Link:
    link: int
    remote_type: str | None = None
    remote_pci_bus_id: str | None = None


@dataclass
class _GpuState:
    """What the source keeps about one GPU between polls."""

    index: int
    device: Device | None
    info: GpuInfo
    down: bool = False
    links: list[_Link] | None = None  # None: not discovered yet
    links_probed_at: float = 0.0
    modes: dict[str, str] = field(default_factory=dict)  # field family -> FIELD/CALL
    static: dict[str, float | None] = field(default_factory=dict)  # never change
    gpm: GpmSampler | None = None


class NvmlSource:
    """GPUs through NVML (pynvml), following the `agent.sources.Source` protocol.

    `nvlink_detail`: "link" exports NVLink series per link; "gpu" aggregates per GPU
    with link="all": bytes and errors summed over the links, nvwatch_nvlink_up the
    number of links up, the speed summed over links that are up, and no remote_info
    (the per-link wiring is what "gpu" leaves out). A sum is left out for a poll in
    which any link failed to answer, so an aggregate counter never dips.
    """

    name = "nvml"

    def __init__(
        self,
        *,
        nvlink_detail: str = "link",
        reprobe_interval: float = 300.0,
        init_retry_max: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if nvlink_detail not in NVLINK_DETAIL_CHOICES:
            raise ValueError(
                f"nvlink_detail must be one of {', '.join(NVLINK_DETAIL_CHOICES)}, "
                f"not {nvlink_detail!r}"
            )
        self.nvlink_detail = nvlink_detail
        self._reprobe_interval = reprobe_interval
        self._init_retry_max = init_retry_max
        self._clock = clock
        self._session: NvmlSession | None = None
        self._gpus: list[_GpuState] = []
        self._bus_to_index: dict[str, int] = {}
        self._driver_version = ""
        self._cuda_version = ""
        self._xid: XidListener | None = None
        self._next_init_at = 0.0
        self._init_backoff = _INIT_BACKOFF_START_S
        self._init_failure = ""

    # --- Source protocol ---------------------------------------------------------------

    def collect(self) -> NvmlSample:
        self._ensure_initialised()
        gpus = tuple(self._collect_gpu(state) for state in self._gpus)
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
            raise SourceUnavailable(self._init_failure)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            self._init_failed(_init_reason(err))
        try:
            self._enumerate()
        except pynvml.NVMLError as err:
            system_call(pynvml.nvmlShutdown)
            self._init_failed(f"NVML could not list the GPUs: {error_name(err)}")
        self._init_backoff = _INIT_BACKOFF_START_S
        self._start_xid_listener()

    def _init_failed(self, reason: str) -> None:
        self._init_failure = reason
        self._next_init_at = self._clock() + self._init_backoff
        self._init_backoff = min(self._init_backoff * 2, self._init_retry_max)
        raise SourceUnavailable(reason)

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
        self._bus_to_index = {
            normalise_bus_id(s.info.pci_bus_id): s.index for s in self._gpus if s.info.pci_bus_id
        }

    def _start_xid_listener(self) -> None:
        handles = [(s.index, s.device.handle) for s in self._gpus if s.device is not None]
        if handles:
            self._xid = XidListener(handles)
            self._xid.start()

    def _refresh_info(self, state: _GpuState) -> None:
        """Descriptive fields; re-read while some are missing (e.g. after recovery)."""
        dev = state.device
        info = state.info
        if dev is None or (info.name and info.uuid and info.pci_bus_id and info.vbios):
            return
        pci = dev.call("pci_info", pynvml.nvmlDeviceGetPciInfo_v3)  # pci.bus_id
        state.info = GpuInfo(
            name=info.name or text(dev.call("name", pynvml.nvmlDeviceGetName)),  # name
            uuid=info.uuid or text(dev.call("uuid", pynvml.nvmlDeviceGetUUID)),  # uuid
            pci_bus_id=info.pci_bus_id or (text(pci.busId) if pci is not None else ""),
            serial=info.serial or text(dev.call("serial", pynvml.nvmlDeviceGetSerial)),
            vbios=info.vbios or text(dev.call("vbios", pynvml.nvmlDeviceGetVbiosVersion)),
            driver_version=self._driver_version,  # driver_version
            cuda_version=self._cuda_version,
        )
        if state.info.pci_bus_id and not info.pci_bus_id:
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
        else:
            state.device.handle = handle

    def _read_gpu(self, state: _GpuState) -> GpuSample:
        dev = state.device
        assert dev is not None
        h = pynvml
        static = self._static(state)
        util = dev.call("utilization", h.nvmlDeviceGetUtilizationRates)  # utilization.gpu
        memory = self._memory(dev)
        fields = self._read_fields(state)
        clock_events = self._clock_events(dev)
        gpm = state.gpm.read() if state.gpm is not None else None
        links = self._nvlinks(state, fields)
        xid = self._xid.counts(state.index) if self._xid is not None else {}

        def ecc(kind: int, scope: int) -> int | None:
            # ecc.errors.{corrected,uncorrected}.{volatile,aggregate}.total
            return plain_int(
                dev.call(f"ecc:{kind}:{scope}", h.nvmlDeviceGetTotalEccErrors, kind, scope)
            )

        remapped = dev.call("remapped_rows", h.nvmlDeviceGetRemappedRows)  # remapped_rows.*
        if remapped is not None and len(remapped) != 4:
            remapped = None
        pending = dev.call("retired_pending", h.nvmlDeviceGetRetiredPagesPendingStatus)

        return GpuSample(
            index=state.index,
            uuid=state.info.uuid,
            info=state.info,
            up=True,
            utilization_ratio=_percent(util.gpu) if util is not None else None,
            memory_utilization_ratio=_percent(util.memory) if util is not None else None,
            memory_total_bytes=memory[0],
            memory_used_bytes=memory[1],
            memory_free_bytes=memory[2],
            # power.draw
            power_watts=_milli(dev.call("power", h.nvmlDeviceGetPowerUsage)),
            # enforced.power.limit
            power_limit_watts=_milli(dev.call("power_limit", h.nvmlDeviceGetEnforcedPowerLimit)),
            power_tdp_watts=static["tdp"],  # power.default_limit
            energy_joules=self._energy(state, fields),  # total_energy_consumption
            # temperature.gpu
            temperature_gpu_celsius=self._gpu_temperature(dev),
            temperature_memory_celsius=self._field_value(state, fields, "memory_temp", 0),
            threshold_slowdown_celsius=static["t_slowdown"],
            threshold_shutdown_celsius=static["t_shutdown"],
            threshold_gpu_max_celsius=static["t_gpu_max"],
            threshold_memory_max_celsius=static["t_memory_max"],
            # clocks.sm, clocks.mem, clocks.gr
            clock_sm_hertz=_mhz(dev.call("clock:sm", h.nvmlDeviceGetClockInfo, h.NVML_CLOCK_SM)),
            clock_memory_hertz=_mhz(
                dev.call("clock:mem", h.nvmlDeviceGetClockInfo, h.NVML_CLOCK_MEM)
            ),
            clock_graphics_hertz=_mhz(
                dev.call("clock:gr", h.nvmlDeviceGetClockInfo, h.NVML_CLOCK_GRAPHICS)
            ),
            clock_sm_max_hertz=static["max_sm"],
            clock_memory_max_hertz=static["max_mem"],
            clock_graphics_max_hertz=static["max_gr"],
            clock_events=clock_events,
            throttle_seconds=self._throttle(dev),
            fan_speed_ratio=_percent(dev.call("fan", h.nvmlDeviceGetFanSpeed)),  # fan.speed
            # pcie.tx_util / rx_util (not in --query-gpu; nvidia-smi dmon -s t)
            pcie_tx_bytes_per_second=_kib(
                dev.call("pcie_tx", h.nvmlDeviceGetPcieThroughput, h.NVML_PCIE_UTIL_TX_BYTES)
            ),
            pcie_rx_bytes_per_second=_kib(
                dev.call("pcie_rx", h.nvmlDeviceGetPcieThroughput, h.NVML_PCIE_UTIL_RX_BYTES)
            ),
            pcie_replays=plain_int(dev.call("pcie_replay", h.nvmlDeviceGetPcieReplayCounter)),
            # pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current/max
            pcie_link_generation_current=plain_int(
                dev.call("pcie_gen", h.nvmlDeviceGetCurrPcieLinkGeneration)
            ),
            pcie_link_generation_max=_int_or_none(static["pcie_gen_max"]),
            pcie_link_width_current=plain_int(
                dev.call("pcie_width", h.nvmlDeviceGetCurrPcieLinkWidth)
            ),
            pcie_link_width_max=_int_or_none(static["pcie_width_max"]),
            ecc_corrected_volatile=ecc(h.NVML_MEMORY_ERROR_TYPE_CORRECTED, h.NVML_VOLATILE_ECC),
            ecc_corrected_aggregate=ecc(h.NVML_MEMORY_ERROR_TYPE_CORRECTED, h.NVML_AGGREGATE_ECC),
            ecc_uncorrected_volatile=ecc(h.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, h.NVML_VOLATILE_ECC),
            ecc_uncorrected_aggregate=ecc(
                h.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, h.NVML_AGGREGATE_ECC
            ),
            # retired_pages.sbe, retired_pages.dbe, retired_pages.pending
            retired_pages_sbe=self._retired(
                dev, h.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
            ),
            retired_pages_dbe=self._retired(dev, h.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
            retired_pages_pending=bool(pending) if plain_int(pending) is not None else None,
            remapped_rows_correctable=plain_int(remapped[0]) if remapped else None,
            remapped_rows_uncorrectable=plain_int(remapped[1]) if remapped else None,
            remapped_rows_pending=bool(remapped[2]) if remapped else None,
            remapped_rows_failure=bool(remapped[3]) if remapped else None,
            xid_counts=MappingProxyType(xid),
            sm_active_ratio=gpm.sm_active_ratio if gpm else None,
            sm_occupancy_ratio=gpm.sm_occupancy_ratio if gpm else None,
            tensor_active_ratio=gpm.tensor_active_ratio if gpm else None,
            dram_active_ratio=gpm.dram_active_ratio if gpm else None,
            processes=self._processes(dev),
            nvlinks=links,
        )

    def _static(self, state: _GpuState) -> dict[str, float | None]:
        """Readings fixed while the driver is loaded: read until answered, then kept."""
        dev = state.device
        assert dev is not None
        h = pynvml
        readers: dict[str, Callable[[], float | None]] = {
            "tdp": lambda: _milli(dev.call("tdp", h.nvmlDeviceGetPowerManagementDefaultLimit)),
            # nvidia-smi -q -d TEMPERATURE: shutdown / slowdown / max operating temps
            "t_slowdown": lambda: _threshold(dev, h.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
            "t_shutdown": lambda: _threshold(dev, h.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
            "t_gpu_max": lambda: _threshold(dev, h.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
            "t_memory_max": lambda: _threshold(dev, h.NVML_TEMPERATURE_THRESHOLD_MEM_MAX),
            # clocks.max.sm, clocks.max.memory, clocks.max.graphics
            "max_sm": lambda: _mhz(
                dev.call("max_clock:sm", h.nvmlDeviceGetMaxClockInfo, h.NVML_CLOCK_SM)
            ),
            "max_mem": lambda: _mhz(
                dev.call("max_clock:mem", h.nvmlDeviceGetMaxClockInfo, h.NVML_CLOCK_MEM)
            ),
            "max_gr": lambda: _mhz(
                dev.call("max_clock:gr", h.nvmlDeviceGetMaxClockInfo, h.NVML_CLOCK_GRAPHICS)
            ),
            "pcie_gen_max": lambda: plain_number(
                dev.call("pcie_gen_max", h.nvmlDeviceGetMaxPcieLinkGeneration)
            ),
            "pcie_width_max": lambda: plain_number(
                dev.call("pcie_width_max", h.nvmlDeviceGetMaxPcieLinkWidth)
            ),
        }
        for key, read in readers.items():
            if state.static.get(key) is None:
                state.static[key] = read()
        return state.static

    def _memory(self, dev: Device) -> tuple[int | None, int | None, int | None]:
        """memory.total, memory.used, memory.free (v2: `used` excludes driver-reserved)."""
        info = dev.call("memory_v2", pynvml.nvmlDeviceGetMemoryInfo, pynvml.nvmlMemory_v2)
        if info is None and dev.is_unsupported("memory_v2"):
            info = dev.call("memory_v1", pynvml.nvmlDeviceGetMemoryInfo)
        if info is None:
            return None, None, None
        return plain_int(info.total), plain_int(info.used), plain_int(info.free)

    def _gpu_temperature(self, dev: Device) -> float | None:
        """temperature.gpu: nvmlDeviceGetTemperatureV, or the deprecated call on old drivers."""
        sensor = pynvml.NVML_TEMPERATURE_GPU
        value = dev.call("temperature_v", pynvml.nvmlDeviceGetTemperatureV, sensor)
        if value is None and dev.is_unsupported("temperature_v"):
            value = dev.call("temperature", pynvml.nvmlDeviceGetTemperature, sensor)
        return plain_number(value)

    def _clock_events(self, dev: Device) -> MappingProxyType[str, bool]:
        """clocks_event_reasons.*: the new 13.x names, or the older ThrottleReasons ones."""
        h = pynvml
        supported = dev.call("events_supported", h.nvmlDeviceGetSupportedClocksEventReasons)
        if supported is None and dev.is_unsupported("events_supported"):
            supported = dev.call(
                "throttle_supported", h.nvmlDeviceGetSupportedClocksThrottleReasons
            )
        current = dev.call("events_current", h.nvmlDeviceGetCurrentClocksEventReasons)
        if current is None and dev.is_unsupported("events_current"):
            current = dev.call("throttle_current", h.nvmlDeviceGetCurrentClocksThrottleReasons)
        mask = plain_int(supported)
        active = plain_int(current)
        if active is None:
            return MappingProxyType({})
        if mask is None:
            # without the mask, report only what is known to be on: absent beats a false 0
            return MappingProxyType({n: True for n, bit in CLOCK_EVENT_REASONS if active & bit})
        return MappingProxyType(
            {name: bool(active & bit) for name, bit in CLOCK_EVENT_REASONS if mask & bit}
        )

    def _throttle(self, dev: Device) -> MappingProxyType[str, float]:
        """Violation time per policy (nvidia-smi -q -d PERFORMANCE), ns -> s."""
        result = {}
        for name, policy in THROTTLE_POLICIES:
            status = dev.call(f"violation:{policy}", pynvml.nvmlDeviceGetViolationStatus, policy)
            ns = plain_number(status.violationTime) if status is not None else None
            if ns is not None:
                result[name] = ns / 1e9
        return MappingProxyType(result)

    def _retired(self, dev: Device, cause: int) -> int | None:
        pages = dev.call(f"retired:{cause}", pynvml.nvmlDeviceGetRetiredPages, cause)
        return len(pages) if pages is not None else None

    def _processes(self, dev: Device) -> tuple[ProcessSample, ...]:
        """Compute processes by memory held (nvidia-smi --query-compute-apps=pid,used_memory)."""
        procs = dev.call("processes", pynvml.nvmlDeviceGetComputeRunningProcesses_v3)
        if not procs:
            return ()
        rows = []
        for proc in procs:
            pid = plain_int(getattr(proc, "pid", None))
            if pid is None:
                continue
            rows.append((pid, plain_int(getattr(proc, "usedGpuMemory", None))))
        rows.sort(key=lambda row: (-(row[1] or 0), row[0]))
        return tuple(
            ProcessSample(pid=pid, memory_bytes=memory, **_process_owner(pid))
            for pid, memory in rows[:MAX_PROCESSES]
        )

    # --- field values --------------------------------------------------------------------

    def _field_families(self, state: _GpuState) -> dict[str, list[tuple[int, int]]]:
        """Field ids per family; families with no field form (or decided "call") left out."""
        h = pynvml
        families: dict[str, list[tuple[int, int]]] = {
            "memory_temp": [(h.NVML_FI_DEV_MEMORY_TEMP, 0)],
            "energy": [(h.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 0)],
        }
        links = [link.link for link in state.links or []]
        if links:
            families["nvlink_tx"] = [(h.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, n) for n in links]
            families["nvlink_rx"] = [(h.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, n) for n in links]
            families["nvlink_speed"] = [(h.NVML_FI_DEV_NVLINK_GET_SPEED, n) for n in links]
            families["nvlink_state"] = [(h.NVML_FI_DEV_NVLINK_GET_STATE, n) for n in links]
            for kind, prefix in _ERROR_FIELD_PREFIX.items():
                ids = [_lane_field(prefix, n) for n in links]
                if all(i is not None for i in ids):
                    families[f"nvlink_err_{kind}"] = [(i, 0) for i in ids if i is not None]
                else:
                    state.modes[f"nvlink_err_{kind}"] = CALL_MODE
        return {k: v for k, v in families.items() if state.modes.get(k) != CALL_MODE}

    def _read_fields(self, state: _GpuState) -> dict[str, list[FieldReading] | None]:
        """One nvmlDeviceGetFieldValues per GPU; family -> its readings (None: not this poll)."""
        dev = state.device
        assert dev is not None
        if state.links is None or (
            not state.links and self._clock() - state.links_probed_at >= self._reprobe_interval
        ):
            self._discover_links(state)
        families = self._field_families(state)
        ids = [i for ids in families.values() for i in ids]
        readings = dev.field_values(ids)
        result: dict[str, list[FieldReading] | None] = {}
        if readings is None:
            if dev.is_unsupported("field_values"):
                for family in families:
                    state.modes.setdefault(family, CALL_MODE)
            return result
        position = 0
        for family, family_ids in families.items():
            chunk = readings[position : position + len(family_ids)]
            position += len(family_ids)
            if state.modes.get(family) is None:
                if all(r.status == pynvml.NVML_ERROR_NOT_SUPPORTED for r in chunk):
                    state.modes[family] = CALL_MODE
                    continue
                if any(r.status == pynvml.NVML_SUCCESS for r in chunk):
                    state.modes[family] = FIELD_MODE
            result[family] = chunk
        return result

    def _field_value(
        self, state: _GpuState, fields: dict[str, list[FieldReading] | None], family: str, pos: int
    ) -> float | None:
        if state.modes.get(family) != FIELD_MODE:
            return None
        chunk = fields.get(family)
        return chunk[pos].value if chunk is not None and pos < len(chunk) else None

    def _energy(
        self, state: _GpuState, fields: dict[str, list[FieldReading] | None]
    ) -> float | None:
        """total_energy_consumption in mJ -> J, from the batch or, if it lacks it, per call."""
        if state.modes.get("energy") == CALL_MODE:
            assert state.device is not None
            mj = plain_number(
                state.device.call("energy", pynvml.nvmlDeviceGetTotalEnergyConsumption)
            )
        else:
            mj = self._field_value(state, fields, "energy", 0)
        return mj / 1000.0 if mj is not None else None

    # --- NVLink ----------------------------------------------------------------------------

    def _discover_links(self, state: _GpuState) -> None:
        """Probe links 0..NVML_NVLINK_MAX_LINKS-1 until NVML says there are no more.

        A link that is down still answers nvmlDeviceGetNvLinkState (with 0), so the probe
        finds degraded links too; NotSupported/InvalidArgument ends the list.
        """
        dev = state.device
        assert dev is not None
        state.links_probed_at = self._clock()
        links = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                dev.raw(pynvml.nvmlDeviceGetNvLinkState, link)
            except (
                pynvml.NVMLError_NotSupported,
                pynvml.NVMLError_InvalidArgument,
                pynvml.NVMLError_FunctionNotFound,
                pynvml.NVMLError_NotFound,
            ):
                break
            except pynvml.NVMLError as err:
                log.debug("GPU %d: NVLink probe interrupted (%s)", state.index, error_name(err))
                return  # try again next poll rather than keep a short list
            links.append(_Link(link))
        state.links = links

    def _remote(self, dev: Device, link: _Link) -> None:
        """nvidia-smi nvlink -R: what the far end is; read until known."""
        if link.remote_type is None:
            kind = dev.call(
                f"nvlink_remote_type:{link.link}",
                pynvml.nvmlDeviceGetNvLinkRemoteDeviceType,
                link.link,
            )
            link.remote_type = _REMOTE_TYPES.get(kind) if kind is not None else None
        if link.remote_pci_bus_id is None:
            pci = dev.call(
                f"nvlink_remote_pci:{link.link}", pynvml.nvmlDeviceGetNvLinkRemotePciInfo, link.link
            )
            bus_id = text(pci.busId) if pci is not None else ""
            link.remote_pci_bus_id = bus_id or None
        # drivers without nvmlDeviceGetNvLinkRemoteDeviceType: a local GPU's bus id is
        # unambiguous, anything else is left unknown
        if (
            link.remote_type is None
            and link.remote_pci_bus_id is not None
            and normalise_bus_id(link.remote_pci_bus_id) in self._bus_to_index
        ):
            link.remote_type = "gpu"

    def _nvlinks(
        self, state: _GpuState, fields: dict[str, list[FieldReading] | None]
    ) -> tuple[NvLinkSample, ...]:
        dev = state.device
        assert dev is not None
        if not state.links:
            return ()
        samples = []
        for pos, link in enumerate(state.links):
            self._remote(dev, link)
            n = link.link
            # nvidia-smi nvlink -s (state and speed), nvidia-smi nvlink -e (errors)
            if state.modes.get("nvlink_state") == CALL_MODE:
                up_value = plain_number(
                    dev.call(f"nvlink_state:{n}", pynvml.nvmlDeviceGetNvLinkState, n)
                )
            else:
                up_value = self._field_value(state, fields, "nvlink_state", pos)
            if state.modes.get("nvlink_speed") == CALL_MODE:
                speed = _version_speed(dev, n)
            else:
                mbps = self._field_value(state, fields, "nvlink_speed", pos)
                speed = mbps * MBPS if mbps is not None else None
            tx = self._field_value(state, fields, "nvlink_tx", pos)
            rx = self._field_value(state, fields, "nvlink_rx", pos)
            errors = {}
            for kind, counter in NVLINK_ERROR_TYPES:
                if state.modes.get(f"nvlink_err_{kind}") == CALL_MODE:
                    value = plain_number(
                        dev.call(
                            f"nvlink_err:{kind}:{n}",
                            pynvml.nvmlDeviceGetNvLinkErrorCounter,
                            n,
                            counter,
                        )
                    )
                else:
                    value = self._field_value(state, fields, f"nvlink_err_{kind}", pos)
                if value is not None:
                    errors[kind] = int(value)
            bus = link.remote_pci_bus_id
            remote_gpu = self._bus_to_index.get(normalise_bus_id(bus)) if bus else None
            samples.append(
                NvLinkSample(
                    link=n,
                    up=bool(up_value) if up_value is not None else None,
                    transmit_bytes=int(tx * KIB) if tx is not None else None,
                    receive_bytes=int(rx * KIB) if rx is not None else None,
                    errors=MappingProxyType(errors),
                    speed_bytes_per_second=speed,
                    remote_type=link.remote_type,
                    remote_gpu=remote_gpu if link.remote_type == "gpu" else None,
                    remote_pci_bus_id=bus,
                )
            )
        return tuple(samples)


# --- helpers ---------------------------------------------------------------------------


def _init_reason(err: pynvml.NVMLError) -> str:
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


def _down_sample(state: _GpuState) -> GpuSample:
    return GpuSample(index=state.index, uuid=state.info.uuid, info=state.info, up=False)


def _percent(value: object) -> float | None:
    number = plain_number(value)
    return min(number / 100.0, 1.0) if number is not None else None


def _milli(value: object) -> float | None:
    number = plain_number(value)
    return number / 1000.0 if number is not None else None


def _mhz(value: object) -> float | None:
    number = plain_number(value)
    return number * MHZ if number is not None else None


def _kib(value: object) -> float | None:
    number = plain_number(value)
    return number * KIB if number is not None else None


def _int_or_none(value: float | None) -> int | None:
    return int(value) if value is not None else None


def _threshold(dev: Device, threshold: int) -> float | None:
    return plain_number(
        dev.call(f"threshold:{threshold}", pynvml.nvmlDeviceGetTemperatureThreshold, threshold)
    )


def _version_speed(dev: Device, link: int) -> float | None:
    """Nominal per-direction rate of a link from its NVLink version (no speed field)."""
    version = dev.call(f"nvlink_version:{link}", pynvml.nvmlDeviceGetNvLinkVersion, link)
    return _NVLINK_VERSION_SPEED.get(version) if isinstance(version, int) else None


def _process_owner(pid: int) -> dict[str, str]:
    """Process name and user from psutil; "" when the process is gone or not ours to read."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            name = proc.name()
            try:
                user = proc.username()
            except (KeyError, psutil.Error):
                user = ""
        return {"name": name, "user": user}
    except (psutil.Error, OSError, ValueError):
        return {"name": "", "user": ""}
