"""NVLink: which links a GPU has, what sits at their far end, and each link's readings.

Counters, state and speed come from the GPU's field batch (fields.py) where the driver
serves them there, else from the per-link calls; `nvidia-smi nvlink -s` (state, speed),
`-e` (error counters), `-gt d` (data counters) and `-R` (remote end) show the same.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import pynvml

from nvwatch.agent.sources.nvml.device import Device, bus_key, error_name, plain_number, text
from nvwatch.agent.sources.nvml.fields import FieldAnswers, FieldBatch, FieldIds
from nvwatch.agent.sources.nvml.samples import NVLINK_ERROR_TYPES, NvLinkSample
from nvwatch.agent.sources.nvml.static import STATIC_REFRESH_S
from nvwatch.agent.sources.nvml.units import MBPS, int_or_none, kib

log = logging.getLogger(__name__)

# nvmlDeviceGetNvLinkVersion -> nominal data rate per link per direction, for GPUs whose
# field values cannot report the speed (NVML_NVLINK_VERSION_1_0 .. _5_0).
_NVLINK_VERSION_SPEED = {1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 25e9, 6: 25e9, 7: 50e9}

_REMOTE_TYPES = {
    pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu",
    pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU: "cpu",  # POWER9 NVLink to the CPU
    pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch",
}

# Per-link error counter field ids (NVML_FI_DEV_NVLINK_<prefix>_L<n>) exist for links
# 0..11 only (the header calls them "lanes"). For links 12 and up (H100: 18 links) the
# scoped ids NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY/_RECOVERY (scopeId = link) count the same
# events as nvmlDeviceGetNvLinkErrorCounter's DL_REPLAY/DL_RECOVERY; the header's
# NVML_FI_DEV_NVLINK_ERROR_DL_CRC does not say whether it is the flit or the data CRC
# count, so CRC and ECC counters of those links stay on the call rather than risk a
# different value.
_ERROR_FIELD_PREFIX = {
    "replay": "REPLAY_ERROR_COUNT",
    "recovery": "RECOVERY_ERROR_COUNT",
    "crc_flit": "CRC_FLIT_ERROR_COUNT",
    "crc_data": "CRC_DATA_ERROR_COUNT",
    "ecc": "ECC_DATA_ERROR_COUNT",
}
_SCOPED_ERROR_FIELD = {
    "replay": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
}

# the probe's answers that mean "no link with this number": the end of the list
_NO_SUCH_LINK = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_InvalidArgument,
    pynvml.NVMLError_FunctionNotFound,
    pynvml.NVMLError_NotFound,
)


@dataclass
class Link:
    """One link and what is known about its far end (read until known)."""

    link: int
    remote_type: str | None = None
    remote_pci_bus_id: str | None = None


def _error_field(kind: str, link: int) -> FieldIds | None:
    """The field id of one link's error counter of `kind`; None: only the call has it."""
    lane = getattr(pynvml, f"NVML_FI_DEV_NVLINK_{_ERROR_FIELD_PREFIX[kind]}_L{link}", None)
    if lane is not None:
        return [(lane, 0)]
    scoped = _SCOPED_ERROR_FIELD.get(kind)
    return [(scoped, link)] if scoped is not None else None


def _error_family(kind: str, link: int) -> str:
    # one family per link and kind, so a link without a field falls back alone
    return f"nvlink_err_{kind}:{link}"


def _discover(dev: Device) -> list[Link] | None:
    """Probe links 0..NVML_NVLINK_MAX_LINKS-1 until NVML says there are no more.

    A link that is down still answers nvmlDeviceGetNvLinkState (with 0), so the probe
    finds degraded links too. None when the probe was interrupted by another error.
    """
    links = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            dev.raw(pynvml.nvmlDeviceGetNvLinkState, link)
        except _NO_SUCH_LINK:
            break
        except pynvml.NVMLError as err:
            log.debug("GPU %d: NVLink probe interrupted (%s)", dev.index, error_name(err))
            return None  # try again next poll rather than keep a short list
        links.append(Link(link))
    return links


