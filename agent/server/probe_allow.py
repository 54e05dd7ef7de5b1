"""`--bmc-allow`: the targets /probe may send IPMI to, when a site lists them.

ipmi_exporter sends IPMI to any `target` it is given, so anything that can reach the
exporter can aim its UDP packets (and its user and password, for a session) at any host.
With an allowlist a target off it is answered 403 before anything is sent. Entries,
comma-separated:

- an IP address (`10.0.0.5`, `fd00::5`) or a network (`10.0.0.0/16`, `fd00::/64`);
- a host name (`bmc-7.mgmt`), allowed as written and never resolved: a name as target
  is allowed only when it is on the list literally, since resolving it to compare
  addresses would be a DNS query on behalf of a stranger (and its answer can change);
- a file_sd JSON file, as `nvwatch inventory` writes for BMCs (`bmc-<class>.json` in
  its output directory, globs allowed): every target of every group in it. Such files
  are stat()ed at most once per `RECHECK_S` when a probe comes, and read again when
  one changed, appeared or went, so an inventory run changes what may be probed without a restart.

A malformed entry, or a file that cannot be read at start, is one ConfigError line (exit
2). A file that turns bad later keeps what it allowed before, with one warning; a file
that is gone allows nothing any more.
"""

from __future__ import annotations

import glob
import ipaddress
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nvwatch.agent.server.probe import ProbeError, parse_target
from nvwatch.common.yaml_safe import ConfigError, read_config_text, shown

log = logging.getLogger(__name__)

ALLOW_SYNTAX = (
    "IP addresses, networks (10.0.0.0/16, fd00::/64), host names (matched as written, "
    "never resolved) or file_sd JSON files (targets/bmc-*.json)"
)
# a file_sd group of one BMC is ~200 bytes: 4 MiB holds ~20,000 BMCs, and is read on
# the server's loop thread (only when the file changed)
MAX_FILE_BYTES = 4 << 20
RECHECK_S = 1.0
_WHAT = "--bmc-allow file"
_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_HOSTNAME = re.compile(rf"{_LABEL}(\.{_LABEL})*\.?")

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Allowed:
    """What a set of entries, or one file, allows."""

    networks: tuple[IpNetwork, ...] = ()
    addresses: frozenset[IpAddress] = frozenset()
    names: frozenset[str] = frozenset()

    def permits(self, host: str) -> bool:
        address = _address(host)
        if address is None:
            return _name(host) in self.names
        return address in self.addresses or any(address in net for net in self.networks)


@dataclass(frozen=True)
class AllowEntries:
    """The flag's entries, parsed: what they allow directly, and the files to read."""

    allowed: Allowed
    files: tuple[str, ...]


def parse_allow(text: str) -> AllowEntries:
    """The entries of `--bmc-allow` (comma-separated); ConfigError, one line, if bad."""
    networks: list[IpNetwork] = []
    names: set[str] = set()
    files: list[str] = []
    entries = [entry.strip() for entry in text.split(",")]
    if not any(entries):
        raise ConfigError(f"--bmc-allow: no entry; give {ALLOW_SYNTAX}")
    for entry in entries:
        if entry.endswith(".json"):
            files.append(entry)
        elif (network := _network(entry)) is not None:
            networks.append(network)
        elif host_name(entry):
            names.add(_name(entry))
        else:
            raise ConfigError(f"--bmc-allow: {shown(entry)} is not one of {ALLOW_SYNTAX}")
    return AllowEntries(Allowed(tuple(networks), frozenset(), frozenset(names)), tuple(files))


def _network(entry: str) -> IpNetwork | None:
    """`entry` as an address (a network of one) or a network; None if it is neither;
    ConfigError for a network with host bits set (10.0.0.5/16: which was meant?)."""
    try:
        return ipaddress.ip_network(entry)
    except ValueError as exc:
        if "/" in entry and "host bits set" in str(exc):
            raise ConfigError(f"--bmc-allow: {shown(entry)}: {exc}") from None
        return None


