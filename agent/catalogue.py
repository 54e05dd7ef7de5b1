"""The metric catalogue: every family nvwatch exports, defined once, and where it comes from.

Names, types and label sets here are a contract with dashboards, alerts and users. Each
entry is also the map of its value: `origin` names the NVML call or field id, the sysfs
file or the psutil call; each `Series` names the sample attribute that holds
the value (on the scope's sample class: `GpuSample`, `NvLinkSample`, `InfinibandPort`, ...)
and, where one exists, the `nvidia-smi --query-gpu` field it must agree with; `when` says
under which condition a family is absent. The exposition renders by looping over this table
(agent/exposition/), `python -m nvwatch.agent.nvsmi_compare` takes its pairs from it, and
docs/metrics.md is generated from it.

This module is data: importing it imports nothing of the agent, so a reader sees the
contract alone. Which source fills each scope is said by the sources' declarations
(agent/sources/declaration.py), read when asked (SOURCE_OF). A source registered beside
the built-in ones brings scopes and families of its own: the lookups below (spec,
of_scope, every_spec) include them, the constants (CATALOGUE, BY_NAME, SAMPLE_NAMES: the
contract) do not.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum


class MetricType(str, Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    # its series end with the sample they are: a bucket's `le`, "_count" or "_sum"
    HISTOGRAM = "histogram"


class Scope(str, Enum):
    """What one series of a family describes, and so which sample object fills it."""

    GPU = "gpu"  # GpuSample, one per GPU (agent.sources.nvml.samples)
    PROCESS = "process"  # ProcessSample, per process on a GPU that is up
    ALLOCATION = "allocation"  # Allocation, per owner of a GPU (agent.sources.attribution)
    NVLINK = "nvlink"  # NvLinkSample per link, or the per-GPU total with link="all"
    MIG = "mig"  # MigDeviceSample, per MIG device (GPU + compute instance) of a GPU
    IB_DEVICE = "ib_device"  # InfinibandDevice (agent.sources.infiniband)
    IB_PORT = "ib_port"  # InfinibandPort
    HOST = "host"  # HostSample (agent.sources.host)
    BMC = "bmc"  # BmcProbe, one per probe of a BMC (agent.sources.bmc.interpret)
    BMC_SENSOR = "bmc_sensor"  # BmcSensor, per sensor of a BMC probe
    # the cluster's Slurm, one agent per cluster (agent.sources.scheduler.model)
    SCHEDULER_PARTITION = "scheduler_partition"  # PartitionSample, per partition
    SCHEDULER_DEMAND = "scheduler_demand"  # DemandSample, per partition and account
    SCHEDULER_USER = "scheduler_user"  # UserDemand, per partition and user (opt-in)
    SCHEDULER_ACCOUNT = "scheduler_account"  # AccountShare, per account (with accounting)
    SCHEDULER_ACCOUNT_WAIT = "scheduler_account_wait"  # AccountWait, per account
    SOURCE = "source"  # SourceStatus of each source (agent.poller)
    AGENT = "agent"  # the poller's Snapshot


#: Labels every series of a scope carries, filled by the exposition from the object itself.
IDENTITY: dict[str, tuple[str, ...]] = {
    Scope.GPU: ("gpu", "uuid"),
    Scope.PROCESS: ("gpu", "uuid"),
    Scope.ALLOCATION: ("gpu", "uuid"),
    Scope.NVLINK: ("gpu", "uuid", "link"),
    Scope.MIG: ("gpu", "uuid", "gpu_instance_id", "compute_instance_id"),
    Scope.IB_DEVICE: (),
    Scope.IB_PORT: ("device", "port"),
    Scope.HOST: (),
    Scope.BMC: (),
    Scope.BMC_SENSOR: ("sensor",),
    Scope.SCHEDULER_PARTITION: ("partition",),
    Scope.SCHEDULER_DEMAND: ("partition", "account"),
    Scope.SCHEDULER_USER: ("partition", "user"),
    Scope.SCHEDULER_ACCOUNT: ("account",),
    Scope.SCHEDULER_ACCOUNT_WAIT: ("account",),
    Scope.SOURCE: ("source",),
    Scope.AGENT: (),
}

# the poller's own scopes: no source's sample holds them
_POLLER_SCOPES: dict[str, str] = {Scope.SOURCE: "agent", Scope.AGENT: "agent"}


class _SourceOf(Mapping[str, str]):
    """Scope -> the source whose sample holds it, as the sources' declarations say at the
    moment of asking (imported then: the declarations import this module's Scope)."""

    def _table(self) -> dict[str, str]:
        from nvwatch.agent.sources.declaration import scope_sources

        return {**scope_sources(), **_POLLER_SCOPES}

    def __getitem__(self, scope: str) -> str:
        return self._table()[scope]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


#: The poller source whose sample holds each scope ("agent": the poller itself).
SOURCE_OF: Mapping[str, str] = _SourceOf()


def identity_of(scope: str) -> tuple[str, ...]:
    """The identity labels of `scope`: IDENTITY's, or a registered source's own scope's."""
    found = IDENTITY.get(scope)
    if found is not None:
        return found
    from nvwatch.agent.sources.declaration import declared_identity

    return declared_identity(scope)


# Base units recognised from a name's suffix (before `_total` on counters).
_UNIT_SUFFIXES = (
    "bytes_per_second",
    "bytes",
    "seconds",
    "watts",
    "joules",
    "celsius",
    "hertz",
    "ratio",
)


@dataclass(frozen=True)
class Field:
    """An attribute of the scope's sample object (dotted for nested: `info.name`).

    With `key`, the attribute is a mapping and the value is its entry `key` (absent when
    the mapping has no such entry).
    """

    path: str
    key: str | None = None

    def __str__(self) -> str:
        return self.path if self.key is None else f"{self.path}[{self.key!r}]"


@dataclass(frozen=True)
class NvidiaSmi:
    """The `nvidia-smi --query-gpu` field a series must agree with on a real GPU.

    nvidia-smi value x `scale` = nvwatch value; allowed difference is `tolerance` (nvwatch
    units) or `relative` of the value, whichever is larger: instantaneous readings are taken
    at slightly different moments, static ones must match exactly.
    """

    query: str
    scale: float = 1.0
    tolerance: float = 0.0
    relative: float = 0.0


@dataclass(frozen=True)
class Series:
    """How one series (per scope object) of a family is filled.

    `value` is a Field of the object or a constant (1 for `_info` families). `labels` are the
    values of the family's own labels (after the scope's identity), each a literal or a Field.
    With `each`, `value` is a mapping and one series is emitted per entry: the entry's key
    fills the family's last label (in the mapping's order, or sorted with `sort`).
    `present_if` names a Field that must not be None for the series to exist.
    """

    value: Field | float
    labels: tuple[str | Field, ...] = ()
    each: bool = False
    sort: bool = False
    present_if: Field | None = None
    nvidia_smi: NvidiaSmi | None = None


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: MetricType
    help: str
    # a Scope, or the own scope of a registered source (agent/sources/declaration.py)
    scope: Scope | str
    # where the value comes from on the node: NVML call or field id, sysfs file, psutil
    origin: str
    series: tuple[Series, ...]
    # the family's own labels, after the scope's identity labels
    own_labels: tuple[str, ...] = ()
    # when the family has no series although its source is up ("" = on all hardware)
    when: str = ""
    # GPU scope: still emitted for a GPU that stopped answering (identity and up only)
    even_when_down: bool = False
    # HELP/TYPE written even when no series exists, for rules that must find the family
    always_declared: bool = False

    @property
    def labels(self) -> tuple[str, ...]:
        return (*identity_of(self.scope), *self.own_labels)

    @property
    def source(self) -> str:
        return SOURCE_OF[self.scope]

    @property
    def unit(self) -> str:
        """The base unit named by the metric's suffix, or "" for unitless values."""
        stem = self.name.removesuffix("_total")
        for suffix in _UNIT_SUFFIXES:
            if stem.endswith("_" + suffix):
                return suffix
        return ""


def _one(path: str, smi: NvidiaSmi | None = None) -> tuple[Series, ...]:
    """The common case: one series per object, its value in attribute `path`."""
    return (Series(Field(path), nvidia_smi=smi),)


def _by(*pairs: tuple[str, str], smi: dict[str, NvidiaSmi] | None = None) -> tuple[Series, ...]:
    """One series per (label value, attribute) pair, e.g. sensor="gpu" <- temperature_gpu."""
    smi = smi or {}
    return tuple(Series(Field(path), (label,), nvidia_smi=smi.get(label)) for label, path in pairs)


def _each(path: str, *, sort: bool = False) -> tuple[Series, ...]:
    return (Series(Field(path), each=True, sort=sort),)


# NVML: "On MIG-enabled GPUs, querying device utilization rates is not currently supported"
_MIG_NO_UTIL = "GPUs in MIG mode (NVML does not report utilization rates under MIG)"
_HOPPER = "GPUs before Hopper (GPM needs nvmlGpmQueryDeviceSupport), or on the first poll"
# the process families' labels: the pid, psutil's name and user, attribution's owner
_PROCESS_LABELS = (
    Field("pid"),
    Field("name"),
    Field("user"),
    Field("job"),
    Field("pod"),
    Field("namespace"),
)
_PROCESS_OWN_LABELS = ("pid", "process", "user", "job", "pod", "namespace")
# NVML: "On MIG-enabled GPUs, querying process utilization is not currently supported"
_PROCESS_UTIL_ABSENT = (
    "no compute process on the GPU; GPUs in MIG mode and boards where "
    "nvmlDeviceGetProcessUtilization is NotSupported; a poll in which the call failed"
)

GPU_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "nvwatch_gpu_info",
        MetricType.GAUGE,
        "Descriptive fields of a GPU; value is always 1.",
        Scope.GPU,
        "nvmlDeviceGetName, GetPciInfo_v3, GetSerial, GetVbiosVersion, "
        "nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion",
        (
            Series(
                1.0,
                (
                    Field("info.name"),
                    Field("info.pci_bus_id"),
                    Field("info.serial"),
                    Field("info.driver_version"),
                    Field("info.cuda_version"),
                    Field("info.vbios"),
                ),
            ),
        ),
        own_labels=("name", "pci_bus_id", "serial", "driver_version", "cuda_version", "vbios"),
        even_when_down=True,
    ),
    MetricSpec(
        "nvwatch_gpu_up",
        MetricType.GAUGE,
        "1 if the GPU answered NVML this poll, 0 if it is lost or failing.",
        Scope.GPU,
        "every NVML call of the poll: GpuIsLost, Unknown, ... make it 0",
        _one("up"),
        even_when_down=True,
    ),
    MetricSpec(
        "nvwatch_gpu_utilization_ratio",
        MetricType.GAUGE,
        "Fraction of the last sample period a kernel was running (nvidia-smi utilization.gpu).",
        Scope.GPU,
        "nvmlDeviceGetUtilizationRates .gpu (percent / 100)",
        _one("utilization_ratio", NvidiaSmi("utilization.gpu", 0.01, 0.15)),
        when=_MIG_NO_UTIL,
    ),
    MetricSpec(
        "nvwatch_gpu_memory_utilization_ratio",
        MetricType.GAUGE,
        "Fraction of the last sample period device memory was read or written "
        "(nvidia-smi utilization.memory).",
        Scope.GPU,
        "nvmlDeviceGetUtilizationRates .memory (percent / 100)",
        _one("memory_utilization_ratio"),
        when=_MIG_NO_UTIL,
    ),
    MetricSpec(
        "nvwatch_gpu_memory_total_bytes",
        MetricType.GAUGE,
        "Total device (HBM) memory.",
        Scope.GPU,
        "nvmlDeviceGetMemoryInfo (v2 where the driver has it, else v1)",
        _one("memory_total_bytes", NvidiaSmi("memory.total", 2**20, 2**20)),
    ),
    MetricSpec(
        "nvwatch_gpu_memory_used_bytes",
        MetricType.GAUGE,
        "Device memory in use.",
        Scope.GPU,
        "nvmlDeviceGetMemoryInfo .used",
        _one("memory_used_bytes", NvidiaSmi("memory.used", 2**20, 64 * 2**20, 0.02)),
    ),
    MetricSpec(
        "nvwatch_gpu_memory_free_bytes",
        MetricType.GAUGE,
        "Device memory free.",
        Scope.GPU,
        "nvmlDeviceGetMemoryInfo .free",
        _one("memory_free_bytes"),
    ),
    MetricSpec(
        "nvwatch_gpu_power_watts",
        MetricType.GAUGE,
        "Current board power draw.",
        Scope.GPU,
        "nvmlDeviceGetPowerUsage (mW / 1000)",
        _one("power_watts", NvidiaSmi("power.draw", 1.0, 15.0, 0.1)),
    ),
    MetricSpec(
        "nvwatch_gpu_power_limit_watts",
        MetricType.GAUGE,
        "Power limit the driver enforces now (nvidia-smi enforced.power.limit).",
        Scope.GPU,
        "field NVML_FI_DEV_POWER_CURRENT_LIMIT (190), else "
        "nvmlDeviceGetEnforcedPowerLimit (mW / 1000)",
        _one("power_limit_watts", NvidiaSmi("enforced.power.limit", 1.0, 0.5)),
    ),
    MetricSpec(
        "nvwatch_gpu_power_tdp_watts",
        MetricType.GAUGE,
        "Default power limit of the board, its TDP (nvidia-smi power.default_limit).",
        Scope.GPU,
        "nvmlDeviceGetPowerManagementDefaultLimit (mW / 1000), read once",
        _one("power_tdp_watts", NvidiaSmi("power.default_limit", 1.0, 0.5)),
    ),
    MetricSpec(
        "nvwatch_gpu_energy_joules_total",
        MetricType.COUNTER,
        "Energy consumed by the GPU since the driver was loaded.",
        Scope.GPU,
        "field NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION (83), else "
        "nvmlDeviceGetTotalEnergyConsumption (mJ / 1000)",
        _one("energy_joules"),
        when="GPUs before Volta",
    ),
    MetricSpec(
        "nvwatch_gpu_temperature_celsius",
        MetricType.GAUGE,
        "Temperature by sensor: gpu (die) or memory (HBM).",
        Scope.GPU,
        "gpu: nvmlDeviceGetTemperatureV (nvmlDeviceGetTemperature on old drivers); "
        "memory: field NVML_FI_DEV_MEMORY_TEMP (82)",
        _by(
            ("gpu", "temperature_gpu_celsius"),
            ("memory", "temperature_memory_celsius"),
            smi={
                "gpu": NvidiaSmi("temperature.gpu", 1.0, 2.0),
                "memory": NvidiaSmi("temperature.memory", 1.0, 2.0),
            },
        ),
        own_labels=("sensor",),
        when="memory: boards without an HBM sensor (GDDR: GeForce, T4)",
    ),
    MetricSpec(
        "nvwatch_gpu_temperature_threshold_celsius",
        MetricType.GAUGE,
        "Temperature thresholds: slowdown, shutdown, gpu_max, memory_max.",
        Scope.GPU,
        "nvmlDeviceGetTemperatureThreshold (SLOWDOWN, SHUTDOWN, GPU_MAX, MEM_MAX), read once",
        _by(
            ("slowdown", "threshold_slowdown_celsius"),
            ("shutdown", "threshold_shutdown_celsius"),
            ("gpu_max", "threshold_gpu_max_celsius"),
            ("memory_max", "threshold_memory_max_celsius"),
        ),
        own_labels=("threshold",),
        when="gpu_max/memory_max: boards that do not report them",
    ),
    MetricSpec(
        "nvwatch_gpu_clock_hertz",
        MetricType.GAUGE,
        "Current clock frequency by domain: sm, memory, graphics.",
        Scope.GPU,
        "nvmlDeviceGetClockInfo (SM, MEM, GRAPHICS; MHz x 1e6)",
        _by(
            ("sm", "clock_sm_hertz"),
            ("memory", "clock_memory_hertz"),
            ("graphics", "clock_graphics_hertz"),
            smi={
                "sm": NvidiaSmi("clocks.sm", 1e6, 60e6, 0.05),
                "memory": NvidiaSmi("clocks.mem", 1e6, 1e6),
            },
        ),
        own_labels=("clock",),
    ),
    MetricSpec(
        "nvwatch_gpu_clock_max_hertz",
        MetricType.GAUGE,
        "Maximum clock frequency by domain: sm, memory, graphics.",
        Scope.GPU,
        "nvmlDeviceGetMaxClockInfo (SM, MEM, GRAPHICS; MHz x 1e6), read once",
        _by(
            ("sm", "clock_sm_max_hertz"),
            ("memory", "clock_memory_max_hertz"),
            ("graphics", "clock_graphics_max_hertz"),
            smi={"sm": NvidiaSmi("clocks.max.sm", 1e6, 1e6)},
        ),
        own_labels=("clock",),
    ),
    MetricSpec(
        "nvwatch_gpu_clock_event_active",
        MetricType.GAUGE,
        "1 while a clock-event (throttle) reason is active: idle, applications_clocks, "
        "sw_power_cap, hw_slowdown, sync_boost, sw_thermal_slowdown, hw_thermal_slowdown, "
        "hw_power_brake, display_clocks.",
        Scope.GPU,
        "nvmlDeviceGetCurrentClocksEventReasons bits, for the bits in "
        "nvmlDeviceGetSupportedClocksEventReasons (the *Throttle* calls on old drivers)",
        _each("clock_events"),
        own_labels=("reason",),
        when="a reason the GPU does not list as supported",
    ),
    MetricSpec(
        "nvwatch_gpu_throttle_seconds_total",
        MetricType.COUNTER,
        "Time clocks were held below target, by NVML violation policy: power, thermal, "
        "sync_boost, board_limit, low_utilization, reliability.",
        Scope.GPU,
        "nvmlDeviceGetViolationStatus per NVML_PERF_POLICY_* (.violationTime ns / 1e9)",
        _each("throttle_seconds"),
        own_labels=("reason",),
        when="policies the GPU answers NotSupported (GeForce: all)",
    ),
    MetricSpec(
        "nvwatch_gpu_fan_speed_ratio",
        MetricType.GAUGE,
        "Fan speed as a fraction of maximum.",
        Scope.GPU,
        "nvmlDeviceGetFanSpeed (percent / 100)",
        _one("fan_speed_ratio"),
        when="boards without a fan of their own (passively cooled data-centre GPUs)",
    ),
    MetricSpec(
        "nvwatch_gpu_pcie_throughput_bytes_per_second",
        MetricType.GAUGE,
        "PCIe throughput over NVML's last 20 ms window, by direction tx/rx.",
        Scope.GPU,
        "nvmlDeviceGetPcieThroughput (TX_BYTES, RX_BYTES), in KiB/s x 1024 (see "
        "agent/sources/nvml/units.py: the unit is settled there); not in --query-gpu, "
        "nvidia-smi dmon -s t shows it",
        _by(("tx", "pcie_tx_bytes_per_second"), ("rx", "pcie_rx_bytes_per_second")),
        own_labels=("direction",),
    ),
    MetricSpec(
        "nvwatch_gpu_pcie_replays_total",
        MetricType.COUNTER,
        "PCIe replay counter (link-level retransmissions).",
        Scope.GPU,
        "nvmlDeviceGetPcieReplayCounter",
        _one("pcie_replays"),
    ),
    MetricSpec(
        "nvwatch_gpu_pcie_link_generation",
        MetricType.GAUGE,
        "PCIe link generation, kind current or max.",
        Scope.GPU,
        "nvmlDeviceGetCurrPcieLinkGeneration, nvmlDeviceGetMaxPcieLinkGeneration (read once)",
        _by(
            ("current", "pcie_link_generation_current"),
            ("max", "pcie_link_generation_max"),
            smi={"max": NvidiaSmi("pcie.link.gen.max")},
        ),
        own_labels=("kind",),
    ),
    MetricSpec(
        "nvwatch_gpu_pcie_link_width",
        MetricType.GAUGE,
        "PCIe link width in lanes, kind current or max.",
        Scope.GPU,
        "nvmlDeviceGetCurrPcieLinkWidth, nvmlDeviceGetMaxPcieLinkWidth (read once)",
        _by(
            ("current", "pcie_link_width_current"),
            ("max", "pcie_link_width_max"),
            smi={"max": NvidiaSmi("pcie.link.width.max")},
        ),
        own_labels=("kind",),
    ),
    MetricSpec(
        "nvwatch_gpu_ecc_errors_total",
        MetricType.COUNTER,
        "ECC errors by type (corrected/uncorrected) and scope (volatile since driver load, "
        "aggregate over the board's life).",
        Scope.GPU,
        "nvmlDeviceGetTotalEccErrors (CORRECTED/UNCORRECTED x VOLATILE/AGGREGATE)",
        (
            Series(Field("ecc_corrected_volatile"), ("corrected", "volatile")),
            Series(Field("ecc_corrected_aggregate"), ("corrected", "aggregate")),
            Series(
                Field("ecc_uncorrected_volatile"),
                ("uncorrected", "volatile"),
                nvidia_smi=NvidiaSmi("ecc.errors.uncorrected.volatile.total"),
            ),
            Series(Field("ecc_uncorrected_aggregate"), ("uncorrected", "aggregate")),
        ),
        own_labels=("type", "scope"),
        when="boards without ECC (GeForce) or with ECC disabled",
    ),
    MetricSpec(
        "nvwatch_gpu_retired_pages",
        MetricType.GAUGE,
        "Memory pages retired, by cause: sbe (multiple single-bit) or dbe (double-bit).",
        Scope.GPU,
        "nvmlDeviceGetRetiredPages (MULTIPLE_SINGLE_BIT_ECC_ERRORS, DOUBLE_BIT_ECC_ERROR), "
        "the count of pages",
        _by(("sbe", "retired_pages_sbe"), ("dbe", "retired_pages_dbe")),
        own_labels=("cause",),
        when="boards without page retirement (GeForce; Ampere and later remap rows instead)",
    ),
    MetricSpec(
        "nvwatch_gpu_retired_pages_pending",
        MetricType.GAUGE,
        "1 if a page retirement is pending until the next driver reload.",
        Scope.GPU,
        "nvmlDeviceGetRetiredPagesPendingStatus",
        _one("retired_pages_pending"),
        when="boards without page retirement",
    ),
    MetricSpec(
        "nvwatch_gpu_remapped_rows",
        MetricType.GAUGE,
        "HBM row remapping (Ampere+): correctable, uncorrectable, pending (1/0), failure (1/0).",
        Scope.GPU,
        "nvmlDeviceGetRemappedRows (corrRows, uncRows, isPending, failureOccurred)",
        _by(
            ("correctable", "remapped_rows_correctable"),
            ("uncorrectable", "remapped_rows_uncorrectable"),
            ("pending", "remapped_rows_pending"),
            ("failure", "remapped_rows_failure"),
        ),
        own_labels=("kind",),
        when="GPUs before Ampere",
    ),
    MetricSpec(
        "nvwatch_gpu_xid_errors_total",
        MetricType.COUNTER,
        "XID critical error events of the GPU since boot (from the kernel log; since the agent "
        "started where the log is unreadable), by XID code.",
        Scope.GPU,
        "the driver's NVRM Xid lines in the kernel log (/dev/kmsg, --kmsg-path), read "
        "since boot and then as they come, each PCI address matched to its GPU "
        "(agent/sources/nvml/kmsg.py); nvmlEventSetWait on NVML_EVENT_TYPE_XID_CRITICAL_ERROR "
        "only brings the next read forward. Per code the count is max(log lines, events), "
        "so one XID counts once. Kernel log unreadable (`nvwatch doctor` says why): the "
        "events alone, counted since the agent started (agent/sources/nvml/xid.py)",
        _each("xid_counts", sort=True),
        own_labels=("xid",),
        when="until that GPU's first XID: in this boot's kernel log, or without a readable "
        "kernel log, since the agent started",
    ),
    MetricSpec(
        "nvwatch_gpu_sm_active_ratio",
        MetricType.GAUGE,
        "GPM: fraction of time SMs had at least one warp resident (Hopper+).",
        Scope.GPU,
        "nvmlGpmMetricsGet NVML_GPM_METRIC_SM_UTIL (percent / 100)",
        _one("sm_active_ratio"),
        when=_HOPPER,
    ),
    MetricSpec(
        "nvwatch_gpu_sm_occupancy_ratio",
        MetricType.GAUGE,
        "GPM: resident warps as a fraction of the maximum (Hopper+).",
        Scope.GPU,
        "nvmlGpmMetricsGet NVML_GPM_METRIC_SM_OCCUPANCY (percent / 100)",
        _one("sm_occupancy_ratio"),
        when=_HOPPER,
    ),
    MetricSpec(
        "nvwatch_gpu_tensor_active_ratio",
        MetricType.GAUGE,
        "GPM: fraction of time any tensor pipe was active (Hopper+).",
        Scope.GPU,
        "nvmlGpmMetricsGet NVML_GPM_METRIC_ANY_TENSOR_UTIL (percent / 100)",
        _one("tensor_active_ratio"),
        when=_HOPPER,
    ),
    MetricSpec(
        "nvwatch_gpu_dram_active_ratio",
        MetricType.GAUGE,
        "GPM: fraction of peak DRAM bandwidth used (Hopper+).",
        Scope.GPU,
        "nvmlGpmMetricsGet NVML_GPM_METRIC_DRAM_BW_UTIL (percent / 100)",
        _one("dram_active_ratio"),
        when=_HOPPER,
    ),
    MetricSpec(
        "nvwatch_gpu_mig_mode",
        MetricType.GAUGE,
        "MIG mode of the GPU: 1 enabled, 0 disabled; kind=current now, kind=pending after "
        "the next GPU reset (nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending).",
        Scope.GPU,
        "nvmlDeviceGetMigMode (current, pending)",
        _by(("current", "mig_mode_current"), ("pending", "mig_mode_pending")),
        own_labels=("kind",),
        when="GPUs without MIG (before Ampere, GeForce, T4)",
    ),
    MetricSpec(
        "nvwatch_gpu_process_memory_bytes",
        MetricType.GAUGE,
        "Device memory held by a compute process (the largest processes, capped per GPU).",
        Scope.PROCESS,
        "nvmlDeviceGetComputeRunningProcesses_v3 .usedGpuMemory; process and user from "
        "psutil on the pid; job (Slurm job id), pod and namespace (Kubernetes) from "
        "attribution's cache (--attribution), empty when it is off or does not know the pid",
        (Series(Field("memory_bytes"), _PROCESS_LABELS),),
        own_labels=_PROCESS_OWN_LABELS,
        when="no compute process on the GPU",
    ),
    MetricSpec(
        "nvwatch_gpu_process_sm_utilization_ratio",
        MetricType.GAUGE,
        "Fraction of the sample period in which the process had a kernel running on the "
        "GPU's SMs, its most recent sample since the previous poll (0 when NVML took none: "
        "the process was idle); the same processes as nvwatch_gpu_process_memory_bytes.",
        Scope.PROCESS,
        "nvmlDeviceGetProcessUtilization(lastSeenTimeStamp = the newest sample of the "
        "previous poll) .smUtil (percent / 100; nvidia-smi pmon -s u, sm); labels as "
        "nvwatch_gpu_process_memory_bytes",
        (Series(Field("sm_utilization_ratio"), _PROCESS_LABELS),),
        own_labels=_PROCESS_OWN_LABELS,
        when=_PROCESS_UTIL_ABSENT,
    ),
    MetricSpec(
        "nvwatch_gpu_process_memory_utilization_ratio",
        MetricType.GAUGE,
        "Fraction of the sample period in which the process read or wrote device memory, its "
        "most recent sample since the previous poll (0 when NVML took none).",
        Scope.PROCESS,
        "nvmlDeviceGetProcessUtilization .memUtil (percent / 100; nvidia-smi pmon -s u, "
        "mem); labels as nvwatch_gpu_process_memory_bytes",
        (Series(Field("memory_utilization_ratio"), _PROCESS_LABELS),),
        own_labels=_PROCESS_OWN_LABELS,
        when=_PROCESS_UTIL_ABSENT,
    ),
)