class GpuLinks:
    """The NVLink links of one GPU, probed again every `reprobe_interval` while none."""

    def __init__(self) -> None:
        self.links: list[Link] | None = None  # None: not probed to the end yet
        self._probed_at = 0.0
        # far-end info is static (cabling, NVSwitch trays): read until known, then again
        # every STATIC_REFRESH_S, e.g. after a tray was recabled
        self._remote_read_at: float | None = None
        self._remote_due = True
        # field_families of `self.links` as last computed: (links, families)
        self._families: tuple[list[Link] | None, dict[str, FieldIds | None]] = (None, {})
        # _error_plans' answer: (links, batch decisions, one plan per link)
        self._plans: tuple[list[Link] | None, int, list[_ErrorPlan]] = (None, -1, [])

    def refresh(self, dev: Device, now: float, reprobe_interval: float) -> None:
        read_at = self._remote_read_at
        self._remote_due = read_at is None or now - read_at >= STATIC_REFRESH_S
        if self._remote_due:
            self._remote_read_at = now
        if self.links is None or (not self.links and now - self._probed_at >= reprobe_interval):
            self._probed_at = now
            found = _discover(dev)
            if found is not None:
                self.links = found

    def field_families(self) -> dict[str, FieldIds | None]:
        """Field ids per NVLink family, one per link; None for a family without fields.

        The same dict while the links are the same (the batch keeps its request)."""
        links, families = self._families
        if links is not self.links:
            families = _field_families([link.link for link in self.links or []])
            self._families = (self.links, families)
        return families

    def read(
        self,
        dev: Device,
        batch: FieldBatch,
        answers: FieldAnswers,
        bus_to_index: Mapping[str, int],
    ) -> tuple[NvLinkSample, ...]:
        """This poll's sample of every link; `bus_to_index` names the GPUs at far ends."""
        for link in self.links or []:
            _read_remote(dev, link, bus_to_index, self._remote_due)
        plans = self._error_plans(batch)
        return tuple(
            _read_link(dev, position, link, batch, answers, bus_to_index, plans[position])
            for position, link in enumerate(self.links or [])
        )

    def _error_plans(self, batch: FieldBatch) -> list[_ErrorPlan]:
        """Each link's error plan, kept while the links and the batch's decisions are the
        same: ~90 error readings per GPU per poll need no family name or decision lookup."""
        links, decisions, plans = self._plans
        if links is not self.links or decisions != batch.decisions:
            plans = [_error_plan(link.link, batch) for link in self.links or []]
            self._plans = (self.links, batch.decisions, plans)
        return plans


def _field_families(numbers: list[int]) -> dict[str, FieldIds | None]:
    """Field ids per NVLink family of links `numbers`."""
    h = pynvml
    if not numbers:
        return {}
    families: dict[str, FieldIds | None] = {
        "nvlink_tx": [(h.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, n) for n in numbers],
        "nvlink_rx": [(h.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, n) for n in numbers],
        "nvlink_speed": [(h.NVML_FI_DEV_NVLINK_GET_SPEED, n) for n in numbers],
        "nvlink_state": [(h.NVML_FI_DEV_NVLINK_GET_STATE, n) for n in numbers],
    }
    for kind in _ERROR_FIELD_PREFIX:
        for n in numbers:
            families[_error_family(kind, n)] = _error_field(kind, n)
    return families


def _read_link(
    dev: Device,
    position: int,
    link: Link,
    batch: FieldBatch,
    answers: FieldAnswers,
    bus_to_index: Mapping[str, int],
    errors: _ErrorPlan,
) -> NvLinkSample:
    n = link.link
    bus = link.remote_pci_bus_id
    key = bus_key(bus) if bus else None
    remote_gpu = bus_to_index.get(key) if key is not None else None
    up = _state(dev, n, position, batch, answers)
    return NvLinkSample(
        link=n,
        up=bool(up) if up is not None else None,
        speed_bytes_per_second=_speed(dev, n, position, batch, answers),
        # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX count KiB (nvidia-smi nvlink -gt d)
        transmit_bytes=int_or_none(kib(answers.value("nvlink_tx", position))),
        receive_bytes=int_or_none(kib(answers.value("nvlink_rx", position))),
        errors=_errors(dev, n, errors, answers),
        remote_type=link.remote_type,
        remote_gpu=remote_gpu if link.remote_type == "gpu" else None,
        remote_pci_bus_id=bus,
    )


