"""A cluster inventory (CSV or YAML) -> Prometheus file_sd target files.

The inventory is the address plan an ops team already keeps (hostname, in-band address,
node class, rack, like the node/IB/IPMI tables of a cluster hand-over document). nvwatch
writes one file_sd JSON per node class, `nvwatch-<node_class>.json`: a class is what
the mixin's expectations (GPUs, NVLinks, IB ports) key on, and one file per class lets
an operator take a whole class out of scraping, or add a new one, without touching the
others. Each target carries `cluster`, `rack`, `node_class` and `instance` (the
hostname, so alerts name the node, not its address).

Every problem is a `ConfigError` with one line naming the file, the row and the fix.
"""

from __future__ import annotations

import csv
import ipaddress
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvwatch.common.yaml_safe import ConfigError, key_text, load_yaml_text, read_config_text, shown

REQUIRED_COLUMNS = ("hostname", "address", "node_class", "rack")
OPTIONAL_COLUMNS = ("cluster",)
DEFAULT_CLUSTER = "default"
DEFAULT_PORT = 9477
FILE_PREFIX = "nvwatch-"
# An address plan of 100,000 nodes is a few megabytes of CSV; a bigger file is a mistake
# (or worse), and PyYAML would take minutes over it.
MAX_INVENTORY_BYTES = 16 << 20

# RFC 1123 host names: labels of letters, digits and inner dashes, dot-separated
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")
# Label values end up in file names (node_class) and in PromQL matchers: keep them plain
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


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


def load_inventory(path: Path) -> list[InventoryNode]:
    """Read and validate `path` (.csv, .yaml or .yml)."""
    suffix = path.suffix.lower()
    text = read_config_text(path, "inventory", MAX_INVENTORY_BYTES)
    if suffix == ".csv":
        rows = _csv_rows(path, text)
    elif suffix in (".yaml", ".yml"):
        rows = _yaml_rows(path, text)
    else:
        raise ConfigError(
            f"inventory {path}: unknown format {suffix or '(none)'}; use .csv or .yaml"
        )
    return validate(path, rows)


def _csv_rows(path: Path, text: str) -> list[tuple[int, dict[str, str]]]:
    # comment lines (#) are allowed: address plans carry notes
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    lines = [(n, line) for n, line in lines if not line.lstrip().startswith("#")]
    if not lines:
        raise ConfigError(f"inventory {path} is empty")
    reader = csv.reader([line for _, line in lines], skipinitialspace=True)
    try:
        parsed = list(reader)
    except csv.Error as exc:
        raise ConfigError(f"inventory {path}: not valid CSV: {exc}") from exc
    header = [h.strip().lower() for h in parsed[0]]
    _check_columns(path, header)
    rows: list[tuple[int, dict[str, str]]] = []
    for (number, _), values in zip(lines[1:], parsed[1:], strict=False):
        if len(values) > len(header):
            raise ConfigError(
                f"{path}:{number}: {len(values)} fields but the header has {len(header)}"
            )
        rows.append((number, dict(zip(header, (v.strip() for v in values), strict=False))))
    return rows


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
        row = {str(k).strip().lower(): "" if v is None else str(v).strip() for k, v in item.items()}
        if default_cluster is not None:
            row.setdefault("cluster", default_cluster)
        rows.append((number, row))
    _check_columns(path, sorted({key for _, row in rows for key in row}), rows=rows)
    return rows


def _check_columns(
    path: Path, header: Sequence[str], rows: Sequence[tuple[int, Mapping[str, str]]] = ()
) -> None:
    unknown = [h for h in header if h not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        raise ConfigError(
            f"inventory {path}: unknown column(s) {', '.join(map(key_text, unknown))} "
            f"(known: {', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)})"
        )
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
        nodes.append(
            InventoryNode(hostname, address, row["node_class"], row["rack"], cluster, line)
        )
    if not nodes:
        raise ConfigError(f"inventory {path} has a header but no nodes")
    return nodes


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
    files = file_sd_by_class(nodes, port)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, groups in sorted(files.items()):
        path = out_dir / name
        write_json_atomic(path, groups)
        written.append(path)
    for stale in out_dir.glob(f"{FILE_PREFIX}*.json"):
        if stale.name not in files:
            stale.unlink()
    return written