_MIG_OFF = "GPUs not in MIG mode, and GPUs in MIG mode without instances"
_MIG_GPM = "MIG instances before Hopper (no GPM), or on the first poll"

MIG_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "nvwatch_mig_info",
        MetricType.GAUGE,
        "A MIG device (GPU instance + compute instance) of the GPU; value is always 1. "
        "mig_uuid is the id CUDA_VISIBLE_DEVICES, Kubernetes and Slurm give the instance; "
        "profile its GPU-instance profile (1g.10gb ... 7g.80gb).",
        Scope.MIG,
        "nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetUUID, GetGpuInstanceId, "
        "GetComputeInstanceId on the MIG device; nvmlGpuInstanceGetInfo .profileId named by "
        "nvmlDeviceGetGpuInstanceProfileInfo (nvidia-smi -L)",
        (Series(1.0, (Field("mig_uuid"), Field("profile"))),),
        own_labels=("mig_uuid", "profile"),
        when=_MIG_OFF,
    ),
    MetricSpec(
        "nvwatch_mig_memory_total_bytes",
        MetricType.GAUGE,
        "Device memory of the MIG device's GPU instance (shared by its compute instances).",
        Scope.MIG,
        "nvmlDeviceGetMemoryInfo(MIG device, nvmlMemory_v2) .total",
        _one("memory_total_bytes"),
        when=_MIG_OFF,
    ),
    MetricSpec(
        "nvwatch_mig_memory_used_bytes",
        MetricType.GAUGE,
        "Device memory in use in the MIG device's GPU instance.",
        Scope.MIG,
        "nvmlDeviceGetMemoryInfo(MIG device, nvmlMemory_v2) .used",
        _one("memory_used_bytes"),
        when=_MIG_OFF,
    ),
    MetricSpec(
        "nvwatch_mig_sm_active_ratio",
        MetricType.GAUGE,
        "GPM: fraction of time the GPU instance's SMs had a warp resident (Hopper+).",
        Scope.MIG,
        "nvmlGpmMigSampleGet per GPU instance, nvmlGpmMetricsGet NVML_GPM_METRIC_SM_UTIL",
        _one("sm_active_ratio"),
        when=_MIG_GPM,
    ),
    MetricSpec(
        "nvwatch_mig_sm_occupancy_ratio",
        MetricType.GAUGE,
        "GPM: warps resident on the GPU instance's SMs over the maximum (Hopper+).",
        Scope.MIG,
        "nvmlGpmMigSampleGet per GPU instance, nvmlGpmMetricsGet NVML_GPM_METRIC_SM_OCCUPANCY",
        _one("sm_occupancy_ratio"),
        when=_MIG_GPM,
    ),
    MetricSpec(
        "nvwatch_mig_tensor_active_ratio",
        MetricType.GAUGE,
        "GPM: fraction of time the GPU instance's tensor pipes were busy (Hopper+).",
        Scope.MIG,
        "nvmlGpmMigSampleGet per GPU instance, nvmlGpmMetricsGet NVML_GPM_METRIC_ANY_TENSOR_UTIL",
        _one("tensor_active_ratio"),
        when=_MIG_GPM,
    ),
    MetricSpec(
        "nvwatch_mig_dram_active_ratio",
        MetricType.GAUGE,
        "GPM: fraction of the GPU instance's peak DRAM bandwidth used (Hopper+).",
        Scope.MIG,
        "nvmlGpmMigSampleGet per GPU instance, nvmlGpmMetricsGet NVML_GPM_METRIC_DRAM_BW_UTIL",
        _one("dram_active_ratio"),
        when=_MIG_GPM,
    ),
)

