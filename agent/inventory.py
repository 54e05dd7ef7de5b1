"""A cluster inventory (CSV or YAML) -> Prometheus file_sd target files.

The inventory is the address plan an ops team already keeps (hostname, in-band address,
node class, rack, like the node/IB/IPMI tables of a cluster hand-over document). nvwatch
writes one file_sd JSON per node class, `nvwatch-<node_class>.json`: a class is what
the mixin's expectations (GPUs, NVLinks, IB ports) key on, and one file per class lets
an operator take a whole class out of scraping, or add a new one, without touching the
others. Each target carries `cluster`, `rack`, `node_class` and `instance` (the
hostname, so alerts name the node, not its address).

The optional `bmc` column is the node's BMC address on the IPMI management network
(`bmc_module` the BMC config module to read it with, where it is not the default); the
BMC targets and their scrape job are agent/inventory_bmc.py's.

Every problem is a `ConfigError` with one line naming the file, the row and the fix.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvwatch.agent.inventory_csv import Record, csv_records
from nvwatch.common.yaml_safe import ConfigError, key_text, load_yaml_text, read_config_text, shown

REQUIRED_COLUMNS = ("hostname", "address", "node_class", "rack")
OPTIONAL_COLUMNS = ("cluster", "bmc", "bmc_module")
DEFAULT_CLUSTER = "default"
DEFAULT_PORT = 9477
IPMI_PORT = 623  # RMCP's UDP port, where a BMC listens unless the plan says otherwise
FILE_PREFIX = "nvwatch-"
# An address plan of 100,000 nodes is a few megabytes of CSV; a bigger file is a mistake
# (or worse), and PyYAML would take minutes over it.
MAX_INVENTORY_BYTES = 16 << 20

# RFC 1123 host names: labels of letters, digits and inner dashes, dot-separated
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")
# Label values end up in file names (node_class) and in PromQL matchers: keep them plain
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def plain_name(value: str) -> bool:
    """A label value plain enough for file names and PromQL matchers."""
    return bool(_NAME.match(value))


def write_json_atomic(path: Path, data: object) -> None:
    """Prometheus re-reads file_sd files on change: it must never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@dataclass(frozen=True)
class InventoryNode:
    hostname: str
    address: str  # an IP address, normalised (IPv6 compressed)
    node_class: str
    rack: str
    cluster: str
    line: int  # where it came from, for error messages
    bmc: str | None = None  # the BMC's address, `host[:port]` as the probe's target takes it
    bmc_module: str | None = None  # its BMC config module; None: the command's default


