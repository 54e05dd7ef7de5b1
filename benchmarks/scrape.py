"""/metrics latency under wrk: the full simulated agent, and node_exporter side by side.

Every server is a separate process on 127.0.0.1, started and killed here; wrk is a
separate process too, so the client's CPU is never counted as the server's.
"""

from __future__ import annotations

import gzip as gzip_lib
import shutil
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import fetch, nvwatch_command, running, scratch_dir
from benchmarks.harness import count_samples
from benchmarks.wrk import WrkResult, run_wrk
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fabric.fabric import SimulatedFabric
from nvwatch.sim.ports import free_port

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
CONNECTIONS = (1, 16, 64)


@dataclass
class ScrapeResult:
    body_bytes: int
    gzip_bytes: int
    samples: int
    url: str = ""
    runs: list[WrkResult] = field(default_factory=list)

    def run(self, connections: int, gzip: bool) -> WrkResult:
        return next(r for r in self.runs if r.connections == connections and r.gzip == gzip)


def _gzip_size(url: str) -> int:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=5.0) as response:
        body: bytes = response.read()
        encoding = response.headers.get("Content-Encoding", "")
    if encoding != "gzip":
        raise RuntimeError(f"{url} ignored Accept-Encoding: gzip")
    gzip_lib.decompress(body)  # a broken gzip body would make the latency meaningless
    return len(body)


def scrape_simulated_agent(
    profile: str,
    connections: Sequence[int],
    duration: float,
    log_dir: Path,
    *,
    gzip_modes: Sequence[bool] = (False, True),
) -> ScrapeResult:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    argv = [
        *nvwatch_command(),
        "serve",
        f"--simulate={profile}",
        f"--listen=127.0.0.1:{port}",
    ]
    log = log_dir / f"nvwatch-serve-{profile}.log"
    with running(argv, url, log=log):
        body = fetch(url)
        result = ScrapeResult(len(body), _gzip_size(url), count_samples(body), url)
        for gzip in gzip_modes:
            for count in connections:
                result.runs.append(run_wrk(url, count, duration, gzip=gzip))
    return result


# --- node_exporter's infiniband collector over the same tree ------------------------------

# node_exporter 1.5 name -> (nvwatch name, extra nvwatch labels). Values must be equal:
# both read the same files, and both export bytes (4-octet words x 4).
_SAME_VALUE: dict[str, tuple[str, dict[str, str]]] = {
    "node_infiniband_port_data_transmitted_bytes_total": (
        "nvwatch_ib_port_transmit_bytes_total",
        {},
    ),
    "node_infiniband_port_data_received_bytes_total": ("nvwatch_ib_port_receive_bytes_total", {}),
    "node_infiniband_port_packets_transmitted_total": (
        "nvwatch_ib_port_transmit_packets_total",
        {},
    ),
    "node_infiniband_port_packets_received_total": ("nvwatch_ib_port_receive_packets_total", {}),
    "node_infiniband_port_transmit_wait_total": ("nvwatch_ib_port_transmit_wait_total", {}),
    "node_infiniband_state_id": ("nvwatch_ib_port_state", {}),
    "node_infiniband_physical_state_id": ("nvwatch_ib_port_physical_state", {}),
    "node_infiniband_rate_bytes_per_second": ("nvwatch_ib_port_rate_bytes_per_second", {}),
}
_ERROR_TYPES = {
    "node_infiniband_symbol_error_total": "symbol",
    "node_infiniband_link_error_recovery_total": "link_error_recovery",
    "node_infiniband_link_downed_total": "link_downed",
    "node_infiniband_port_errors_received_total": "receive",
    "node_infiniband_port_receive_remote_physical_errors_total": "receive_remote_physical",
    "node_infiniband_port_receive_switch_relay_errors_total": "receive_switch_relay",
    "node_infiniband_port_discards_transmitted_total": "transmit_discards",
    "node_infiniband_port_constraint_errors_transmitted_total": "transmit_constraint",
    "node_infiniband_port_constraint_errors_received_total": "receive_constraint",
    "node_infiniband_local_link_integrity_errors_total": "local_link_integrity",
    "node_infiniband_excessive_buffer_overrun_errors_total": "excessive_buffer_overrun",
    "node_infiniband_vl15_dropped_total": "vl15_dropped",
}
for _name, _type in _ERROR_TYPES.items():
    _SAME_VALUE[_name] = ("nvwatch_ib_port_errors_total", {"type": _type})
_INFO_LABELS = ("board_id", "firmware_version", "hca_type")

Key = tuple[str, tuple[tuple[str, str], ...]]