ALLOCATION_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "nvwatch_gpu_allocation_info",
        MetricType.GAUGE,
        "Who a GPU (or MIG instance, by its own uuid) is allocated to: one series per "
        "owner, value always 1; labels a scheduler has no notion of are empty. Join it at "
        "query time: GPU series never carry job labels.",
        Scope.ALLOCATION,
        "--attribution slurm: /proc/<pid>/cgroup (slurmstepd cgroup path), the job-mapping "
        "directory (--hpc-job-mapping-dir), /proc/<pid>/environ; kubernetes: kubelet "
        "pod-resources v1 List (--kubelet-socket) and the kubepods cgroup path of each pid",
        (
            Series(
                1.0,
                (
                    Field("owner.scheduler"),
                    Field("owner.job_id"),
                    Field("owner.user"),
                    Field("owner.account"),
                    Field("owner.pod"),
                    Field("owner.namespace"),
                    Field("owner.container"),
                ),
            ),
        ),
        own_labels=("scheduler", "job_id", "user", "account", "pod", "namespace", "container"),
        when="attribution off, or no job or pod holds the GPU",
    ),
)

NVLINK_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "nvwatch_nvlink_up",
        MetricType.GAUGE,
        "1 if the NVLink link is active, else 0.",
        Scope.NVLINK,
        "field NVML_FI_DEV_NVLINK_GET_STATE per link, else nvmlDeviceGetNvLinkState; with "
        "--nvlink-detail gpu the number of links up",
        _one("up"),
        when="GPUs without NVLink (PCIe boards)",
    ),
    MetricSpec(
        "nvwatch_nvlink_transmit_bytes_total",
        MetricType.COUNTER,
        "Data bytes transmitted on the NVLink link.",
        Scope.NVLINK,
        "field NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX (138), cumulative KiB x 1024",
        _one("transmit_bytes"),
        when="GPUs without NVLink, or without NVLink throughput fields (before Volta)",
    ),
    MetricSpec(
        "nvwatch_nvlink_receive_bytes_total",
        MetricType.COUNTER,
        "Data bytes received on the NVLink link.",
        Scope.NVLINK,
        "field NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX (139), cumulative KiB x 1024",
        _one("receive_bytes"),
        when="GPUs without NVLink, or without NVLink throughput fields (before Volta)",
    ),
    MetricSpec(
        "nvwatch_nvlink_errors_total",
        MetricType.COUNTER,
        "NVLink data-link error counters by type: crc_flit, crc_data, replay, recovery, ecc.",
        Scope.NVLINK,
        "fields NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY,ECC}_ERROR_COUNT_L<n> "
        "(links 0-11), else nvmlDeviceGetNvLinkErrorCounter",
        _each("errors"),
        own_labels=("type",),
        when="GPUs without NVLink; ecc before Ampere",
    ),
    MetricSpec(
        "nvwatch_nvlink_speed_bytes_per_second",
        MetricType.GAUGE,
        "NVLink line rate per direction.",
        Scope.NVLINK,
        "field NVML_FI_DEV_NVLINK_GET_SPEED (MB/s x 1e6), else the nominal rate of "
        "nvmlDeviceGetNvLinkVersion",
        _one("speed_bytes_per_second"),
        when="GPUs without NVLink",
    ),
    MetricSpec(
        "nvwatch_nvlink_remote_info",
        MetricType.GAUGE,
        "What the far end of the link is (gpu, switch or cpu); value is always 1.",
        Scope.NVLINK,
        "nvmlDeviceGetNvLinkRemoteDeviceType, nvmlDeviceGetNvLinkRemotePciInfo_v2",
        (
            Series(
                1.0,
                (Field("remote_type"), Field("remote_gpu"), Field("remote_pci_bus_id")),
                present_if=Field("remote_type"),
            ),
        ),
        own_labels=("remote_type", "remote_gpu", "remote_pci_bus_id"),
        when="GPUs without NVLink, and with --nvlink-detail gpu",
    ),
)

