"""The cached listing of /sys/class/infiniband: devices, ports and their counter files.

Listing every directory on every poll would cost more than reading the counters, so the
listing is kept and rebuilt only when the device list or the class directory's mtime
changes (hot-plug), when the GPUs' bus ids change (affinity), when the source reports a
listed file gone (`invalidate`), or every `relist_every` polls (new counter files).

An entry of class/infiniband or of a device's ports/ that is not a directory (a symbolic
link loop, a dangling link, a file) is skipped and reported in `skipped`, for the source
to log once: listed, it was a device or port of empty labels, relisted on every poll. A
directory that exists and cannot be listed (EACCES, EIO, a file named `ports`) is kept
in its device's `unlisted`, which the source counts as a parse error on every poll:
before, an unreadable ports/ dropped every series of its device without a word.

A file that vanishes stays in the listing of its port, marked `absent`, for as long as
its device is there: it is opened on every poll, so the poll after it returns reads it
again. Dropping it at the relist that noticed it gone would keep it missing until the
next periodic relist (5 minutes at the default interval) for no gain: a failed open of
a missing file is as cheap as the stat that would be needed to notice it back. Reading
an `absent` path that is still missing does not invalidate the listing again, so a
counter that stays gone costs one failed open per poll, not a relist per poll.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from nvwatch.agent.sources.infiniband_parse import (
    EXTENDED_COUNTERS,
    HW_COUNTER_NOT_COUNTERS,
    READ_COUNTERS,
)
from nvwatch.agent.sources.pci_affinity import PciPath, Resolver, nearest_gpus

# The attributes read by name rather than found by listing; one missing at listing time
# (an old driver, a RoCE port without phys_state) is `absent` and does not invalidate.
DEVICE_ATTRIBUTES = ("board_id", "fw_ver", "hca_type", "node_guid")
PORT_ATTRIBUTES = ("state", "phys_state", "rate", "link_layer")


@dataclass(frozen=True)
class PortListing:
    name: str
    path: str
    counter_files: tuple[tuple[str, str], ...]  # (counter name, file path), ext applied
    hw_counter_files: tuple[tuple[str, str], ...]
    absent: frozenset[str] = frozenset()  # paths known to the port but missing when listed


@dataclass(frozen=True)
class DeviceListing:
    name: str
    path: str
    pci_path: PciPath | None
    nearest_gpus: tuple[int, ...]  # GPUs nearest the device, the same for every port
    ports: tuple[PortListing, ...]
    absent: frozenset[str] = frozenset()  # device attributes missing when listed
    # directories of the device (ports/, a port's counters/...) that exist and could not
    # be listed, with why: every value in them is missing
    unlisted: tuple[tuple[str, str], ...] = ()


def visible_files_strict(directory: str) -> list[str]:
    """File names in a directory, sorted; dotfiles (a writer's temp files) skipped.
    OSError when it cannot be listed."""
    return sorted(n for n in os.listdir(directory) if not n.startswith("."))


def listed(directory: str, unlisted: list[tuple[str, str]]) -> list[str]:
    """visible_files_strict, adding to `unlisted` a directory that is there and cannot
    be listed (with why) instead of raising.

    A missing one is not an error: counters_ext/ and hw_counters/ exist only on some
    drivers, and a device unplugged mid-listing is noticed when it is read.
    """
    try:
        return visible_files_strict(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        unlisted.append((directory, f"cannot list: {_reason(exc)}"))
        return []


def not_a_directory(path: str) -> tuple[str, int] | None:
    """Why an entry that should be a device or port directory is not one (with the log
    level it deserves), or None when it is one."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        # a dangling link, or a device unplugged since the directory was listed
        return "missing (a dangling link, or unplugged): skipped", logging.INFO
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop: skipped", logging.WARNING
        return f"{_reason(exc)}: skipped", logging.WARNING
    return None if stat.S_ISDIR(mode) else ("not a directory: skipped", logging.WARNING)


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else type(exc).__name__


def port_sort_key(name: str) -> tuple[int, str]:
    return (int(name), name) if name.isdigit() else (1 << 30, name)


class ListingCache:
    """The listing of one class/infiniband directory, rebuilt only when it must be."""

    def __init__(
        self,
        class_dir: str,
        resolver: Resolver,
        relist_every: int,
        hw_counters: frozenset[str] | None = None,
    ) -> None:
        self._class_dir = class_dir
        # hw_counters names to list (None: all): a file not exported is never read
        self._hw_counters = hw_counters
        self._resolver = resolver
        self._relist_every = relist_every
        self._listing: tuple[DeviceListing, ...] | None = None
        self._key: tuple[object, ...] | None = None
        self._polls_since_list = 0
        self._absent: frozenset[str] = frozenset()
        # entries of the last listing that are no device or port directory: (path, why,
        # log level), for the source to log
        self.skipped: tuple[tuple[str, str, int], ...] = ()

    def devices(
        self, names: tuple[str, ...], mtime: int, bus_ids: tuple[str, ...]
    ) -> tuple[tuple[DeviceListing, ...], bool]:
        """The listing for this poll, and whether it was rebuilt for it."""
        key = (names, mtime, bus_ids)
        self._polls_since_list += 1
        if (
            self._listing is not None
            and key == self._key
            and self._polls_since_list < self._relist_every
        ):
            return self._listing, False
        self._listing = self._list(names, bus_ids, self._listing or ())
        self._key = key
        self._polls_since_list = 0
        self._absent = frozenset(path for device in self._listing for path in _absent_paths(device))
        return self._listing, True

    def invalidate(self) -> None:
        """A listed file or device is gone: list again on the next poll."""
        self._key = None

    def known_absent(self, path: str) -> bool:
        """True when `path` was already missing at the last listing."""
        return path in self._absent

    def clear(self) -> None:
        self._listing = None
        self._key = None
        self._absent = frozenset()

    def _list(
        self,
        names: Sequence[str],
        bus_ids: Sequence[str],
        previous: tuple[DeviceListing, ...],
    ) -> tuple[DeviceListing, ...]:
        gpu_paths = [self._resolver.gpu_path(bus_id) for bus_id in bus_ids]
        before = {(d.name, p.name): p for d in previous for p in d.ports}
        listings = []
        skipped: list[tuple[str, str, int]] = []
        for name in names:
            device_dir = os.path.join(self._class_dir, name)
            if self._skipped(device_dir, skipped):
                continue
            pci_path = self._resolver.hca_path(name)
            ports_dir = os.path.join(device_dir, "ports")
            unlisted: list[tuple[str, str]] = []
            ports = tuple(
                _list_port(
                    port,
                    os.path.join(ports_dir, port),
                    before.get((name, port)),
                    self._hw_counters,
                    unlisted,
                )
                for port in sorted(listed(ports_dir, unlisted), key=port_sort_key)
                if not self._skipped(os.path.join(ports_dir, port), skipped)
            )
            present = set(listed(device_dir, unlisted))
            listings.append(
                DeviceListing(
                    name=name,
                    path=device_dir,
                    pci_path=pci_path,
                    nearest_gpus=tuple(nearest_gpus(pci_path, gpu_paths)) if pci_path else (),
                    ports=ports,
                    absent=frozenset(
                        os.path.join(device_dir, a) for a in DEVICE_ATTRIBUTES if a not in present
                    ),
                    unlisted=tuple(unlisted),
                )
            )
        self.skipped = tuple(skipped)
        return tuple(listings)

    @staticmethod
    def _skipped(path: str, skipped: list[tuple[str, str, int]]) -> bool:
        why = not_a_directory(path)
        if why is not None:
            skipped.append((path, *why))
        return why is not None


def _absent_paths(device: DeviceListing) -> frozenset[str]:
    return device.absent.union(*(port.absent for port in device.ports))


def _list_port(
    port: str,
    port_dir: str,
    previous: PortListing | None,
    wanted: frozenset[str] | None,
    unlisted: list[tuple[str, str]],
) -> PortListing:
    files: dict[str, str] = {}
    counters_dir = os.path.join(port_dir, "counters")
    for name in listed(counters_dir, unlisted):
        if name in READ_COUNTERS:
            files[name] = os.path.join(counters_dir, name)
    ext_dir = os.path.join(port_dir, "counters_ext")
    for name in listed(ext_dir, unlisted):
        if EXTENDED_COUNTERS.get(name) in READ_COUNTERS:
            files[EXTENDED_COUNTERS[name]] = os.path.join(ext_dir, name)
    hw_dir = os.path.join(port_dir, "hw_counters")
    hw_files = {
        name: os.path.join(hw_dir, name)
        for name in listed(hw_dir, unlisted)
        if name not in HW_COUNTER_NOT_COUNTERS and (wanted is None or name in wanted)
    }
    present = set(listed(port_dir, unlisted))
    absent = {os.path.join(port_dir, a) for a in PORT_ATTRIBUTES if a not in present}
    if previous is not None:
        # files this port had before and has not now: kept, so their return is seen
        absent.update(_keep_vanished(files, previous.counter_files))
        absent.update(_keep_vanished(hw_files, previous.hw_counter_files))
    return PortListing(
        name=port,
        path=port_dir,
        counter_files=tuple(sorted(files.items())),
        hw_counter_files=tuple(sorted(hw_files.items())),
        absent=frozenset(absent),
    )


def _keep_vanished(files: dict[str, str], before: Sequence[tuple[str, str]]) -> list[str]:
    """Add to `files` each (name, path) of `before` it lacks; return the paths added."""
    added = []
    for name, path in before:
        if name not in files:
            files[name] = path
            added.append(path)
    return added