def host_name(text: str) -> bool:
    """A host name as written, RFC 1123 labels; not one the resolver would read as an
    IPv4 address (`10.1`, `0x7f000001`), which an allowed name must never turn into."""
    if len(text) > 253 or not _HOSTNAME.fullmatch(text):
        return False
    try:
        socket.inet_aton(text)
    except OSError:
        return not text.rstrip(".").rsplit(".", 1)[-1].isdigit()
    return False


def _name(host: str) -> str:
    # DNS names are case-blind, and `bmc.` is `bmc`, absolute
    return host.lower().removesuffix(".")


def _address(host: str) -> IpAddress | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    # ::ffff:10.0.0.5 goes to 10.0.0.5: it is judged as that address
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return mapped or address


def targets_of(text: str, path: str) -> Allowed:
    """What a file_sd JSON file allows: the host of every target of every group.
    ConfigError, one line naming the file, when it is not file_sd JSON."""
    try:
        groups = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{_WHAT} {path}: not JSON: {exc}") from None
    if not isinstance(groups, list) or not all(
        isinstance(g, dict) and isinstance(g.get("targets", []), list) for g in groups
    ):
        raise ConfigError(f"{_WHAT} {path}: expected file_sd's list of {{targets: [...]}}")
    addresses: set[IpAddress] = set()
    names: set[str] = set()
    for target in (t for group in groups for t in group.get("targets", [])):
        host = _host_of(target)
        if host is None:
            log.warning("%s %s: target %s is no BMC address; skipped", _WHAT, path, shown(target))
        elif (address := _address(host)) is not None:
            addresses.add(address)
        else:
            names.add(_name(host))
    return Allowed((), frozenset(addresses), frozenset(names))


def _host_of(target: object) -> str | None:
    if not isinstance(target, str):
        return None
    try:
        host = parse_target(target).host
    except ProbeError:
        return None
    return host if _address(host) is not None or host_name(host) else None


@dataclass
class _File:
    stamp: tuple[int, int, int]  # mtime (ns), size, inode: a change in any is a new file
    allowed: Allowed = field(default_factory=Allowed)


class ProbeAllowlist:
    """The targets /probe may read: the flag's addresses, networks and names, and the
    file_sd files' targets, read again when a file changes."""

    def __init__(self, entries: AllowEntries, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries = entries
        self._clock = clock
        self._files: dict[str, _File] = {}
        self._checked = clock()
        self._refresh(strict=True)

    def permits(self, host: str) -> bool:
        """Whether `host` (a Target's host) may be sent IPMI."""
        now = self._clock()
        if self._entries.files and now - self._checked >= RECHECK_S:
            self._checked = now
            self._refresh(strict=False)
        if self._entries.allowed.permits(host):
            return True
        return any(file.allowed.permits(host) for file in self._files.values())

    def _refresh(self, strict: bool) -> None:
        """Read the files that changed; at start (`strict`) any failure is ConfigError."""
        seen: dict[str, _File] = {}
        for path in _paths(self._entries.files):
            try:
                info = os.stat(path)
            except OSError as exc:
                if strict:
                    raise ConfigError(f"cannot read {_WHAT} {path}: {exc.strerror}") from None
                continue  # gone: it allows nothing
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
            known = self._files.get(path)
            if known is not None and known.stamp == stamp:
                seen[path] = known
                continue
            seen[path] = _File(stamp, _read(path, strict, known))
        self._files = seen


def _paths(patterns: Iterable[str]) -> list[str]:
    """The files the entries name now: a glob's matches, or the path as given."""
    paths: list[str] = []
    for pattern in patterns:
        paths += sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    return paths


def _read(path: str, strict: bool, known: _File | None) -> Allowed:
    try:
        return targets_of(read_config_text(Path(path), _WHAT, MAX_FILE_BYTES), path)
    except ConfigError as exc:
        if strict:
            raise
        # mid-edit or broken: what it allowed before stands until it is fixed
        log.warning("%s; keeping what it allowed before", exc)
        return known.allowed if known is not None else Allowed()
