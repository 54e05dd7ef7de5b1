"""The cost of one BMC read: wall and CPU time of IpmiReader against a real BMC (ipmi_sim).

One ipmi_sim on loopback (the tests' BMC: 10 sensors, 2 of them in a shared record, DCMI
through the plug-in) is read N times by one reader, as a probe reads a BMC scrape after
scrape: the first read walks the SDR, the others take the kept records and check the
repository's stamp. A fresh reader per read shows the cost of the walk every time. CPU
is the reading thread's (time.thread_time: python-ipmi's packing, HMAC, AES, parsing).
Also measured: how far past its timeout a read of a BMC that never answers ends, and,
where Debian's prometheus-ipmi-exporter and FreeIPMI are installed, the community
ipmi_exporter's scrape of the same BMC with the same module (its wall time, and the CPU of
the exporter and the FreeIPMI processes it runs). `--update FILE` rewrites this section
of FILE in place; benchmarks/run.py keeps it when it rewrites the rest.

    python -m benchmarks.bmc_read [--reads 200] [--peer-scrapes 20] [--update FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bmc_read_section import BEGIN, END, read_section
from benchmarks.common import (
    cpu_model,
    fetch,
    package_version,
    percentile,
    replace_section,
    running,
    tool_version,
)
from nvwatch.agent.sources.bmc.ipmi import IpmiReader
from nvwatch.agent.sources.bmc.reading import BmcError, Module, Target
from nvwatch.sim.ports import LOOPBACK, free_port
from tests.bmc.ipmi_sim import build_dcmi_plugin, running_ipmi_sim
from tests.bmc.sim_sensors import PASSWORD, USER

MODULE = Module(
    name="bench",
    user=USER,
    password=PASSWORD,
    privilege="admin",
    timeout_s=5.0,
    collectors=frozenset({"ipmi", "dcmi"}),
)
SILENT_TIMEOUT_S = 1.0
PEER_TOOLS = ("prometheus-ipmi-exporter", "ipmimonitoring")
PEER_UP = ('ipmi_up{collector="dcmi"} 1', 'ipmi_up{collector="ipmi"} 1')
# ipmi_exporter's own format with MODULE's user and collectors; the SDR cache goes to the
# run's folder, not $HOME, and shared records are listed one sensor each, as nvwatch does.
# opensesspriv: FreeIPMI cannot get the session's privilege from ipmi_sim without it.
PEER_CONFIG = """\
modules:
  {name}:
    user: "{user}"
    pass: "{password}"
    driver: "LAN_2_0"
    privilege: "admin"
    timeout: 10000
    workaround_flags: [opensesspriv]
    collectors: [ipmi, dcmi]
    custom_args:
      ipmi: ["--shared-sensors", "--sdr-cache-directory={cache}"]
"""


@dataclass(frozen=True)
class Timing:
    reads: int
    wall_ms_median: float
    wall_ms_p99: float
    wall_ms_max: float
    cpu_ms_median: float
    cpu_ms_p99: float


@dataclass(frozen=True)
class PeerCost:
    """ipmi_exporter's scrapes of the same BMC, the first (its SDR cache's build) not
    counted."""

    scrapes: int
    wall_ms_median: float
    wall_ms_p99: float
    wall_ms_max: float
    cpu_ms_mean: float  # the exporter's and its FreeIPMI processes', over all scrapes
    version: str
    freeipmi: str


@dataclass(frozen=True)
class BmcReadCost:
    sensors: int
    kept_records: Timing  # one reader, the SDR walked once
    walk_every_read: Timing  # a fresh reader per read
    silent_overrun_ms: float  # a read of a silent BMC ends this long after its timeout
    silent_timeout_s: float
    peer: PeerCost | None  # None: the exporter or FreeIPMI not installed, or not asked for
    machine: str
    cores: int
    load: str  # load average at the start: this machine is shared
    date: str
    python_ipmi: str


def _timing(reader_per_read: bool, target: Target, reads: int) -> Timing:
    shared = IpmiReader()
    shared.read(target, MODULE)  # the walk a kept reader does once
    walls, cpus = [], []
    for _ in range(reads):
        reader = IpmiReader() if reader_per_read else shared
        wall, cpu = time.perf_counter(), time.thread_time()
        reader.read(target, MODULE)
        cpus.append((time.thread_time() - cpu) * 1e3)
        walls.append((time.perf_counter() - wall) * 1e3)
    return Timing(
        reads=reads,
        wall_ms_median=percentile(walls, 50),
        wall_ms_p99=percentile(walls, 99),
        wall_ms_max=max(walls),
        cpu_ms_median=percentile(cpus, 50),
        cpu_ms_p99=percentile(cpus, 99),
    )


def silent_overrun_ms() -> float:
    """How long past SILENT_TIMEOUT_S a read of a host that takes datagrams and answers
    none gives up."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind((LOOPBACK, 0))
        target = Target(LOOPBACK, int(sink.getsockname()[1]))
        module = dataclasses.replace(MODULE, timeout_s=SILENT_TIMEOUT_S)
        started = time.perf_counter()
        with contextlib.suppress(BmcError):
            IpmiReader().read(target, module)
        return (time.perf_counter() - started - SILENT_TIMEOUT_S) * 1e3


