"""What a history writes for one simulated node at one instant, read off the simulator.

The values are what the agent would export at that instant (names and labels from the
catalogue, values in the units and roundings of the NVML and sysfs boundary: whole
percent, milliwatts, whole degrees, KiB of NVLink data, 4-byte IB words), read directly
from the simulator's state instead of through pynvml and sysfs: a poll through the real
bindings costs tens of milliseconds, and a month of a fleet is millions of polls.
tests/history checks the two agree. NVLink is written per GPU (`link="all"`), as the
agent exports it with `--nvlink-detail gpu`; each series carries the labels a scrape of
the fleet's file_sd targets adds (job, instance, cluster, rack, node_class). The node's BMC,
probed by the `nvwatch-bmc` job, is written beside it (nvwatch.sim.history.bmc).

The set is what a capacity review reads, and no more (a month of a fleet is millions of
samples): utilization, memory, power against limit and TDP, energy, temperatures and
their thresholds, time at the power cap and in thermal slowdown, GPM activity, lifetime
ECC counts, XIDs, remapped rows / retired pages, NVLink and InfiniBand throughput against
capacity, congestion, symbol errors and link-downs, port state.

A history whose nodes run synchronous jobs (`--job`, and every straggler corpus) also
writes what the job straggler rules compare a job's ranks on (`RankSignals`): who holds
each GPU (nvwatch_gpu_allocation_info, as the agent's Slurm attribution exports it), SM
clocks against their maximum, the power and thermal clock-event reasons, PCIe link
width and generation, NVLink replays and recoveries, and the host CPUs of nodes whose
host is simulated (sim/node/host.py). A history without jobs leaves them out: a month of
a fleet would carry a third more samples that nothing reads. The allocations of the jobs
a history places with a start and an end (nvwatch.sim.history.jobs) are written while
they run, without the rest.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from nvwatch.agent.catalogue import BY_NAME, MetricType
from nvwatch.agent.sources.bmc.reading import BmcError, Target
from nvwatch.agent.sources.infiniband_parse import parse_rate
from nvwatch.sim.bmc.reader import SIMULATED_MODULE, SimulatedBmcReader
from nvwatch.sim.fabric.ib_port import SimulatedPort
from nvwatch.sim.fleet.jobs import FleetJob
from nvwatch.sim.fleet.plan import NodeSpec
from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.gpu.state import (
    REASON_HW_POWER_BRAKE,
    REASON_HW_SLOWDOWN,
    REASON_HW_THERMAL,
    REASON_SW_POWER_CAP,
    REASON_SW_THERMAL,
    Activity,
)
from nvwatch.sim.history.bmc import BMC_FAMILIES, BmcSeries
from nvwatch.sim.history.jobs import JobEpisode
from nvwatch.sim.history.scheduler import CONTROLLER_FAMILIES
from nvwatch.sim.node.host import CpuTimes
from nvwatch.sim.node.node import SimulatedNode

JOB = "nvwatch"
UP = "up"  # what Prometheus records for every scrape; not an nvwatch family
# the reasons a capacity review counts time in (idle is utilization's, and the hardware
# thermal reason is raised with the software one)
_REASONS = (("sw_power_cap", REASON_SW_POWER_CAP), ("sw_thermal_slowdown", REASON_SW_THERMAL))
_GPM = (
    ("nvwatch_gpu_sm_active_ratio", "sm_active"),
    ("nvwatch_gpu_tensor_active_ratio", "tensor_active"),
    ("nvwatch_gpu_dram_active_ratio", "dram_active"),
)
# what a rank's clocks were held down by (the straggler rules name power and thermal)
_RANK_REASONS = (
    ("hw_slowdown", REASON_HW_SLOWDOWN),
    ("hw_thermal_slowdown", REASON_HW_THERMAL),
    ("hw_power_brake", REASON_HW_POWER_BRAKE),
)
# the NVLink errors that cost a link bandwidth (retransmissions and retraining)
_NVLINK_RETRIES = ("replay", "recovery")
SCHEDULER = "slurm"  # the allocation's scheduler label, as the Slurm resolver sets it
# lifetime counts, and the volatile uncorrected one the ECC alert pages on
_ECC = (("corrected", "aggregate"), ("uncorrected", "aggregate"), ("uncorrected", "volatile"))

# every family a history holds, in the order they are written
FAMILIES: tuple[str, ...] = (
    UP,
    "nvwatch_gpu_up",
    "nvwatch_gpu_utilization_ratio",
    "nvwatch_gpu_memory_used_bytes",
    "nvwatch_gpu_memory_total_bytes",
    "nvwatch_gpu_power_watts",
    "nvwatch_gpu_power_limit_watts",
    "nvwatch_gpu_power_tdp_watts",
    "nvwatch_gpu_energy_joules_total",
    "nvwatch_gpu_temperature_celsius",
    "nvwatch_gpu_temperature_threshold_celsius",
    "nvwatch_gpu_clock_hertz",
    "nvwatch_gpu_clock_max_hertz",
    "nvwatch_gpu_clock_event_active",
    "nvwatch_gpu_throttle_seconds_total",
    *(name for name, _ in _GPM),
    "nvwatch_gpu_pcie_link_generation",
    "nvwatch_gpu_pcie_link_width",
    "nvwatch_gpu_allocation_info",
    "nvwatch_gpu_ecc_errors_total",
    "nvwatch_gpu_retired_pages",
    "nvwatch_gpu_remapped_rows",
    "nvwatch_gpu_xid_errors_total",
    "nvwatch_nvlink_up",
    "nvwatch_nvlink_transmit_bytes_total",
    "nvwatch_nvlink_receive_bytes_total",
    "nvwatch_nvlink_speed_bytes_per_second",
    "nvwatch_nvlink_errors_total",
    "nvwatch_ib_port_state",
    "nvwatch_ib_port_rate_bytes_per_second",
    "nvwatch_ib_port_transmit_bytes_total",
    "nvwatch_ib_port_receive_bytes_total",
    "nvwatch_ib_port_transmit_wait_total",
    "nvwatch_ib_port_errors_total",
    "nvwatch_host_cpu_utilization_ratio",
    "nvwatch_host_cpu_iowait_ratio",
    *BMC_FAMILIES,
    *CONTROLLER_FAMILIES,  # the agent on the Slurm controller: its scheduler source
)


def family_type(name: str) -> str:
    """OpenMetrics type of a family (`up` is a gauge Prometheus makes itself)."""
    return "gauge" if name == UP else BY_NAME[name].type.value


def family_help(name: str) -> str:
    return "1 if the scrape of the target succeeded." if name == UP else BY_NAME[name].help


def is_counter(name: str) -> bool:
    return family_type(name) == MetricType.COUNTER.value


Row = tuple[str, str, float]  # family, series labels (rendered), value


def _labels(pairs: dict[str, str]) -> str:
    # label values here are names, indexes and UUIDs: nothing to escape
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


@dataclass
class NodeSeries:
    """Samples one node; keeps what a sample needs from the previous one (GPM deltas,
    XID counts) and caches rendered label sets."""

    spec: NodeSpec
    node: SimulatedNode
    # the node's part of the history's jobs; with `rank_signals`, what the straggler
    # rules compare ranks on is written too (see the module docstring)
    jobs: Sequence[FleetJob] = ()
    rank_signals: bool = False
    # the history's jobs with a start and an end on this node (jobs.py), on a range
    # starting at Unix time `origin`: their allocations are written while they run
    placed: Sequence[JobEpisode] = ()
    origin: float = 0.0

    def __post_init__(self) -> None:
        self.target = {
            "job": JOB,
            "instance": self.spec.name,
            "cluster": self.spec.cluster,
            "rack": self.spec.rack,
            "node_class": self.spec.profile,
        }
        self._cache: dict[tuple[str, ...], str] = {}
        self._activity: dict[int, Activity] = {g.index: g.activity() for g in self.node.nvml.gpus}
        self.xids: dict[tuple[int, int], int] = {}
        self.node.nvml.event_sinks.append(self._on_event)
        self.bmc = BmcSeries(self.spec, SIMULATED_MODULE)
        self._bmc_reader = SimulatedBmcReader({self.spec.bmc: self.node})
        self._cpu: CpuTimes | None = None  # the host's at the last sample
        self._running: list[JobEpisode] = []  # of `placed`, at the sample being written

    def _on_event(self, event: object) -> None:
        xid = getattr(event, "data", 0)
        if getattr(event, "event_type", 0) & 0x8 and xid:  # nvmlEventTypeXidCriticalError
            key = (int(getattr(event, "gpu", 0)), int(xid))
            self.xids[key] = self.xids.get(key, 0) + 1

    def labels(self, *pairs: str) -> str:
        """The rendered label set: the target's labels, then `pairs` (name, value, ...)."""
        labels = self._cache.get(pairs)
        if labels is None:
            extra = dict(zip(pairs[::2], pairs[1::2], strict=True))
            labels = self._cache[pairs] = _labels({**self.target, **extra})
        return labels

    def down(self) -> Iterator[Row]:
        """A scrape that failed: only `up` 0 (the rest goes stale, as in Prometheus)."""
        yield UP, self.labels(), 0.0

    def bmc_rows(self) -> Iterator[Row]:
        """The probe of the node's BMC, read now (the node advanced first)."""
        try:
            reading = self._bmc_reader.read(Target(self.spec.bmc), SIMULATED_MODULE)
        except BmcError:
            reading = None
        return self.bmc.rows(reading)

    def rows(self, sim_time: float) -> Iterator[Row]:
        now = self.origin + sim_time
        self._running = [job for job in self.placed if job.runs_at(now)]
        yield UP, self.labels(), 1.0
        for gpu in self.node.nvml.gpus:
            yield from self._gpu(gpu)
        for device in self.node.fabric.devices:
            yield from self._port(device, self.node.fabric.port(device), sim_time)
        if self.rank_signals and self.node.simulates_host:
            yield from self._host()

    def _host(self) -> Iterator[Row]:
        """CPU ratios between this sample and the last, as the agent's host source
        computes them between two polls (none at the first)."""
        now, before = self.node.host.cpu_times(), self._cpu
        self._cpu = now
        if before is None:
            return
        busy, idle, iowait = (
            (now.user - before.user) + (now.system - before.system),
            now.idle - before.idle,
            now.iowait - before.iowait,
        )
        total = busy + idle + iowait
        if total > 0:
            yield "nvwatch_host_cpu_utilization_ratio", self.labels(), 1.0 - (idle + iowait) / total
            yield "nvwatch_host_cpu_iowait_ratio", self.labels(), iowait / total

    def _gpu(self, gpu: SimulatedGpu) -> Iterator[Row]:
        ids = ("gpu", str(gpu.index), "uuid", gpu.uuid)
        lab = self.labels
        if gpu.lost:
            yield "nvwatch_gpu_up", lab(*ids), 0.0
            return
        model = gpu.model
        yield "nvwatch_gpu_up", lab(*ids), 1.0
        yield "nvwatch_gpu_utilization_ratio", lab(*ids), round(100 * gpu.utilization) / 100
        yield "nvwatch_gpu_memory_used_bytes", lab(*ids), float(gpu.memory_used_bytes)
        yield "nvwatch_gpu_memory_total_bytes", lab(*ids), float(model.memory_bytes)
        yield "nvwatch_gpu_power_watts", lab(*ids), round(gpu.power_w * 1000) / 1000
        yield "nvwatch_gpu_power_limit_watts", lab(*ids), round(gpu.power_limit_w * 1000) / 1000
        yield "nvwatch_gpu_power_tdp_watts", lab(*ids), float(model.tdp_watts)
        if model.energy_counter:
            yield "nvwatch_gpu_energy_joules_total", lab(*ids), int(gpu.energy_mj) / 1000
        yield (
            "nvwatch_gpu_temperature_celsius",
            lab(*ids, "sensor", "gpu"),
            round(gpu.temperature_c),
        )
        if model.memory_temperature:
            memory_c = float(round(gpu.memory_temperature_c))
            yield "nvwatch_gpu_temperature_celsius", lab(*ids, "sensor", "memory"), memory_c
        yield from self._thresholds(gpu, ids)
        for reason, bit in _REASONS:
            active = 1.0 if gpu.reasons & bit else 0.0
            yield "nvwatch_gpu_clock_event_active", lab(*ids, "reason", reason), active
        if model.violation_counters:
            power_s, thermal_s = int(gpu.power_violation_ns), int(gpu.thermal_violation_ns)
            yield "nvwatch_gpu_throttle_seconds_total", lab(*ids, "reason", "power"), power_s / 1e9
            thermal = lab(*ids, "reason", "thermal")
            yield "nvwatch_gpu_throttle_seconds_total", thermal, thermal_s / 1e9
        if model.gpm:
            yield from self._gpm(gpu, ids)
        yield from self._memory_errors(gpu, ids)
        yield from self._nvlink(gpu, ids)
        if self.rank_signals:
            yield from self._rank(gpu, ids)
        for job in self._running:
            if gpu.index in job.gpus:
                yield "nvwatch_gpu_allocation_info", self._owner(ids, job), 1.0

    def _rank(self, gpu: SimulatedGpu, ids: tuple[str, ...]) -> Iterator[Row]:
        """What the straggler rules compare a job's ranks on, beyond the review's set."""
        lab = self.labels
        sm = lab(*ids, "clock", "sm")
        yield "nvwatch_gpu_clock_hertz", sm, gpu.sm_clock_mhz * 1e6
        yield "nvwatch_gpu_clock_max_hertz", sm, gpu.model.max_sm_clock_mhz * 1e6
        for reason, bit in _RANK_REASONS:
            active = 1.0 if gpu.reasons & bit else 0.0
            yield "nvwatch_gpu_clock_event_active", lab(*ids, "reason", reason), active
        current = ("kind", "current")
        generation = float(gpu.pcie_generation_current)
        yield "nvwatch_gpu_pcie_link_generation", lab(*ids, *current), generation
        yield "nvwatch_gpu_pcie_link_width", lab(*ids, *current), float(gpu.pcie_width_current)
        if gpu.links:
            for kind in _NVLINK_RETRIES:
                count = sum(gpu.nvlink_error_count(i, kind) for i in range(len(gpu.links)))
                labels = lab(*ids, "link", "all", "type", kind)
                yield "nvwatch_nvlink_errors_total", labels, float(count)
        for job in self.jobs:
            if job.gpus is None or gpu.index in job.gpus:
                yield "nvwatch_gpu_allocation_info", self._owner(ids, job), 1.0

    def _owner(self, ids: tuple[str, ...], job: FleetJob | JobEpisode) -> str:
        """The allocation's labels; the empty ones (pod, namespace, container, an
        account not given) are left out, as Prometheus drops an empty label."""
        owner = ("scheduler", SCHEDULER, "job_id", job.job_id, "user", job.user)
        return self.labels(*ids, *owner, *(("account", job.account) if job.account else ()))

    def _thresholds(self, gpu: SimulatedGpu, ids: tuple[str, ...]) -> Iterator[Row]:
        name = "nvwatch_gpu_temperature_threshold_celsius"
        yield name, self.labels(*ids, "threshold", "slowdown"), float(gpu.model.temp_slowdown_c)
        if gpu.model.temp_memory_max_c is not None:
            memory_max = float(gpu.model.temp_memory_max_c)
            yield name, self.labels(*ids, "threshold", "memory_max"), memory_max

    def _gpm(self, gpu: SimulatedGpu, ids: tuple[str, ...]) -> Iterator[Row]:
        """GPM ratios over the span since the last sample, as NVML computes them from two
        samples' activity integrals."""
        now, before = gpu.activity(), self._activity[gpu.index]
        self._activity[gpu.index] = now
        span = now.time - before.time
        if span <= 0:
            return
        for name, field in _GPM:
            ratio = (getattr(now, field) - getattr(before, field)) / span
            yield name, self.labels(*ids), min(1.0, max(0.0, ratio))

    def _memory_errors(self, gpu: SimulatedGpu, ids: tuple[str, ...]) -> Iterator[Row]:
        model, ecc, lab = gpu.model, gpu.ecc, self.labels
        if not model.ecc:
            return
        counts = {
            ("corrected", "aggregate"): ecc.corrected_aggregate,
            ("uncorrected", "aggregate"): ecc.uncorrected_aggregate,
            ("uncorrected", "volatile"): ecc.uncorrected_volatile,
        }
        for kind, scope in _ECC:
            labels = lab(*ids, "type", kind, "scope", scope)
            yield "nvwatch_gpu_ecc_errors_total", labels, float(counts[kind, scope])
        if model.row_remapping:
            rows = {
                "correctable": ecc.remapped_correctable,
                "uncorrectable": ecc.remapped_uncorrectable,
            }
            for kind, count in rows.items():
                yield "nvwatch_gpu_remapped_rows", lab(*ids, "kind", kind), float(count)
        else:
            for cause, pages in (("sbe", ecc.retired_sbe), ("dbe", ecc.retired_dbe)):
                yield "nvwatch_gpu_retired_pages", lab(*ids, "cause", cause), float(len(pages))
        for (index, xid), count in sorted(self.xids.items()):
            if index == gpu.index:
                yield "nvwatch_gpu_xid_errors_total", lab(*ids, "xid", str(xid)), float(count)

    def _nvlink(self, gpu: SimulatedGpu, ids: tuple[str, ...]) -> Iterator[Row]:
        if not gpu.links:
            return
        labels = self.labels(*ids, "link", "all")
        up = [link for link in gpu.links if link.up]
        # NVML counts NVLink data in KiB
        tx = sum(int(link.tx_bytes) // 1024 for link in gpu.links) * 1024
        rx = sum(int(link.rx_bytes) // 1024 for link in gpu.links) * 1024
        yield "nvwatch_nvlink_up", labels, float(len(up))
        yield "nvwatch_nvlink_transmit_bytes_total", labels, float(tx)
        yield "nvwatch_nvlink_receive_bytes_total", labels, float(rx)
        speed = len(up) * gpu.model.nvlink_bytes_per_second
        yield "nvwatch_nvlink_speed_bytes_per_second", labels, float(speed)

    def _port(self, device: str, port: SimulatedPort, t: float) -> Iterator[Row]:
        if not port.present(t):
            return
        labels = self.labels("device", device, "port", "1")
        counters = port.counters
        up = port.is_up(t)
        yield "nvwatch_ib_port_state", labels, 4.0 if up else 1.0
        rate = parse_rate(port.rate_text(t)).bytes_per_second
        yield "nvwatch_ib_port_rate_bytes_per_second", labels, float(rate)
        # sysfs counts data in 4-byte words
        tx = float(int(counters["port_xmit_data"]) * 4)
        yield "nvwatch_ib_port_transmit_bytes_total", labels, tx
        rx = float(int(counters["port_rcv_data"]) * 4)
        yield "nvwatch_ib_port_receive_bytes_total", labels, rx
        wait = float(int(counters["port_xmit_wait"]))
        yield "nvwatch_ib_port_transmit_wait_total", labels, wait
        for kind, counter in (("symbol", "symbol_error"), ("link_downed", "link_downed")):
            errors = self.labels("device", device, "port", "1", "type", kind)
            yield "nvwatch_ib_port_errors_total", errors, float(int(counters[counter]))
