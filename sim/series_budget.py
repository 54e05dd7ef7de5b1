"""How many series one node costs the monitoring backend, measured by rendering it.

Each profile is simulated (fixed seed, manual clock, two polls a minute apart) and its
whole exposition parsed with prometheus_client's own parser; the counts that come out
are the per-node series budget docs/metrics.md states and tests/agent/test_label_hygiene
checks. Nothing here is an estimate: a new family or label shows up in the figures.

Two families can grow past what one render shows, and both are bounded:
- the process families (`nvwatch_gpu_process_memory_bytes` and the two per-process
  utilization ratios) carry `pid`: at most MAX_PROCESSES series each per GPU (the
  processes holding the most memory), so their worst case is MAX_PROCESSES x GPUs each;
  under MIG only the memory family, since NVML gives no per-process utilization there.
- `nvwatch_ib_port_reading_saturated` has a series only for a counter pinned at its
  maximum: none on a healthy port, at most one per flagged counter (SATURATION_FLAGGED)
  per port on one whose error counters have all filled.
- `nvwatch_gpu_xid_errors_total` gains one series per XID code a GPU has raised this
  boot: a handful on a sick GPU, none on a healthy one (the simulation raises none).
The `nvwatch_mig_*` families have one series per MIG device, at most seven per GPU:
MIG_LAYOUTS renders the MIG boards with every GPU split into seven 1g instances.

A node's BMC is a budget of its own, paid by the `nvwatch-bmc` job: `measure_bmc` probes
each profile's simulated BMC through the real /probe exposition and counts its series.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.exposition.bmc import probe_exposition
from nvwatch.agent.exposition.render import build_exposition, prepare
from nvwatch.agent.poller import Poller
from nvwatch.agent.sources import Source
from nvwatch.agent.sources.bmc.reading import Target
from nvwatch.agent.sources.host import HostSource
from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.agent.sources.infiniband_parse import SATURATION_FLAGGED, hw_counter_selection
from nvwatch.agent.sources.nvml.processes import MAX_PROCESSES
from nvwatch.agent.sources.nvml.source import NvmlSource
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.bmc.reader import SIMULATED_MODULE, SimulatedBmcReader
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.node.process_file import ProcessFile

PROCESS_FAMILY = "nvwatch_gpu_process_memory_bytes"
#: every family with a series per process (the pid-carrying ones), memory first
PROCESS_FAMILIES = (
    PROCESS_FAMILY,
    "nvwatch_gpu_process_sm_utilization_ratio",
    "nvwatch_gpu_process_memory_utilization_ratio",
)
#: one series per IB port (to count ports), and the flag family that is sparse by design
IB_PORT_FAMILY = "nvwatch_ib_port_state"
SATURATED_FAMILY = "nvwatch_ib_port_reading_saturated"
# Real seconds between the two polls when the host source is read: several /proc/stat
# ticks (10 ms) on every CPU, so its CPU ratios are exported, as in any poll but the first.
HOST_INTERVAL_S = 0.05
#: profile -> the layout with the most MIG devices (seven per GPU), for the budget's MIG rows
MIG_LAYOUTS = {
    "dgx-a100": "all:1g.5gb*7",
    "dgx-h100": "all:1g.10gb*7",
    "hgx-h200": "all:1g.18gb*7",
}


def render_profile(
    profile: str,
    root: Path,
    *,
    with_host: bool = False,
    process_file: ProcessFile | None = None,
    mig: str | None = None,
    nvlink_detail: str = "link",
    ib_hw_counters: str = "default",
    seed: int = 7,
) -> str:
    """The whole exposition of a simulated `profile` after two polls a minute apart.

    `root` holds the node's sysfs tree; `process_file` adds processes to its GPUs; `mig`
    partitions them (a --mig layout); `nvlink_detail` and `ib_hw_counters` are serve's
    --nvlink-detail and --ib-hw-counters; `seed` the simulation's (its serials, UUIDs).
    """
    clock = ManualClock(0.0)
    node = SimulatedNode(profile, seed=seed, clock=clock, sysfs_root=root, mig=mig)
    node.nvml.process_file = process_file
    sim_nvml.install(node.nvml)
    # the NVML source on the simulation's clock too: GPM needs 100 ms between samples,
    # and real time between two quick polls would make that a coin toss
    nvml = NvmlSource(clock=clock, nvlink_detail=nvlink_detail)
    infiniband = InfinibandSource(
        root, gpu_bus_ids=nvml.gpu_bus_ids, hw_counters=hw_counter_selection(ib_hw_counters)
    )
    sources: list[Source] = [nvml, infiniband]
    if with_host:  # the real host's readings: not golden, but they are part of the contract
        sources.append(HostSource())
    poller = Poller(sources, interval=60, timeout=30, prepare=prepare)
    try:
        poller.poll_once()
        clock.advance(60.0)
        node.tick()
        if with_host:
            # the host's CPU ratios are the difference of two /proc/stat readings on real
            # time, in 10 ms ticks: two polls within one tick export none (as a first
            # poll does), polls a real interval apart always do
            time.sleep(HOST_INTERVAL_S)
        snapshot = poller.poll_once()
    finally:
        poller.stop(timeout=2)
        node.close()
        sim_nvml.uninstall()
    return build_exposition(snapshot).text.decode()


@dataclass(frozen=True)
class Series:
    name: str
    labels: dict[str, str]


def parse_series(text: str) -> list[Series]:
    """Every sample of an exposition as (name, labels), as Prometheus would ingest it."""
    return [
        Series(sample.name, dict(sample.labels))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


@dataclass(frozen=True)
class Budget:
    """One profile's series: measured in one render, and the ceiling with every bounded
    family at its bound."""

    profile: str
    gpus: int
    series: int
    per_family: dict[str, int]
    max_own_labels: int
    # the process families this node can export (MIG: the memory family alone)
    process_families: tuple[str, ...] = PROCESS_FAMILIES

    @property
    def ceiling(self) -> int:
        """Measured series, with each process family at MAX_PROCESSES per GPU and every
        port's flagged IB counters pinned."""
        measured = sum(self.per_family.get(name, 0) for name in PROCESS_FAMILIES)
        capped = MAX_PROCESSES * self.gpus * len(self.process_families)
        ports = self.per_family.get(IB_PORT_FAMILY, 0)
        pinned = ports * len(SATURATION_FLAGGED) - self.per_family.get(SATURATED_FAMILY, 0)
        return self.series - measured + capped + pinned

    def share(self, prefix: str) -> int:
        return sum(n for name, n in self.per_family.items() if name.startswith(prefix))


