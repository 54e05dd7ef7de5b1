"""InfiniBand / RoCE ports from sysfs: <root>/class/infiniband/<device>/ports/<n>/.

The node_exporter way: parsing lives in `infiniband_parse`, this module only walks the
tree, and every odd file (missing, "N/A (no PMA)", unreadable, empty, garbage, a device
unplugged mid-read) costs only that one value, logged once per file and reason, never the
rest of the port or the other devices.

No device in /sys/class/infiniband: `SourceAbsent` when the PCI bus has no HCA either
(see presence.rdma_verdict); down (`SourceUnavailable`) when it has, or when devices this
agent saw earlier are gone (driver unloaded, HCAs lost).

Counter values are Python ints, exact to 64 bits. Exposition hands them to
prometheus_client as float64, like every Prometheus sample, so values above 2^53 lose
their low bits there (a byte counter reaches 2^53 after ~8 PB).

Reads are cheap on purpose: the directory listing (devices, ports, counter files) and the
GPU affinity are cached (agent/sources/infiniband_listing.py), and so are the descriptive
attributes (board_id, fw_ver, hca_type, node_guid, link_layer) until the next listing; a
poll is then one listdir plus one open/read per exported counter file and per state,
phys_state and rate (a DGX H100: 176 files). Counter files no series exports
(unicast/multicast packets, hw_counters outside --ib-hw-counters) are never opened.
Every open is non-blocking and refuses anything that is not a regular file
(agent/sources/sysfs_read.py): a FIFO left where a counter was costs that counter, not
the source.

A value that is not a value (garbage, a number wider than 64 bits) is dropped and
counted in `parse_errors_total`, exported as nvwatch_agent_parse_errors_total; so is, on
every poll, a device directory that exists and cannot be listed (an unreadable ports/
loses every value in it). Entries that are no directory (a symbolic link loop in
class/infiniband) are skipped; each of these is logged once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from nvwatch.agent.sources import SourceUnavailable
from nvwatch.agent.sources.infiniband_listing import (
    DeviceListing,
    ListingCache,
    PortListing,
    visible_files_strict,
)
from nvwatch.agent.sources.infiniband_parse import (
    DEFAULT_HW_COUNTERS,
    ERROR_COUNTER_TYPES,
    SATURATION_FLAGGED,
    NotAValue,
    is_saturated,
    parse_counter,
    parse_rate,
    parse_state,
)
from nvwatch.agent.sources.pci_affinity import PciPath, Resolver
from nvwatch.agent.sources.presence import PciScan, rdma_verdict, scan_pci
from nvwatch.agent.sources.sysfs_read import NotARegularFile, read_attribute

log = logging.getLogger(__name__)

Reader = Callable[[str], str]
_T = TypeVar("_T")

# Keep the once-only log bounded: a tree that churns file names (hot-plug storms) must
# not grow the memory of what was already logged without limit.
_MAX_LOGGED = 4096


def read_sysfs_text(path: str) -> str:
    """One sysfs attribute, without blocking; NotARegularFile for a FIFO, device, dir."""
    return read_attribute(path).decode("ascii", errors="replace")


@dataclass(frozen=True)
class InfinibandPort:
    device: str
    port: str
    state: int | None  # 4 = ACTIVE
    state_name: str | None
    physical_state: int | None  # 5 = LinkUp
    physical_state_name: str | None
    rate_bytes_per_second: int | None
    rate_text: str | None
    link_layer: str | None  # InfiniBand | Ethernet
    # counters/ (and counters_ext/*_64, which win) by kernel file name, raw units:
    # port_xmit_data/port_rcv_data are in 4-octet words.
    counters: Mapping[str, int] = field(default_factory=dict)
    hw_counters: Mapping[str, int] = field(default_factory=dict)  # hw_counters/, by file
    nearest_gpus: tuple[int, ...] = ()

    @property
    def transmit_bytes(self) -> int | None:
        words = self.counters.get("port_xmit_data")
        return None if words is None else words * 4

    @property
    def receive_bytes(self) -> int | None:
        words = self.counters.get("port_rcv_data")
        return None if words is None else words * 4

    @property
    def errors(self) -> dict[str, int]:
        """Error counters present on this port, by catalogue `type` label."""
        return {
            label: self.counters[name]
            for name, label in ERROR_COUNTER_TYPES.items()
            if name in self.counters
        }

    @property
    def saturated(self) -> dict[str, bool]:
        """Every narrow counter present that can fill (not the switch-only ones), by file
        name: True when pinned at its maximum."""
        result: dict[str, bool] = {}
        for name in SATURATION_FLAGGED:
            value = self.counters.get(name)
            if value is not None:
                result[name] = bool(is_saturated(name, value))
        return result

    @property
    def pinned(self) -> dict[str, bool]:
        """The narrow counters pinned at their maximum, by file name (all True).

        What nvwatch_ib_port_reading_saturated exports: a series only while a counter is
        pinned. A flag per counter per port that is 0 all its life was 80 of a DGX
        H100's ~830 series (docs/metrics.md's series budget); `== 1` alerts, the dashboard's
        table and `count()` read the same without them."""
        return {name: True for name, flag in self.saturated.items() if flag}


@dataclass(frozen=True)
class InfinibandDevice:
    name: str  # mlx5_0
    board_id: str | None
    firmware_version: str | None
    hca_type: str | None
    node_guid: str | None
    pci_path: PciPath | None
    ports: tuple[InfinibandPort, ...]


@dataclass(frozen=True)
class InfinibandSample:
    devices: tuple[InfinibandDevice, ...]


class InfinibandSource:
    """Reads every HCA and port under `<sysfs_root>/class/infiniband`."""

    name = "infiniband"

    def __init__(
        self,
        sysfs_root: Path = Path("/sys"),
        *,
        gpu_bus_ids: Callable[[], Sequence[str]] | None = None,
        reader: Reader = read_sysfs_text,
        relist_every: int = 60,
        hw_counters: frozenset[str] | None = DEFAULT_HW_COUNTERS,
    ) -> None:
        """`gpu_bus_ids` gives the GPUs' PCI bus ids in NVML index order (from NVML at
        run time); without it, or when it returns nothing, nearest_gpus is empty.
        `reader` reads one file; tests inject failures through it. `hw_counters` names
        the hw_counters files read and exported (None: every one), by default the
        agent's default set; the registry passes `--ib-hw-counters`'s choice.
        """
        if relist_every < 1:
            raise ValueError("relist_every must be at least 1")
        self._root = sysfs_root
        self._class_dir = os.path.join(sysfs_root, "class", "infiniband")
        self._gpu_bus_ids = gpu_bus_ids
        self._read = reader
        self._relist_every = relist_every
        self._listing = ListingCache(
            self._class_dir, Resolver(sysfs_root), relist_every, hw_counters
        )
        # values dropped as not-a-value since start (self-metric, read by the poller)
        self.parse_errors_total = 0
        self._logged: set[tuple[str, str]] = set()
        self._seen: set[str] = set()  # devices listed in this agent's life
        self._pci: PciScan | None = None  # cached while there are no devices
        self._polls_since_pci_scan = 0
        # The descriptive attributes (board_id, fw_ver, hca_type, node_guid, link_layer)
        # by path, as last read: they change only when the device is re-registered
        # (firmware reset, driver reload), which relists and clears this. Reading them
        # every poll was 40 of a DGX H100's ~210 opens. Only values read are kept, so a
        # missing or odd one is tried again on the next poll.
        self._static: dict[str, str] = {}

    # --- the Source protocol -----------------------------------------------------------

    def collect(self) -> InfinibandSample:
        try:
            names = tuple(visible_files_strict(self._class_dir))
            mtime = os.stat(self._class_dir).st_mtime_ns
        except FileNotFoundError:
            raise self._no_devices(class_dir_exists=False) from None
        if not names:
            raise self._no_devices(class_dir_exists=True)
        listings, relisted = self._listing.devices(names, mtime, self._current_gpu_bus_ids())
        if relisted:
            for path, reason, level in self._listing.skipped:
                self._log_once(path, reason, level)
            self._note_seen([listing.name for listing in listings])
            self._static.clear()
        if not listings:  # every entry skipped: no device, as in an empty directory
            raise self._no_devices(class_dir_exists=True)
        devices = []
        for listing in listings:
            device = self._read_device(listing)
            if device is not None:
                devices.append(device)
        return InfinibandSample(devices=tuple(devices))

    def close(self) -> None:
        self._listing.clear()

    # --- no devices: absent or down ----------------------------------------------------

    def _no_devices(self, *, class_dir_exists: bool) -> Exception:
        """Why there is nothing to read: this node has no HCA, or its HCAs are unreadable."""
        if self._seen:
            return SourceUnavailable(
                f"InfiniBand devices gone: {', '.join(sorted(self._seen))} were in "
                f"{self._class_dir} earlier and are not now (driver unloaded or HCAs lost?)"
            )
        where = "is empty" if class_dir_exists else "does not exist"
        return rdma_verdict(self._pci_scan(), f"{self._class_dir} {where}")

    def _pci_scan(self) -> PciScan:
        # PCI functions rarely come and go, and RDMA devices appearing is seen on the very
        # next poll anyway: rescanning the whole bus every poll would only cost time.
        if self._pci is None or self._polls_since_pci_scan >= self._relist_every:
            self._pci = scan_pci(self._root)
            self._polls_since_pci_scan = 0
        self._polls_since_pci_scan += 1
        return self._pci

    def _note_seen(self, names: Sequence[str]) -> None:
        # One device gone while others stay is logged, not paged: the others are still
        # served, and a device renamed into a bond looks the same.
        gone = self._seen.difference(names)
        if gone:
            self._log_once(self._class_dir, f"gone: {', '.join(sorted(gone))}", logging.WARNING)
        self._seen.update(names)

    # --- listing (cached) --------------------------------------------------------------

    def _current_gpu_bus_ids(self) -> tuple[str, ...]:
        if self._gpu_bus_ids is None:
            return ()
        try:
            return tuple(self._gpu_bus_ids())
        except Exception as exc:  # the GPU side failing must not take the IB ports down
            self._log_once("gpu_bus_ids", type(exc).__name__, logging.WARNING)
            return ()

    # --- reading -----------------------------------------------------------------------

    def _read_device(self, listing: DeviceListing) -> InfinibandDevice | None:
        for path, reason in listing.unlisted:
            # the values in it are lost on this poll like a garbage file's value is
            self.parse_errors_total += 1
            self._log_once(path, reason, logging.WARNING)
        ports = tuple(
            self._read_port(listing.name, port, listing.nearest_gpus) for port in listing.ports
        )
        device = InfinibandDevice(
            name=listing.name,
            board_id=self._static_text(os.path.join(listing.path, "board_id")),
            firmware_version=self._static_text(os.path.join(listing.path, "fw_ver")),
            hca_type=self._static_text(os.path.join(listing.path, "hca_type")),
            node_guid=self._static_text(os.path.join(listing.path, "node_guid")),
            pci_path=listing.pci_path,
            ports=ports,
        )
        if not os.path.isdir(listing.path):
            # Unplugged while we read it: whatever we got is a mix of before and after.
            self._log_once(listing.path, "device vanished", logging.INFO)
            self._listing.invalidate()
            return None
        return device

    def _read_port(
        self, device: str, listing: PortListing, near: tuple[int, ...]
    ) -> InfinibandPort:
        state = self._parsed(os.path.join(listing.path, "state"), parse_state)
        phys = self._parsed(os.path.join(listing.path, "phys_state"), parse_state)
        rate_text = self._text(os.path.join(listing.path, "rate"))
        rate = self._parsed_text(os.path.join(listing.path, "rate"), rate_text, parse_rate)
        counters = self._counters(listing.counter_files)
        hw_counters = self._counters(listing.hw_counter_files)
        return InfinibandPort(
            device=device,
            port=listing.name,
            state=state[0] if state else None,
            state_name=state[1] if state else None,
            physical_state=phys[0] if phys else None,
            physical_state_name=phys[1] if phys else None,
            rate_bytes_per_second=rate.bytes_per_second if rate else None,
            rate_text=rate_text,
            link_layer=self._static_text(os.path.join(listing.path, "link_layer")),
            counters=counters,
            hw_counters=hw_counters,
            nearest_gpus=near,
        )

    def _counters(self, files: Sequence[tuple[str, str]]) -> dict[str, int]:
        """Every counter file of a port, by name; the hot loop of a poll (most of its
        reads), so the read and the parse are inlined and a failure goes to the same
        handlers as `_parsed`'s."""
        values: dict[str, int] = {}
        read = self._read
        for name, path in files:
            try:
                raw = read(path)
            except OSError as exc:
                self._read_failed(path, exc)
                continue
            try:
                values[name] = parse_counter(raw)
            except NotAValue as exc:
                self._not_a_value(path, exc)
        return values

    def _raw(self, path: str) -> str | None:
        try:
            return self._read(path)
        except OSError as exc:
            self._read_failed(path, exc)
            return None

    def _read_failed(self, path: str, exc: OSError) -> None:
        if isinstance(exc, FileNotFoundError):
            # Listed a moment ago: hot-unplug, or a driver that dropped the attribute.
            self._log_once(path, "missing", logging.DEBUG)
            if not self._listing.known_absent(path):
                self._listing.invalidate()
        elif isinstance(exc, NotARegularFile):
            self._log_once(path, exc.kind, logging.WARNING)
        elif isinstance(exc, PermissionError):
            self._log_once(path, "permission denied", logging.WARNING)
        else:
            # The kernel returns EIO/EINVAL when the PMA query behind a counter fails.
            reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
            self._log_once(path, reason, logging.WARNING)

    def _text(self, path: str) -> str | None:
        raw = self._raw(path)
        if raw is None:
            return None
        value = raw.strip()
        return value or None

    def _static_text(self, path: str) -> str | None:
        value = self._static.get(path)
        if value is None:
            value = self._text(path)
            if value is not None:
                self._static[path] = value
        return value

    def _parsed_text(self, path: str, raw: str | None, parse: Callable[[str], _T]) -> _T | None:
        if raw is None:
            return None
        try:
            return parse(raw)
        except NotAValue as exc:
            self._not_a_value(path, exc)
            return None

    def _not_a_value(self, path: str, exc: NotAValue) -> None:
        # "N/A (no PMA)" is the kernel saying there is no value, not a value gone bad
        if exc.reason == "not available":
            self._log_once(path, exc.reason, logging.INFO)
        else:
            self.parse_errors_total += 1
            self._log_once(path, exc.reason, logging.WARNING)

    def _parsed(self, path: str, parse: Callable[[str], _T]) -> _T | None:
        return self._parsed_text(path, self._raw(path), parse)

    def _log_once(self, path: str, reason: str, level: int) -> None:
        key = (path, reason)
        if key in self._logged or len(self._logged) >= _MAX_LOGGED:
            return
        self._logged.add(key)
        log.log(level, "infiniband: %s: %s (further occurrences not logged)", path, reason)