_SYSFS_PORT = "/sys/class/infiniband/<device>/ports/<port>"
_NO_PMA = "ports whose counters read N/A (no PMA), e.g. some RoCE functions"

INFINIBAND_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "nvwatch_ib_info",
        MetricType.GAUGE,
        "Descriptive fields of an InfiniBand/RoCE HCA; value is always 1.",
        Scope.IB_DEVICE,
        "/sys/class/infiniband/<device>/{board_id,fw_ver,hca_type,node_guid}",
        (
            Series(
                1.0,
                (
                    Field("name"),
                    Field("board_id"),
                    Field("firmware_version"),
                    Field("hca_type"),
                    Field("node_guid"),
                ),
            ),
        ),
        own_labels=("device", "board_id", "firmware_version", "hca_type", "node_guid"),
        when="nodes without /sys/class/infiniband (no HCA)",
    ),
    MetricSpec(
        "nvwatch_ib_port_info",
        MetricType.GAUGE,
        "Port link layer and the GPUs closest to it on PCIe; value is always 1.",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/link_layer; nearest_gpus from the PCIe tree of "
        "/sys/class/infiniband/<device>/device and the GPUs' NVML bus ids",
        (Series(1.0, (Field("link_layer"), Field("nearest_gpus"))),),
        own_labels=("link_layer", "nearest_gpus"),
    ),
    MetricSpec(
        "nvwatch_ib_port_state",
        MetricType.GAUGE,
        "Logical port state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/state (the number before ':')",
        _one("state"),
    ),
    MetricSpec(
        "nvwatch_ib_port_physical_state",
        MetricType.GAUGE,
        "Physical port state: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, "
        "5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test.",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/phys_state (the number before ':')",
        _one("physical_state"),
    ),
    MetricSpec(
        "nvwatch_ib_port_rate_bytes_per_second",
        MetricType.GAUGE,
        "Nominal link rate of the port (sysfs rate, Gb/s x 125,000,000).",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/rate",
        _one("rate_bytes_per_second"),
    ),
    MetricSpec(
        "nvwatch_ib_port_transmit_bytes_total",
        MetricType.COUNTER,
        "Data bytes transmitted (port_xmit_data x 4).",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/counters/port_xmit_data (counters_ext/port_xmit_data_64 where "
        "present), 4-octet words x 4",
        _one("transmit_bytes"),
        when=_NO_PMA,
    ),
    MetricSpec(
        "nvwatch_ib_port_receive_bytes_total",
        MetricType.COUNTER,
        "Data bytes received (port_rcv_data x 4).",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/counters/port_rcv_data (or counters_ext/port_rcv_data_64), x 4",
        _one("receive_bytes"),
        when=_NO_PMA,
    ),
    MetricSpec(
        "nvwatch_ib_port_transmit_packets_total",
        MetricType.COUNTER,
        "Packets transmitted.",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/counters/port_xmit_packets (or counters_ext/port_xmit_packets_64)",
        (Series(Field("counters", key="port_xmit_packets")),),
        when=_NO_PMA,
    ),
    MetricSpec(
        "nvwatch_ib_port_receive_packets_total",
        MetricType.COUNTER,
        "Packets received.",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/counters/port_rcv_packets (or counters_ext/port_rcv_packets_64)",
        (Series(Field("counters", key="port_rcv_packets")),),
        when=_NO_PMA,
    ),
    MetricSpec(
        "nvwatch_ib_port_transmit_wait_total",
        MetricType.COUNTER,
        "Ticks the port had data to send but no credits (congestion), port_xmit_wait.",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/counters/port_xmit_wait",
        (Series(Field("counters", key="port_xmit_wait")),),
        when=_NO_PMA,
    ),
    MetricSpec(
        "nvwatch_ib_port_errors_total",
        MetricType.COUNTER,
        "Port error counters by type: symbol, link_error_recovery, link_downed, receive, "
        "receive_remote_physical, receive_switch_relay, transmit_discards, "
        "transmit_constraint, receive_constraint, local_link_integrity, "
        "excessive_buffer_overrun, vl15_dropped.",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/counters/<file> (symbol_error, link_error_recovery, link_downed, "
        "port_rcv_errors, ...; the map is ERROR_COUNTER_TYPES in "
        "agent/sources/infiniband_parse.py)",
        _each("errors"),
        own_labels=("type",),
        when=_NO_PMA,
    ),
    MetricSpec(
        "nvwatch_ib_port_hw_events_total",
        MetricType.COUNTER,
        "mlx5 hw_counters of the port, by file name. By default only those that say the "
        "fabric loses or congests traffic (out_of_sequence, local_ack_timeout_err; on RoCE "
        "np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled); the others count "
        "operations or per-QP application errors, exported with --ib-hw-counters=all.",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/hw_counters/<file> (the default set is DEFAULT_HW_COUNTERS in "
        "agent/sources/infiniband_parse.py)",
        _each("hw_counters", sort=True),
        own_labels=("counter",),
        when="HCAs without hw_counters (not mlx5); a counter outside the default set "
        "unless --ib-hw-counters=all",
    ),
    MetricSpec(
        "nvwatch_ib_port_reading_saturated",
        MetricType.GAUGE,
        "1 while a narrow IB counter sits exactly at the maximum of its PortCounters "
        "width and has stopped counting (a reading above it comes from a wider field "
        "that still counts); no series for a counter that is not (a 0 per counter per "
        "port cost 80 series on a DGX H100 and said nothing). Only counters that can fill: not the "
        "switch-only port_rcv_switch_relay_errors, port_xmit_constraint_errors, "
        "port_rcv_constraint_errors, which never count on an HCA.",
        Scope.IB_PORT,
        f"{_SYSFS_PORT}/counters/<file> of the 4- to 32-bit PMA counters, compared with "
        "the all-ones value of that width (SATURATION_FLAGGED in "
        "agent/sources/infiniband_parse.py)",
        _each("pinned"),
        own_labels=("counter",),
        when=f"{_NO_PMA}; every counter off its maximum (the normal case)",
        always_declared=True,
    ),
)

HOST_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "nvwatch_host_cpu_utilization_ratio",
        MetricType.GAUGE,
        "Fraction of CPU time not idle since the previous poll, all cores.",
        Scope.HOST,
        "psutil.cpu_times(), difference of two polls",
        _one("cpu_utilization_ratio"),
        when="the first poll (no interval to measure yet)",
    ),
    MetricSpec(
        "nvwatch_host_cpu_iowait_ratio",
        MetricType.GAUGE,
        "Fraction of CPU time waiting on I/O since the previous poll, all cores.",
        Scope.HOST,
        "psutil.cpu_times().iowait, difference of two polls",
        _one("cpu_iowait_ratio"),
        when="the first poll; operating systems without iowait",
    ),
    MetricSpec(
        "nvwatch_host_memory_used_bytes",
        MetricType.GAUGE,
        "Host memory in use (total - available).",
        Scope.HOST,
        "psutil.virtual_memory() total - available",
        _one("memory_used_bytes"),
    ),
    MetricSpec(
        "nvwatch_host_memory_total_bytes",
        MetricType.GAUGE,
        "Host memory installed.",
        Scope.HOST,
        "psutil.virtual_memory().total",
        _one("memory_total_bytes"),
    ),
    MetricSpec(
        "nvwatch_host_load1",
        MetricType.GAUGE,
        "One-minute load average.",
        Scope.HOST,
        "psutil.getloadavg()[0]",
        _one("load1"),
    ),
)