def measure(
    profile: str,
    root: Path,
    mig: str | None = None,
    nvlink_detail: str = "link",
    ib_hw_counters: str = "default",
) -> Budget:
    """Render `profile` (host source included, as `serve` runs it) and count its series;
    with `mig`, partitioned so (the row is named `profile --mig LAYOUT`); at serve's
    --nvlink-detail and --ib-hw-counters settings given."""
    text = render_profile(
        profile,
        root,
        with_host=True,
        mig=mig,
        nvlink_detail=nvlink_detail,
        ib_hw_counters=ib_hw_counters,
    )
    series = parse_series(text)
    per_family = Counter(s.name for s in series)
    gpus = sum(1 for s in series if s.name == "nvwatch_gpu_up")
    return Budget(
        profile if mig is None else f"{profile} --mig {mig}",
        gpus,
        len(series),
        dict(sorted(per_family.items())),
        max(len(s.labels) for s in series),
        PROCESS_FAMILIES if mig is None else (PROCESS_FAMILY,),
    )


@dataclass(frozen=True)
class BmcBudget:
    """One profile's BMC: the SDR's sensors and the series one probe of it exports."""

    profile: str
    sensors: int
    series: int
    dcmi: bool


def measure_bmc(profile: str, root: Path) -> BmcBudget:
    """Probe the simulated `profile`'s BMC once (module `default`: every sensor and DCMI)
    and count what the probe's body holds, as Prometheus would ingest it."""
    node = SimulatedNode(profile, seed=7, clock=ManualClock(0.0), sysfs_root=root)
    try:
        reading = SimulatedBmcReader({"bmc": node}).read(Target("bmc"), SIMULATED_MODULE)
    finally:
        node.close()
    text = probe_exposition(reading, None, SIMULATED_MODULE).decode()
    return BmcBudget(
        profile, len(reading.sensors), len(parse_series(text)), bool(reading.dcmi_watts)
    )