def _read_remote(dev: Device, link: Link, bus_to_index: Mapping[str, int], due: bool) -> None:
    """nvidia-smi nvlink -R: nvmlDeviceGetNvLinkRemoteDeviceType and ...RemotePciInfo,
    while unknown and when `due`; a re-read that fails keeps the last answer."""
    n = link.link
    if link.remote_type is None or due:
        kind = dev.call(f"nvlink_remote_type:{n}", pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, n)
        if kind is not None:
            link.remote_type = _REMOTE_TYPES.get(kind)
    if link.remote_pci_bus_id is None or due:
        pci = dev.call(f"nvlink_remote_pci:{n}", pynvml.nvmlDeviceGetNvLinkRemotePciInfo, n)
        read = text(pci.busId) if pci is not None else ""
        link.remote_pci_bus_id = read or link.remote_pci_bus_id
    # drivers without nvmlDeviceGetNvLinkRemoteDeviceType: a local GPU's bus id is
    # unambiguous, anything else is left unknown
    bus = link.remote_pci_bus_id
    if link.remote_type is None and bus is not None and bus_key(bus) in bus_to_index:
        link.remote_type = "gpu"


def _state(
    dev: Device, n: int, position: int, batch: FieldBatch, answers: FieldAnswers
) -> float | None:
    """NVML_FI_DEV_NVLINK_GET_STATE, or nvmlDeviceGetNvLinkState (nvidia-smi nvlink -s)."""
    if batch.by_call("nvlink_state"):
        return plain_number(dev.call(f"nvlink_state:{n}", pynvml.nvmlDeviceGetNvLinkState, n))
    return answers.value("nvlink_state", position)


def _speed(
    dev: Device, n: int, position: int, batch: FieldBatch, answers: FieldAnswers
) -> float | None:
    """NVML_FI_DEV_NVLINK_GET_SPEED (MBps), or the nominal rate of the link's version."""
    if batch.by_call("nvlink_speed"):
        version = dev.call(f"nvlink_version:{n}", pynvml.nvmlDeviceGetNvLinkVersion, n)
        return _NVLINK_VERSION_SPEED.get(version) if isinstance(version, int) else None
    mbps = answers.value("nvlink_speed", position)
    return mbps * MBPS if mbps is not None else None


#: One link's error counters: (type, NVML counter, family in the batch or None where the
#: call serves it, the call's key for the device layer), one entry per NVLINK_ERROR_TYPES.
_ErrorPlan = tuple[tuple[str, int, str | None, str], ...]


def _error_plan(n: int, batch: FieldBatch) -> _ErrorPlan:
    plan = []
    for kind, counter in NVLINK_ERROR_TYPES:
        family = _error_family(kind, n)
        plan.append(
            (kind, counter, None if batch.by_call(family) else family, f"nvlink_err:{kind}:{n}")
        )
    return tuple(plan)


def _errors(
    dev: Device, n: int, plan: _ErrorPlan, answers: FieldAnswers
) -> MappingProxyType[str, int]:
    """NVML_FI_DEV_NVLINK_*_ERROR_COUNT_L<n> (or ..._ERROR_DL_* for link n), or
    nvmlDeviceGetNvLinkErrorCounter per type
    (nvidia-smi nvlink -e); types the GPU does not count are left out."""
    errors = {}
    for kind, counter, family, key in plan:
        if family is None:
            value = plain_number(dev.call(key, pynvml.nvmlDeviceGetNvLinkErrorCounter, n, counter))
        else:
            value = answers.value(family)
        if value is not None:
            errors[kind] = int(value)
    return MappingProxyType(errors)