_IPMI_READING = (
    "Get Sensor Reading (IPMI 2.0 NetFn 0x04, cmd 0x2D) of each sensor in the BMC's SDR "
    "repository (full and compact records the BMC owns)"
)
_BMC_PROBE = "/probe?target=&module= (agent/sources/bmc/ipmi.py over IPMI 2.0 RMCP+)"
_NO_SENSOR = (
    "a sensor whose reading is unavailable (never 0), modules without the ipmi collector, "
    "and a BMC that could not be read"
)

# A BMC, probed at scrape time (multi-target, like ipmi_exporter): these series come from
# /probe, never from /metrics, and carry the labels of the scrape job (cluster, instance
# = the node's name, rack, node_class, bmc) besides their own.
BMC_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "nvwatch_bmc_up",
        MetricType.GAUGE,
        "1 if the probe read the BMC (an IPMI 2.0 session opened and its sensors read), 0 if "
        "it could not: no answer within the module's timeout, a refused port, wrong "
        "credentials, a malformed reply. The reason is a comment in the probe's body.",
        Scope.BMC,
        _BMC_PROBE + ": RMCP+ session set-up (Open Session, RAKP 1-4), cipher suite 3",
        _one("up"),
        when="/metrics: a BMC's series come from its probe, /probe?target=&module=",
    ),
    MetricSpec(
        "nvwatch_bmc_collector_up",
        MetricType.GAUGE,
        "Per collector of the probe's module, as ipmi_exporter's ipmi_up{collector}: 1 if "
        "it read its part (ipmi: the SDR's sensors; dcmi: the system's power), 0 if not. "
        "All 0 when the BMC could not be read; dcmi alone 0 from a BMC without DCMI power.",
        Scope.BMC,
        _BMC_PROBE + ": the SDR walk (ipmi), DCMI Get Power Reading (dcmi)",
        _by(("ipmi", "ipmi_up"), ("dcmi", "dcmi_up")),
        own_labels=("collector",),
        when="collectors the module does not list",
    ),
    MetricSpec(
        "nvwatch_bmc_read_duration_seconds",
        MetricType.GAUGE,
        "Wall time of the probe's read of the BMC, session set-up included; when it failed, "
        "the time until it gave up (at most the module's timeout).",
        Scope.BMC,
        "the probe's clock around the read (BmcReading.duration_s)",
        _one("duration_seconds"),
        when="a failed probe whose caller did not time it",
    ),
    MetricSpec(
        "nvwatch_bmc_power_watts",
        MetricType.GAUGE,
        'Power the BMC measures. method="dcmi" (sensor="dcmi"): the node\'s input power from '
        'DCMI Get Power Reading; method="sensor": every SDR sensor in watts, as the vendor '
        "defines it (node input, a supply's input or output).",
        Scope.BMC_SENSOR,
        "DCMI Get Power Reading (NetFn 0x2C, cmd 0x02, mode 1: current power); "
        + _IPMI_READING
        + " whose SDR base unit is watts (6), converted by the record's M, B and exponents",
        (Series(Field("watts"), (Field("method"),)),),
        own_labels=("method",),
        when="BMCs without DCMI power (dcmi: the dcmi collector) or without a watts sensor; "
        + _NO_SENSOR,
    ),
    MetricSpec(
        "nvwatch_bmc_temperature_celsius",
        MetricType.GAUGE,
        "Temperature a BMC sensor reads. entity: inlet (IPMI entity 0x37, DCMI 0x40, or a "
        "name matching the module's inlet_pattern), exhaust (a name matching "
        "exhaust_pattern), cpu (0x03, 0x41), board (0x07, 0x42), memory, power_supply, "
        "add_in_card, disk, chassis, other.",
        Scope.BMC_SENSOR,
        _IPMI_READING + " whose SDR base unit is degrees C (F and K converted); entity from "
        "the record's entity id (agent/sources/bmc/sensor_names.py)",
        (Series(Field("celsius"), (Field("entity"),)),),
        own_labels=("entity",),
        when="BMCs without temperature sensors; " + _NO_SENSOR,
    ),
    MetricSpec(
        "nvwatch_bmc_fan_speed_rpm",
        MetricType.GAUGE,
        "Speed of a fan as its BMC sensor reads it, in revolutions per minute.",
        Scope.BMC_SENSOR,
        _IPMI_READING + " whose SDR base unit is RPM (18)",
        _one("rpm"),
        when="BMCs without fan sensors; " + _NO_SENSOR,
    ),
    MetricSpec(
        "nvwatch_bmc_power_supply_present",
        MetricType.GAUGE,
        "1 if the power supply is in its bay (presence detected), 0 if it is not.",
        Scope.BMC_SENSOR,
        _IPMI_READING + " of type power supply (0x08), sensor-specific offset 0 "
        "(presence detected)",
        _one("supply_present"),
        when="BMCs without power supply sensors; " + _NO_SENSOR,
    ),
    MetricSpec(
        "nvwatch_bmc_power_supply_failed",
        MetricType.GAUGE,
        "1 if the power supply reports a failure or lost input (failure detected, AC lost, "
        "input lost or out of range), else 0.",
        Scope.BMC_SENSOR,
        _IPMI_READING + " of type power supply (0x08), sensor-specific offsets 1, 3 and 4",
        _one("supply_failed"),
        when="BMCs without power supply sensors; " + _NO_SENSOR,
    ),
    MetricSpec(
        "nvwatch_bmc_sensor_state",
        MetricType.GAUGE,
        "State of a threshold sensor or power supply: 0 nominal, 1 warning (a non-critical "
        "threshold crossed; a supply's predictive failure, or a supply not present), 2 "
        "critical (a critical or non-recoverable threshold crossed; a supply failed, "
        "without input or misconfigured). type: the IPMI sensor type as FreeIPMI names it.",
        Scope.BMC_SENSOR,
        _IPMI_READING + ": threshold comparison bits (byte 4, bits 0-5) of threshold "
        "sensors, sensor-specific offsets of power supplies",
        (Series(Field("state"), (Field("type_name"),)),),
        own_labels=("type",),
        when="discrete sensors other than power supplies; " + _NO_SENSOR,
    ),
)