def load_inventory(path: Path) -> list[InventoryNode]:
    """Read and validate `path` (.csv, .yaml or .yml)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        # row by row: a mistake is found with only the rows before it in memory
        with csv_records(path, MAX_INVENTORY_BYTES) as records:
            return validate(path, _csv_rows(path, records))
    if suffix in (".yaml", ".yml"):
        text = read_config_text(path, "inventory", MAX_INVENTORY_BYTES)
        return validate(path, _yaml_rows(path, text))
    raise ConfigError(f"inventory {path}: unknown format {suffix or '(none)'}; use .csv or .yaml")


def _csv_rows(path: Path, records: Iterator[Record]) -> Iterator[tuple[int, dict[str, str]]]:
    first = next(records, None)
    if first is None:
        raise ConfigError(f"inventory {path} is empty")
    header = [h.strip().lower() for h in first[1]]
    _check_columns(path, header)
    for number, values in records:
        if len(values) > len(header):
            raise ConfigError(
                f"{path}:{number}: {len(values)} fields but the header has {len(header)}"
            )
        yield number, dict(zip(header, (v.strip() for v in values), strict=False))


def _yaml_rows(path: Path, text: str) -> list[tuple[int, dict[str, str]]]:
    """Either a list of nodes, or {cluster: NAME, nodes: [...]} for a one-cluster file."""
    # the agent's one loader: no aliases, bounded nesting and integers, one-line errors
    data = load_yaml_text(text, path, "inventory")
    default_cluster: str | None = None
    if isinstance(data, dict):
        unknown = sorted((key for key in data if key not in ("cluster", "nodes")), key=str)
        if unknown:
            raise ConfigError(
                f"inventory {path}: unknown key(s) {', '.join(map(key_text, unknown))}"
            )
        default_cluster = None if data.get("cluster") is None else str(data["cluster"])
        data = data.get("nodes")
    if not isinstance(data, list) or not data:
        raise ConfigError(f"inventory {path}: expected a list of nodes (or a `nodes:` list)")
    rows: list[tuple[int, dict[str, str]]] = []
    for number, item in enumerate(data, 1):
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: node #{number} is not a mapping of column: value")
        row = _yaml_row(path, number, item)
        if default_cluster is not None:
            row.setdefault("cluster", default_cluster)
        rows.append((number, row))
    _check_columns(path, sorted({key for _, row in rows for key in row}), rows=rows)
    return rows


def _yaml_row(path: Path, number: int, item: Mapping[Any, Any]) -> dict[str, str]:
    row: dict[str, str] = {}
    for key, value in item.items():
        column = str(key).strip().lower()
        if column in row:
            # `Rack` and `rack` are two keys to YAML and one column here: which one counts?
            raise ConfigError(f"{path}: node #{number} gives {key_text(column)} twice")
        row[column] = "" if value is None else str(value).strip()
    return row


def _check_columns(
    path: Path, header: Sequence[str], rows: Sequence[tuple[int, Mapping[str, str]]] = ()
) -> None:
    unknown = [h for h in header if h not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        raise ConfigError(
            f"inventory {path}: unknown column(s) {', '.join(map(key_text, unknown))} "
            f"(known: {', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)})"
        )
    seen: set[str] = set()
    for column in header:
        if column in seen:  # the second would silently replace the first in every row
            raise ConfigError(f"inventory {path}: column {key_text(column)} given twice")
        seen.add(column)
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ConfigError(f"inventory {path}: missing column(s) {', '.join(missing)}")
    for number, row in rows:
        absent = [c for c in REQUIRED_COLUMNS if c not in row]
        if absent:
            raise ConfigError(f"{path}: node #{number} lacks {', '.join(absent)}")


def validate(path: Path, rows: Iterable[tuple[int, Mapping[str, str]]]) -> list[InventoryNode]:
    nodes: list[InventoryNode] = []
    hostnames: dict[str, int] = {}
    addresses: dict[str, int] = {}
    bmcs: dict[str, int] = {}
    for line, row in rows:
        where = f"{path}:{line}"
        for column in REQUIRED_COLUMNS:
            if not row.get(column):
                raise ConfigError(f"{where}: empty {column}")
        hostname = row["hostname"]
        if not _HOSTNAME.match(hostname):
            raise ConfigError(f"{where}: invalid hostname {shown(hostname)}")
        try:
            address = str(ipaddress.ip_address(row["address"]))
        except ValueError:
            raise ConfigError(
                f"{where}: invalid address {shown(row['address'])} for {hostname}: use an IPv4 or "
                "IPv6 address"
            ) from None
        cluster = row.get("cluster") or DEFAULT_CLUSTER
        labels = {"node_class": row["node_class"], "rack": row["rack"], "cluster": cluster}
        for column, value in labels.items():
            if not _NAME.match(value):
                raise ConfigError(
                    f"{where}: invalid {column} {shown(value)}: letters, digits, '-', '_', '.' only"
                )
        key = hostname.lower()  # DNS names are case-insensitive
        if key in hostnames:
            raise ConfigError(
                f"{where}: duplicate hostname {hostname} (first on line {hostnames[key]})"
            )
        if address in addresses:
            raise ConfigError(
                f"{where}: duplicate address {address} (first on line {addresses[address]})"
            )
        hostnames[key] = line
        addresses[address] = line
        bmc, bmc_module = _bmc_columns(where, line, hostname, row, bmcs)
        nodes.append(
            InventoryNode(
                hostname, address, row["node_class"], row["rack"], cluster, line, bmc, bmc_module
            )
        )
    if not nodes:
        raise ConfigError(f"inventory {path} has a header but no nodes")
    return nodes


def _bmc_columns(
    where: str, line: int, hostname: str, row: Mapping[str, str], seen: dict[str, int]
) -> tuple[str | None, str | None]:
    """The node's (bmc, bmc_module); (None, None) for a node without a BMC address."""
    raw, module = row.get("bmc") or "", row.get("bmc_module") or ""
    if not raw:
        if module:
            raise ConfigError(
                f"{where}: bmc_module {shown(module)} for {hostname}, which has no bmc"
            )
        return None, None
    try:
        bmc = bmc_address(raw)
    except ValueError as exc:
        raise ConfigError(f"{where}: invalid bmc {shown(raw)} for {hostname}: {exc}") from None
    if bmc in seen:
        raise ConfigError(f"{where}: duplicate bmc {bmc} (first on line {seen[bmc]})")
    if module and not plain_name(module):
        raise ConfigError(
            f"{where}: invalid bmc_module {shown(module)}: letters, digits, '-', '_', '.' only"
        )
    seen[bmc] = line
    return bmc, module or None


