"""NVLink: which links a GPU has, what sits at their far end, and each link's readings.

Counters, state and speed come from the GPU's field batch (fields.py) where the driver
serves them there, else from the per-link calls; `nvidia-smi nvlink -s` (state, speed),
`-e` (error counters), `-gt d` (data counters) and `-R` (remote end) show the same.
Which of the two each reading takes is in the link's `LinkPlan`, part of the GPU's plan
(plan.py), made again whenever the links or a decision change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import pynvml

from nvwatch.agent.sources.nvml.device import Device, bus_key, error_name, plain_number, text
from nvwatch.agent.sources.nvml.fields import FieldAnswers, FieldIds
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

    def refresh(self, dev: Device, now: float, reprobe_interval: float) -> list[Link] | None:
        """Probe the links when due; the links found when a probe ran to the end (the
        GPU's plan is made for them then), else None: the links are as they were."""
        read_at = self._remote_read_at
        self._remote_due = read_at is None or now - read_at >= STATIC_REFRESH_S
        if self._remote_due:
            self._remote_read_at = now
        if self.links is None or (not self.links and now - self._probed_at >= reprobe_interval):
            self._probed_at = now
            found = _discover(dev)
            if found is not None:
                self.links = found
                return found
        return None

    def read(
        self,
        dev: Device,
        plans: Sequence[LinkPlan],
        answers: FieldAnswers,
        bus_to_index: Mapping[str, int],
    ) -> tuple[NvLinkSample, ...]:
        """This poll's sample of every planned link; `bus_to_index` names the GPUs at
        far ends."""
        for plan in plans:
            _read_remote(dev, plan.link, bus_to_index, self._remote_due)
        return tuple(_read_link(dev, plan, answers, bus_to_index) for plan in plans)


def field_families(links: Sequence[Link]) -> dict[str, FieldIds | None]:
    """Field ids per NVLink family of `links`; None for a family without fields."""
    h = pynvml
    numbers = [link.link for link in links]
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


#: One error counter of a link: (type, NVML counter, its family in the batch or None
#: where the call serves it, the call's key for the device layer).
ErrorSource = tuple[str, int, str | None, str]


class LinkPlan(NamedTuple):
    """Where one link's readings come from under one set of decisions: worked out once
    per plan, so ~90 error readings per GPU per poll need no family name or decision
    lookup."""

    link: Link
    position: int  # the link's entry in each per-link family of the batch
    state_by_call: bool
    speed_by_call: bool
    errors: tuple[ErrorSource, ...]  # one per NVLINK_ERROR_TYPES


def link_plans(links: Sequence[Link], by_call: Callable[[str], bool]) -> tuple[LinkPlan, ...]:
    """Each link's plan, `by_call` telling the families decided "call"."""
    state_by_call = by_call("nvlink_state")
    speed_by_call = by_call("nvlink_speed")
    plans = []
    for position, link in enumerate(links):
        n = link.link
        errors = []
        for kind, counter in NVLINK_ERROR_TYPES:
            family = _error_family(kind, n)
            source = None if by_call(family) else family
            errors.append((kind, counter, source, f"nvlink_err:{kind}:{n}"))
        plans.append(LinkPlan(link, position, state_by_call, speed_by_call, tuple(errors)))
    return tuple(plans)


def _read_link(
    dev: Device, plan: LinkPlan, answers: FieldAnswers, bus_to_index: Mapping[str, int]
) -> NvLinkSample:
    link = plan.link
    n = link.link
    bus = link.remote_pci_bus_id
    key = bus_key(bus) if bus else None
    remote_gpu = bus_to_index.get(key) if key is not None else None
    up = _state(dev, plan, answers)
    return NvLinkSample(
        link=n,
        up=bool(up) if up is not None else None,
        speed_bytes_per_second=_speed(dev, plan, answers),
        # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX count KiB (nvidia-smi nvlink -gt d)
        transmit_bytes=int_or_none(kib(answers.value("nvlink_tx", plan.position))),
        receive_bytes=int_or_none(kib(answers.value("nvlink_rx", plan.position))),
        errors=_errors(dev, n, plan.errors, answers),
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


def _state(dev: Device, plan: LinkPlan, answers: FieldAnswers) -> float | None:
    """NVML_FI_DEV_NVLINK_GET_STATE, or nvmlDeviceGetNvLinkState (nvidia-smi nvlink -s)."""
    if plan.state_by_call:
        n = plan.link.link
        return plain_number(dev.call(f"nvlink_state:{n}", pynvml.nvmlDeviceGetNvLinkState, n))
    return answers.value("nvlink_state", plan.position)


def _speed(dev: Device, plan: LinkPlan, answers: FieldAnswers) -> float | None:
    """NVML_FI_DEV_NVLINK_GET_SPEED (MBps), or the nominal rate of the link's version."""
    if plan.speed_by_call:
        n = plan.link.link
        version = dev.call(f"nvlink_version:{n}", pynvml.nvmlDeviceGetNvLinkVersion, n)
        return _NVLINK_VERSION_SPEED.get(version) if isinstance(version, int) else None
    mbps = answers.value("nvlink_speed", plan.position)
    return mbps * MBPS if mbps is not None else None


def _errors(
    dev: Device, n: int, plan: Sequence[ErrorSource], answers: FieldAnswers
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