# Slurm as the one agent of a cluster that runs `--sources scheduler` reads it
# (agent/sources/scheduler/): label values bounded by configuration (partitions, the
# account and user caps), never by the number of jobs.
_NOT_SCHEDULER = "agents without --sources scheduler (one agent per cluster reads Slurm)"
_SQUEUE = "squeue --json (REQUEST_JOB_INFO)"
_SINFO = "sinfo --json (REQUEST_NODE_INFO, REQUEST_PARTITION_INFO)"
_GPU_JOB = (
    "a job that asks for GPUs in any way Slurm takes (tres_per_job, tres_per_node, "
    "tres_per_task, tres_per_socket; typed or not)"
)

SCHEDULER_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "nvwatch_scheduler_gpus",
        MetricType.GAUGE,
        "GPUs of the partition's nodes by state: allocated to jobs, idle, or unavailable "
        "(the node is drained, down, not responding, failing, rebooting or reserved). A "
        "node in several partitions counts in each.",
        Scope.SCHEDULER_PARTITION,
        _SINFO + ": per node, gres (GPUs configured), gres_used (allocated), state and "
        "state_flags, partitions",
        _each("gpus"),
        own_labels=("state",),
        when=_NOT_SCHEDULER,
    ),
    MetricSpec(
        "nvwatch_scheduler_nodes_unavailable",
        MetricType.GAUGE,
        "Nodes with GPUs whose GPUs cannot take jobs, by reason class: not_responding, "
        "kill_task_failed, prolog_epilog, config_mismatch (less memory, cores or GPUs "
        "than configured), reboot, failing, reserved (a reservation or maintenance), "
        "drained and down (by an operator or a health check, in their own words), other.",
        Scope.SCHEDULER_PARTITION,
        _SINFO + ": per node, state, state_flags and reason (Slurm's own reason texts "
        "first, then the state)",
        _each("nodes_unavailable"),
        own_labels=("reason",),
        when=_NOT_SCHEDULER,
    ),
    MetricSpec(
        "nvwatch_scheduler_pending_gpus",
        MetricType.GAUGE,
        "GPUs requested by pending jobs (per node times nodes, per task times tasks, "
        "times the tasks of a pending array), by Slurm's pending reason in classes: "
        "resources, priority, limits (account, QOS, partition or array limits), "
        "dependency, held, other. A job pending on several partitions counts in each; "
        'accounts beyond --scheduler-max-accounts are account="other".',
        Scope.SCHEDULER_DEMAND,
        _SQUEUE + ": per pending " + _GPU_JOB + ", partition, account, state_reason, "
        "node_count, tasks, array_task_string",
        _each("pending_gpus"),
        own_labels=("reason",),
        when=_NOT_SCHEDULER,
    ),
    MetricSpec(
        "nvwatch_scheduler_oldest_pending_seconds",
        MetricType.GAUGE,
        "Seconds the longest-waiting pending GPU job of the partition has been eligible "
        "to start (held jobs and jobs waiting on another job do not count); 0 when none "
        "waits.",
        Scope.SCHEDULER_PARTITION,
        _SQUEUE + ": now - eligible_time of pending GPU jobs not held and not waiting "
        "on a dependency",
        _one("oldest_pending_seconds"),
        when=_NOT_SCHEDULER,
    ),
    MetricSpec(
        "nvwatch_scheduler_wait_seconds",
        MetricType.HISTOGRAM,
        "Queue wait of the GPU jobs that started since the source started, from eligible "
        "to start (submitted, released, dependency met) to started, by the partition "
        "they started in. The first refresh counts no job: it cannot tell when they started.",
        Scope.SCHEDULER_PARTITION,
        _SQUEUE + ": start_time - eligible_time of each GPU job seen started (running or "
        "ended within MinJobAge) for the first time",
        _each("wait.series"),
        when=_NOT_SCHEDULER,
    ),
    MetricSpec(
        "nvwatch_scheduler_account_wait_seconds",
        MetricType.HISTOGRAM,
        "Queue wait of the GPU jobs that started since the source started, as "
        "nvwatch_scheduler_wait_seconds counts them (the same jobs, buckets and sums), by "
        'account: accounts beyond --scheduler-max-accounts are account="other", a job '
        'without one account="none". An nvwatch extra beside the partition histogram: '
        "one per cluster, accounts x 16 series (14 buckets, _count, _sum).",
        Scope.SCHEDULER_ACCOUNT_WAIT,
        _SQUEUE + ": start_time - eligible_time of each GPU job seen started (running or "
        "ended within MinJobAge) for the first time, by its account",
        _each("wait.series"),
        when=_NOT_SCHEDULER,
    ),
    MetricSpec(
        "nvwatch_scheduler_allocated_gpu_seconds_total",
        MetricType.COUNTER,
        "GPUs times seconds held by the account's jobs in the partition since the source "
        "started: GPU-hours per account without accounting (rate() is GPUs in use).",
        Scope.SCHEDULER_DEMAND,
        _SQUEUE + ": per started GPU job, GPUs in gres_detail (the request once it "
        "ended) times its running time between two refreshes (start_time, end_time)",
        _one("allocated_gpu_seconds"),
        when=_NOT_SCHEDULER,
    ),
    MetricSpec(
        "nvwatch_scheduler_user_pending_gpus",
        MetricType.GAUGE,
        "GPUs requested by the user's pending jobs in the partition (all reasons); users "
        'beyond --scheduler-max-users are user="other".',
        Scope.SCHEDULER_USER,
        _SQUEUE + ": per pending " + _GPU_JOB + ", partition, user_name",
        _one("pending_gpus"),
        when=_NOT_SCHEDULER + "; --scheduler-max-users 0 (the default: per-user series are off)",
    ),
    MetricSpec(
        "nvwatch_scheduler_fairshare",
        MetricType.GAUGE,
        "The account's fair share as Slurm's multifactor priority sees it: shares_norm "
        "(its normalized share of the cluster), usage_effective (its normalized, decayed "
        "usage) and factor (the fair-share factor, 0..1).",
        Scope.SCHEDULER_ACCOUNT,
        "sshare --all --parsable2 (REQUEST_SHARE_INFO): NormShares, EffectvUsage, FairShare "
        "of each account row (under Fair Tree the factor is the best of its users')",
        _by(
            ("shares_norm", "shares_norm"),
            ("usage_effective", "usage_effective"),
            ("factor", "factor"),
        ),
        own_labels=("kind",),
        when=_NOT_SCHEDULER
        + "; clusters without accounting (no slurmdbd): absent, not 0; accounts beyond "
        "--scheduler-max-accounts; factor: under Fair Tree, an account without users",
    ),
)