def bmc_address(value: str) -> str:
    """`host`, `host:port`, `[v6]` or `[v6]:port` as the BMC probe's `target` takes it:
    an IP address (normalised) or a host name, and an optional port 1..65535 (IPMI's 623
    when none). An IPv6 address is always written with its port, so the colons of the
    address are never read as one."""
    host, port = _split_host_port(value.strip())
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        # a name of digits and dots is a mistyped IPv4 address (RFC 3696: no all-numeric
        # top-level label), not a host name
        if not _HOSTNAME.match(host) or host.rsplit(".", 1)[-1].isdigit():
            raise ValueError("use an IP address or a host name, with :port if not 623") from None
        return host if port is None else f"{host}:{port}"
    if ip.version == 6:
        return f"[{ip}]:{IPMI_PORT if port is None else port}"
    return str(ip) if port is None else f"{ip}:{port}"


def _split_host_port(value: str) -> tuple[str, int | None]:
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError("an IPv6 address in brackets is [address] or [address]:port")
        return host, _port(rest[1:]) if rest else None
    if value.count(":") == 1:  # more than one: an IPv6 address without a port
        host, port = value.split(":")
        return host, _port(port)
    return value, None


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"port {shown(text)} is not 1..65535")
    return int(text)


def target(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"{host}:{port}"


def file_sd_by_class(nodes: Sequence[InventoryNode], port: int) -> dict[str, list[dict[str, Any]]]:
    """File name -> file_sd target groups, one file per node class, one group per node."""
    files: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        files.setdefault(f"{FILE_PREFIX}{node.node_class}.json", []).append(
            {
                "targets": [target(node.address, port)],
                "labels": {
                    "cluster": node.cluster,
                    "rack": node.rack,
                    "node_class": node.node_class,
                    "instance": node.hostname,
                },
            }
        )
    return files


def write_file_sd(nodes: Sequence[InventoryNode], out_dir: Path, port: int) -> list[Path]:
    """Write the files; remove stale `nvwatch-*.json` so a retired class stops being scraped."""
    if not 1 <= port <= 65535:
        raise ConfigError(f"invalid port {port}: use 1..65535")
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_target_files(file_sd_by_class(nodes, port), out_dir, FILE_PREFIX)


def write_target_files(
    files: Mapping[str, list[dict[str, Any]]], out_dir: Path, prefix: str
) -> list[Path]:
    """Each file of target groups written whole; any other `prefix*.json` in `out_dir`
    removed, so a class that is gone stops being scraped."""
    written = []
    for name, groups in sorted(files.items()):
        path = out_dir / name
        write_json_atomic(path, groups)
        written.append(path)
    for stale in out_dir.glob(f"{prefix}*.json"):
        if stale.name not in files:
            stale.unlink()
    return written