def _samples(text: str) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@dataclass
class Comparison:
    compared: int = 0
    mismatches: list[str] = field(default_factory=list)
    node_exporter_only: list[str] = field(default_factory=list)  # metric names not mapped


def compare_expositions(node_exporter: str, nvwatch: str) -> Comparison:
    """Every node_exporter IB sample that nvwatch also exports must carry the same value."""
    ne = _samples(node_exporter)
    nv = _samples(nvwatch)
    result = Comparison()
    unmapped: set[str] = set()
    for (name, labels), value in sorted(ne.items()):
        if not name.startswith("node_infiniband_"):
            continue
        label_map = dict(labels)
        if name == "node_infiniband_info":
            wanted = {k: label_map.get(k, "") for k in _INFO_LABELS}
            matches = [
                dict(lbl)
                for (n, lbl) in nv
                if n == "nvwatch_ib_info" and dict(lbl).get("device") == label_map.get("device")
            ]
            result.compared += 1
            if not matches or any(matches[0].get(k, "") != v for k, v in wanted.items()):
                result.mismatches.append(f"{name}{label_map}: nvwatch_ib_info {matches}")
            continue
        if name not in _SAME_VALUE:
            unmapped.add(name)
            continue
        target, extra = _SAME_VALUE[name]
        key = (target, tuple(sorted({**label_map, **extra}.items())))
        result.compared += 1
        if key not in nv:
            result.mismatches.append(f"{name}{label_map}={value:g}: no {target}{extra} in nvwatch")
        elif nv[key] != value:
            result.mismatches.append(f"{name}{label_map}: node_exporter {value!r} != {nv[key]!r}")
    result.node_exporter_only = sorted(unmapped)
    return result


@dataclass
class SideBySide:
    ports: int
    nvwatch: ScrapeResult
    node_exporter: ScrapeResult
    comparison: Comparison


def node_exporter_side_by_side(
    profile: str,
    connections: Sequence[int],
    duration: float,
    log_dir: Path,
) -> SideBySide:
    """nvwatch (infiniband only) and node_exporter (infiniband only) on one frozen tree."""
    tree = scratch_dir(f"nvwatch-bench-ib-{profile}-")
    try:
        clock = ManualClock(1000.0)
        fabric = SimulatedFabric(profile, tree, clock=clock)
        fabric.write()
        # an hour of the simulated workload so counters are large, then frozen: no
        # advance during the comparison, so both exporters read identical files
        clock.advance(3600.0)
        fabric.tick()
        ports = len(fabric.devices)
        ne_port = free_port()
        ne_url = f"http://127.0.0.1:{ne_port}/metrics"
        ne_argv = [
            NODE_EXPORTER,
            "--collector.disable-defaults",
            "--collector.infiniband",
            f"--path.sysfs={tree}",
            f"--web.listen-address=127.0.0.1:{ne_port}",
        ]
        with running(ne_argv, ne_url, log=log_dir / "node-exporter.log"):
            ne_body = fetch(ne_url)
            ne = ScrapeResult(len(ne_body), _gzip_size(ne_url), count_samples(ne_body), ne_url)
            nv, nv_text = _ib_only(tree, ne, connections, duration, log_dir)
            comparison = compare_expositions(ne_body.decode(), nv_text)
        return SideBySide(ports, nv, ne, comparison)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def _ib_only(
    tree: Path,
    node_exporter: ScrapeResult,
    connections: Sequence[int],
    duration: float,
    log_dir: Path,
) -> tuple[ScrapeResult, str]:
    """nvwatch serving only the IB source from `tree`; returns its result and body.

    node_exporter's wrk runs are taken in turn with nvwatch's, per connection count, so
    drift in the machine's load (a small shared VM) hits both alike.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    argv = [
        *nvwatch_command(),
        "serve",
        "--sources=infiniband",
        f"--sysfs-root={tree}",
        f"--listen=127.0.0.1:{port}",
    ]
    with running(argv, url, log=log_dir / "nvwatch-serve-ib.log"):
        body = fetch(url)
        result = ScrapeResult(len(body), _gzip_size(url), count_samples(body), url)
        for count in connections:
            result.runs.append(run_wrk(url, count, duration))
            node_exporter.runs.append(run_wrk(node_exporter.url, count, duration))
    return result, body.decode()


def node_exporter_version() -> str:
    from benchmarks.common import tool_version

    return tool_version([NODE_EXPORTER, "--version"])


def scratch_logs() -> Path:
    return Path(tempfile.mkdtemp(prefix="nvwatch-bench-logs-"))