AGENT_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "nvwatch_agent_build_info",
        MetricType.GAUGE,
        "nvwatch build; value is always 1.",
        Scope.AGENT,
        "agent.__version__",
        (Series(1.0, (Field("version"),)),),
        own_labels=("version",),
    ),
    MetricSpec(
        "nvwatch_agent_simulated",
        MetricType.GAUGE,
        "1 when this agent reads a simulated node (--simulate PROFILE, NVWATCH_SIMULATE) "
        "instead of real hardware, with the simulated profile; absent on real hardware. "
        "Its GPUs, serials and UUIDs are made up: a Prometheus that must see real data "
        "alerts on it (mixin config production: true).",
        Scope.AGENT,
        "the agent's configuration: --simulate PROFILE (agent/config.py AgentConfig.simulate)",
        (Series(1.0, (Field("simulated_profile"),), present_if=Field("simulated_profile")),),
        own_labels=("profile",),
        when="real hardware (no --simulate), the only place it matters",
    ),
    MetricSpec(
        "nvwatch_agent_source_up",
        MetricType.GAUGE,
        "1 if the source's last poll succeeded, also when it found its hardware absent "
        "(see nvwatch_agent_source_absent); 0 if it failed or timed out.",
        Scope.SOURCE,
        "the poller's record of the source's last poll (agent/poller.py)",
        _one("up"),
    ),
    MetricSpec(
        "nvwatch_agent_source_absent",
        MetricType.GAUGE,
        "1 if the source's hardware does not exist on this node (no NVIDIA GPU, no HCA "
        "on PCI), else 0. An absent source is up and counts no errors.",
        Scope.SOURCE,
        "the poller's record of the source's last poll: the source found no such "
        "hardware among the PCI functions in /sys/bus/pci/devices (agent/sources/presence.py)",
        _one("absent"),
    ),
    MetricSpec(
        "nvwatch_agent_poll_duration_seconds",
        MetricType.GAUGE,
        "Wall time of the source's last poll.",
        Scope.SOURCE,
        "the poller's clock around the source's collect()",
        _one("duration_seconds"),
    ),
    MetricSpec(
        "nvwatch_agent_source_errors_total",
        MetricType.COUNTER,
        "Failed polls of the source since the agent started.",
        Scope.SOURCE,
        "the poller's count of failed or timed-out polls",
        _one("errors_total"),
    ),
    MetricSpec(
        "nvwatch_agent_parse_errors_total",
        MetricType.COUNTER,
        "Values the source read and dropped as invalid since the agent started: garbage, "
        "or a counter wider than 64 bits. Counted once per poll that "
        "drops it; a counter the kernel reports as N/A (no PMA) is not an error.",
        Scope.SOURCE,
        "the source's count of sysfs values that failed to parse (NotAValue in "
        "agent/sources/infiniband_parse.py), read by the poller (agent/poller.py)",
        _one("parse_errors_total"),
        when="sources that parse no text files (nvml, host)",
    ),
    MetricSpec(
        "nvwatch_agent_last_poll_timestamp_seconds",
        MetricType.GAUGE,
        "Unix time the last poll cycle completed; the age of the data served.",
        Scope.AGENT,
        "time.time() when the poll cycle completed",
        _one("completed_at"),
    ),
    MetricSpec(
        "nvwatch_agent_http_requests_refused_total",
        MetricType.COUNTER,
        "Connections and requests the HTTP server refused or cut off since the agent "
        "started, by reason: connection_limit (503 at the limit), evicted (closed to make "
        "room), header_timeout, write_timeout, malformed (400/505), too_large (414/431), "
        "method_not_allowed, unauthorized, auth_busy (429: bcrypt budget spent), "
        "rate_limited, tls_handshake, client_cert_san, http_on_tls_port, accept_failed.",
        Scope.AGENT,
        "the HTTP server's counts as of the last poll (agent/server/limits.py)",
        _each("http_refused", sort=True),
        own_labels=("reason",),
        when="runs without the HTTP server (nvwatch dump)",
    ),
    MetricSpec(
        "nvwatch_agent_http_connections_open",
        MetricType.GAUGE,
        "HTTP connections open when the last poll completed.",
        Scope.AGENT,
        "the HTTP server's count of open connections (agent/server/loop.py)",
        _one("http_connections_open"),
        when="runs without the HTTP server (nvwatch dump)",
    ),
    MetricSpec(
        "nvwatch_agent_http_connections_limit",
        MetricType.GAUGE,
        "Connections the HTTP server holds open at most; beyond it, it evicts the one "
        "waiting longest for a request, else refuses with 503.",
        Scope.AGENT,
        "ServerLimits.max_connections, lowered to fit RLIMIT_NOFILE (agent/server/limits.py)",
        _one("http_connections_limit"),
        when="runs without the HTTP server (nvwatch dump)",
    ),
)

