"""The cost of one BMC read: wall and CPU time of IpmiReader against a real BMC (ipmi_sim).

One ipmi_sim on loopback (the tests' BMC: 10 sensors, 2 of them in a shared record, DCMI
through the plug-in) is read N times by one reader, as a probe reads a BMC scrape after
scrape: the first read walks the SDR, the others take the kept records and check the
repository's stamp. A fresh reader per read shows the cost of the walk every time. CPU
is the reading thread's (time.thread_time: python-ipmi's packing, HMAC, AES, parsing).
Also measured: how far past its timeout a read of a BMC that never answers ends.

    python -m benchmarks.bmc_read [--reads 200]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import cpu_model, package_version, percentile
from nvwatch.agent.sources.bmc.ipmi import IpmiReader
from nvwatch.agent.sources.bmc.reading import BmcError, Module, Target
from nvwatch.sim.ports import LOOPBACK
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


@dataclass(frozen=True)
class Timing:
    reads: int
    wall_ms_median: float
    wall_ms_p99: float
    wall_ms_max: float
    cpu_ms_median: float
    cpu_ms_p99: float


@dataclass(frozen=True)
class BmcReadCost:
    sensors: int
    kept_records: Timing  # one reader, the SDR walked once
    walk_every_read: Timing  # a fresh reader per read
    silent_overrun_ms: float  # a read of a silent BMC ends this long after its timeout
    machine: str
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


def measure(reads: int, root: Path) -> BmcReadCost:
    plugin = build_dcmi_plugin(root)
    (root / "sim").mkdir()
    with running_ipmi_sim(root / "sim", plugin) as sim:
        target = Target(sim.host, sim.port)
        sensors = len(IpmiReader().read(target, MODULE).sensors)
        kept = _timing(False, target, reads)
        walked = _timing(True, target, reads)
    return BmcReadCost(
        sensors=sensors,
        kept_records=kept,
        walk_every_read=walked,
        silent_overrun_ms=silent_overrun_ms(),
        machine=cpu_model(),
        python_ipmi=package_version("python-ipmi"),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nvwatch-bmc-bench-") as root:
        cost = measure(args.reads, Path(root))
    json.dump(dataclasses.asdict(cost), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