def _cpu_with_children_s(process: psutil.Process) -> float:
    """The process's CPU and that of its children it has waited for (FreeIPMI's tools)."""
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def _peer_scrape(url: str) -> None:
    """One scrape of ipmi_exporter, which answers 200 whether its collectors read or not:
    a scrape that did not read the BMC would time a failure."""
    lines = fetch(url, timeout=30).decode().splitlines()
    if not all(up in lines for up in PEER_UP):
        down = [line for line in lines if line.startswith("ipmi_up")]
        raise RuntimeError(f"ipmi_exporter did not read the BMC: {', '.join(down)}")


def peer_cost(address: str, scrapes: int, root: Path) -> PeerCost:
    """ipmi_exporter on loopback, scraping the BMC at `address` `scrapes` times after one
    scrape that builds its SDR cache."""
    exporter = shutil.which(PEER_TOOLS[0]) or PEER_TOOLS[0]
    cache = root / "freeipmi"
    cache.mkdir(mode=0o700)
    config = root / "ipmi_exporter.yml"
    config.write_text(
        PEER_CONFIG.format(name=MODULE.name, user=USER, password=PASSWORD, cache=cache)
    )
    port = free_port()
    argv = [exporter, f"--config.file={config}", f"--web.listen-address={LOOPBACK}:{port}"]
    query = urllib.parse.urlencode({"target": address, "module": MODULE.name})
    url = f"http://{LOOPBACK}:{port}/ipmi?{query}"
    with running(argv, f"http://{LOOPBACK}:{port}/metrics", log=root / "exporter.log") as proc:
        process = psutil.Process(proc.pid)
        _peer_scrape(url)
        walls, cpu_before = [], _cpu_with_children_s(process)
        for _ in range(scrapes):
            started = time.perf_counter()
            _peer_scrape(url)
            walls.append((time.perf_counter() - started) * 1e3)
        cpu_ms = (_cpu_with_children_s(process) - cpu_before) * 1e3
    version = re.search(r"version (\S+)", tool_version([exporter, "--version"]))
    freeipmi = tool_version([PEER_TOOLS[1], "--version"]).rsplit(" ", 1)[-1]
    return PeerCost(
        scrapes=scrapes,
        wall_ms_median=percentile(walls, 50),
        wall_ms_p99=percentile(walls, 99),
        wall_ms_max=max(walls),
        cpu_ms_mean=cpu_ms / scrapes,
        version=f"ipmi_exporter {version.group(1) if version else 'unknown'}",
        freeipmi=f"FreeIPMI {freeipmi}",
    )


def peer_installed() -> bool:
    return all(shutil.which(tool) for tool in PEER_TOOLS)


def measure(reads: int, root: Path, peer_scrapes: int = 0) -> BmcReadCost:
    """`reads` timed reads each way of one ipmi_sim under `root`, and `peer_scrapes` of
    ipmi_exporter's where it is installed (0: not measured)."""
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    plugin = build_dcmi_plugin(root)
    (root / "sim").mkdir()
    peer = None
    with running_ipmi_sim(root / "sim", plugin) as sim:
        target = Target(sim.host, sim.port)
        sensors = len(IpmiReader().read(target, MODULE).sensors)
        kept = _timing(False, target, reads)
        walked = _timing(True, target, reads)
        if peer_scrapes > 0 and peer_installed():
            peer = peer_cost(sim.address, peer_scrapes, root)
    return BmcReadCost(
        sensors=sensors,
        kept_records=kept,
        walk_every_read=walked,
        silent_overrun_ms=silent_overrun_ms(),
        silent_timeout_s=SILENT_TIMEOUT_S,
        peer=peer,
        machine=cpu_model(),
        cores=os.cpu_count() or 0,
        load=load,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        python_ipmi=package_version("python-ipmi"),
    )


def update(path: Path, cost: BmcReadCost, command: str) -> None:
    replace_section(path, read_section(cost, command), BEGIN, END)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=200, help="timed reads each way")
    parser.add_argument(
        "--peer-scrapes", type=int, default=20, help="ipmi_exporter's timed scrapes (0: none)"
    )
    parser.add_argument("--update", type=Path, help="rewrite this section of a markdown file")
    args = parser.parse_args(argv)
    if args.reads < 1 or args.peer_scrapes < 0:
        raise SystemExit("error: --reads must be at least 1 and --peer-scrapes at least 0")
    command = " ".join(["python -m benchmarks.bmc_read", *(argv or sys.argv[1:])])
    with tempfile.TemporaryDirectory(prefix="nvwatch-bmc-bench-") as root:
        cost = measure(args.reads, Path(root), args.peer_scrapes)
    json.dump(dataclasses.asdict(cost), sys.stdout, indent=2)
    print()
    if args.update:
        update(args.update, cost, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