CATALOGUE: tuple[MetricSpec, ...] = (
    *GPU_METRICS,
    *MIG_METRICS,
    *ALLOCATION_METRICS,
    *NVLINK_METRICS,
    *INFINIBAND_METRICS,
    *HOST_METRICS,
    *BMC_METRICS,
    *SCHEDULER_METRICS,
    *AGENT_METRICS,
)

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in CATALOGUE}

# Histogram families' samples go by other names (`_bucket`, `_count`, `_sum`).
_HISTOGRAM_SAMPLES = ("_bucket", "_count", "_sum")
#: Every name a PromQL expression may read: each family's, and its histograms' samples.
SAMPLE_NAMES: frozenset[str] = frozenset(
    name
    for spec in CATALOGUE
    for name in (
        [spec.name + suffix for suffix in _HISTOGRAM_SAMPLES]
        if spec.type is MetricType.HISTOGRAM
        else [spec.name]
    )
)


def spec(name: str) -> MetricSpec:
    """The catalogue entry for `name`, a registered source's too; KeyError for a family
    the contract does not know."""
    found = BY_NAME.get(name)
    if found is not None:
        return found
    for declared in declared_specs():
        if declared.name == name:
            return declared
    raise KeyError(name)


def of_scope(*scopes: str) -> tuple[MetricSpec, ...]:
    """Catalogue entries of these scopes, in catalogue order (the exposition's order)."""
    return tuple(s for s in every_spec() if s.scope in scopes)


def declared_specs() -> tuple[MetricSpec, ...]:
    """The families of registered sources, which the built-in CATALOGUE does not hold."""
    from nvwatch.agent.sources.declaration import declared_metrics

    return declared_metrics()


def every_spec() -> tuple[MetricSpec, ...]:
    """The whole catalogue as a reader of it (docs, lookups) sees it: CATALOGUE, then the
    families of registered sources."""
    return (*CATALOGUE, *declared_specs())
