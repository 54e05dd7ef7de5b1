"""The mixin config: every selector and threshold the dashboards and alerts read.

Like the monitoring-mixins' `_config`, nothing in `alerts/` or `dashboards/` hard-codes a
job selector, a label name or a threshold; they all come from one `MixinConfig`, so an
operator (or the fleet end-to-end test, which shrinks every `for:`) changes them in one
YAML file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvwatch.common.durations import parse_duration, prometheus_duration
from nvwatch.common.yaml_safe import key_text, load_yaml_text, read_config_text, shown
from nvwatch.mixin.node_classes import DEFAULT_NODE_CLASSES, NodeClass, gbps, node_classes_from

# The folder of the generated runbooks in the repository, one Markdown file per alert;
# the default runbook_base_url.
RUNBOOK_DIR = "docs/runbooks"


def runbook_file(alert_name: str) -> str:
    """The file of an alert's runbook in RUNBOOK_DIR."""
    return f"{alert_name}.md"


# Durations that are not a `for:` but go into PromQL or a rule group the same way.
_WINDOWS = (
    "rate_window",
    "evaluation_interval",
    "report_interval",
    "counter_gap_lookback",
    "pcie_degraded_window",
    "unscraped_memory",
    "scheduler_wait_while_idle",
    "scheduler_capacity_window",
    "straggler_warmup",
    "straggler_baseline_window",
)


# XIDs an operator pages on (NVIDIA's Xid Errors catalogue): hardware or driver faults
# that need a drain, reset or RMA rather than a user fixing their job.
DEFAULT_CRITICAL_XIDS: tuple[str, ...] = (
    "48", "61", "62", "63", "64", "74", "79", "92", "94", "95", "119", "120",
)  # fmt: skip


@dataclass(frozen=True)
class MixinConfig:
    # --- selectors and label names --------------------------------------------------
    # Matches the agents' scrape job; every expression starts from this selector.
    job_selector: str = 'job="nvwatch"'
    # Target label naming the cluster (file_sd); aggregates keep it so one Prometheus can
    # watch several clusters.
    cluster_label: str = "cluster"
    # Target label naming a node; the unit of "per node" aggregates and dashboards.
    instance_label: str = "instance"
    # Target label naming the rack (file_sd), for per-rack power panels.
    rack_label: str = "rack"
    # Target label naming the node class (file_sd) that selects the expectations below.
    node_class_label: str = "node_class"
    # Extra matchers on IB series, e.g. 'device!~"mlx5_(6|7)"' to leave uncabled storage
    # ports out of the fabric alerts; empty means every port.
    ib_port_selector: str = ""
    # Matches the BMC probe job (`nvwatch inventory --bmc-probe` writes it): Prometheus
    # asks an nvwatch on a management host for /probe?target=<BMC>, and each BMC target
    # carries its node's cluster, rack, node_class and instance labels (plus `bmc`), so
    # BMC series join GPU series on the node labels.
    bmc_job_selector: str = 'job="nvwatch-bmc"'

    # --- thermal --------------------------------------------------------------------
    # Warn this many °C below the GPU's own slowdown threshold (read from NVML, so it
    # follows the board: 85 °C P100, 87 °C V100, 89 °C A100/H100).
    gpu_temp_margin_celsius: float = 5.0
    # Warn this many °C below the HBM's memory_max threshold.
    hbm_temp_margin_celsius: float = 5.0
    # A thermal slowdown reason must stay active this long before it pages; short dips
    # happen on every load step.
    thermal_slowdown_for: str = "10m"
    # Die temperature climbing faster than this (°C per minute, averaged over
    # rate_window) means cooling lost ground: a fan wall, a blocked inlet, a CDU fault.
    temp_rise_celsius_per_minute: float = 5.0
    # ... but only while the GPU is within this many °C of slowdown: a cold GPU warming
    # up at a job's start rises as fast and is healthy.
    temp_rise_headroom_celsius: float = 15.0

    # --- power ----------------------------------------------------------------------
    # Pinned at the software power cap this long is a capacity signal (a job is
    # power-bound), not a fault: warning.
    power_cap_for: str = "30m"
    # HW power brake (the board's external brake signal, PSU/chassis trouble) this long
    # is critical.
    hw_power_brake_for: str = "1m"
    # Node GPU power, averaged over rate_window, above this fraction of the summed GPU
    # TDP for `for_default` means the node runs at its power budget: the PDU/rack plan
    # must hold this.
    node_power_budget_fraction: float = 0.9
    # The whole rack's power budget, in kW, for `nvwatch report` (0: no plan): its circuit
    # budget (PDUs, UPS, cooling), against which the report plans on the node power each
    # BMC measures (nvwatch_bmc_power_watts: DCMI, else the largest power sensor), the
    # GPUs and everything around them.
    rack_power_budget_kw: float = 0.0
    # Racks whose circuit differs from rack_power_budget_kw: {rack label value: kW}.
    rack_power_budgets_kw: tuple[tuple[str, float], ...] = ()
    # GPU power each rack's power plan allows, in kW, for `nvwatch report` (0: no plan).
    # GPU board power is all nvwatch sees of a node without BMC data: set this to the
    # rack's circuit budget less what the rest of its nodes draw (CPUs, fans, NICs). A
    # DGX-1 is 3.2 kW with 8 x 300 W of GPUs, so a rack of four on a 12.8 kW plan leaves
    # 4 x 8 x 300 W = 9.6 kW for GPUs (deploy/mixin.example.yaml).
    rack_gpu_power_budget_kw: float = 0.0
    # Racks whose plan differs from rack_gpu_power_budget_kw: {rack label value: kW}.
    rack_gpu_power_budgets_kw: tuple[tuple[str, float], ...] = ()

    # --- the node around the GPUs (BMC) ---------------------------------------------
    # The class figures (inlet_max_celsius, max_power_watts, power supplies) are in
    # node_classes; these are the judgements on top of them.
    # A fan below this is stopped: a DGX chassis fan runs thousands of rpm even idle, and
    # a BMC reads a seized or unplugged fan as 0 or a few hundred. NvwatchNodeFanStopped,
    # and a GPU thermal alert names "the node" when one of its fans is here.
    fan_stopped_rpm: float = 500.0
    # Node input power (BMC: DCMI, else the largest power sensor), averaged over
    # rate_window, above this fraction of its class's max_power_watts for `for_default`:
    # the node draws what its supplies and the rack circuit were planned for.
    node_power_max_fraction: float = 0.9
    # The power & cooling dashboard draws inlet air orange within this many °C of its
    # class's inlet_max_celsius (red above it, where NvwatchNodeInletTemperatureHigh
    # fires): the room's margin before the GPUs start to slow down.
    dashboard_inlet_headroom_celsius: float = 3.0

    # --- fabric ---------------------------------------------------------------------
    # NVLink data-link errors per second per link and type (crc, replay, recovery, ecc).
    nvlink_error_rate_per_second: float = 1.0
    # IB physical/link errors per second per port and type (symbol, link recovery, ...).
    ib_error_rate_per_second: float = 0.1
    # Share of time a port had data but no credits; above it the fabric is congested.
    # Kept low: at 5 % the 32-bit port_xmit_wait saturates in ~6 minutes, at 10 % in 3.
    ib_transmit_wait_ratio: float = 0.05
    # Duration of one port_xmit_wait tick. The IBA spec leaves the tick to the device;
    # ConnectX counts in units of a few ns (~4 ns, the simulator's figure too). This turns
    # ticks into seconds so the ratio reads like "share of time waiting".
    ib_transmit_wait_tick_seconds: float = 4e-9
    # PCIe replays per second per GPU; a healthy link replays almost never.
    pcie_replay_rate_per_second: float = 0.1
    # GPUs idle below this utilization legitimately train PCIe down to save power, so a
    # degraded PCIe link only alerts on a busier GPU.
    pcie_busy_utilization: float = 0.2
    # ... judged over this window: the GPU was busy at some point in it and the link
    # never reached its maximum in it. An idle spell shorter than this (between jobs)
    # does not resolve the alert only for it to fire again with the next job.
    pcie_degraded_window: str = "30m"

    # --- starvation -----------------------------------------------------------------
    # A GPU is "starved" below this utilization ...
    starvation_utilization: float = 0.3
    # ... while a process holds more than this fraction of its memory (a job is there) ...
    starvation_memory_used_ratio: float = 0.1
    # ... and the host is stuck on I/O above this iowait ratio ...
    starvation_host_iowait: float = 0.2
    # ... or its CPUs are saturated above this utilization (data loading bound).
    starvation_host_cpu: float = 0.9

    # --- jobs (GPU attribution) -----------------------------------------------------
    # A GPU allocated to a job or pod (nvwatch_gpu_allocation_info) whose utilization,
    # averaged over rate_window, stays below this ...
    gpu_allocated_idle_utilization: float = 0.05
    # ... this long is capacity a job holds and does not use (NvwatchGpuAllocatedIdle,
    # info): an hour rides over a job's data loading, checkpoints and compilation.
    gpu_allocated_idle_for: str = "1h"
    # The jobs dashboard's verdict "memory-bound": device memory busy (nvidia-smi
    # utilization.memory) above this share of the time, averaged over the job's life.
    job_memory_bound_ratio: float = 0.6
    # ... and "power-capped" / "thermally throttled": the clock-event reason active
    # above this share of the job's life (a healthy job touches its cap in bursts).
    job_throttled_ratio: float = 0.2
    # `nvwatch job`'s notes: a job whose GPUs' mean utilization is below this fraction
    # of the cluster's median over the same time uses its GPUs far worse than its peers ...
    job_low_utilization_fraction: float = 0.5
    # ... a job whose busiest GPU never used more than this share of its memory would fit
    # a smaller GPU or a MIG slice ...
    job_small_memory_ratio: float = 0.25
    # ... and a job across nodes whose nodes' InfiniBand ports moved less than this, per
    # node, in bytes per second over its life, did not use the fabric it was placed for.
    job_ib_idle_bytes_per_s: float = 1e6
    # Grams of CO2 per kWh of the site's electricity: `nvwatch job` prints the job's carbon
    # from its energy when set; 0 leaves it out (nvwatch knows no grid's intensity).
    grid_intensity_g_per_kwh: float = 0.0

    # --- stragglers (the rank that holds a synchronous job back) --------------------
    # A synchronous job (data-parallel over NCCL) runs at its slowest rank's pace and its
    # other ranks wait, still "busy"; so each rank is compared with the median of its own
    # job's ranks (alerts/recording_straggler.py, NvwatchJobStraggler). A job needs this
    # many whole GPUs to be compared: with two, either could be the odd one.
    straggler_min_gpus: int = 3
    # ... and must be this old (its allocation was there this long ago): in a job's first
    # minutes the ranks load data, compile and set up NCCL each at its own pace.
    straggler_warmup: str = "15m"
    # ... and its median GPU's utilization at least this at every sample of rate_window:
    # below it every rank paused alike (a checkpoint, a filesystem stall), which weighs
    # on every average of the window, and there is no pace to compare.
    straggler_busy_utilization: float = 0.5
    # A rank stands out when it is farther from its job's median than this many MADs
    # (median absolute deviation of the job's ranks: a noisy job needs a larger gap) ...
    straggler_mad_multiple: float = 3.0
    # ... and at least the signal's own smallest gap (a tight job, MAD near 0, must not
    # make noise look huge): the SM clock below the median by this share of its maximum,
    straggler_clock_deviation: float = 0.05
    # ... the rank's activity (tensor activity where the board has GPM, else power over
    # its enforced limit) above the median by this much (the rank that never waits),
    straggler_activity_deviation: float = 0.2
    # ... a PCIe or InfiniBand link this many halvings of bandwidth below the median
    # (x16 -> x8, Gen5 -> Gen4 or NDR -> HDR is one),
    straggler_link_halvings: float = 1.0
    # ... a GPU's NVLink traffic below the median of the job's GPUs on its node by this
    # share (a ring moves the same bytes through every rank of a node),
    straggler_nvlink_throughput_deficit: float = 0.3
    # ... and a node's CPU utilization above the job's median node by this much, while
    # at least starvation_host_cpu. NVLink errors and IB transmit wait use the fabric
    # alerts' thresholds (nvlink_error_rate_per_second, ib_transmit_wait_ratio), and a
    # GPU with one NVLink fewer up than its job's median stands out at once.
    straggler_host_cpu_deviation: float = 0.2
    # A straggler slowed by its clocks is "thermal" or "power-capped" when such a clock
    # event reason was active this share of rate_window, else "clock-other".
    straggler_reason_share: float = 0.5
    # The rank stands out this long before the alert fires.
    straggler_for: str = "3m"
    # The slowdown estimate also compares the job's median activity with its own best
    # in this window (for a fault in the fabric or a host, which slows every rank alike).
    straggler_baseline_window: str = "1h"
    # Pipeline-parallel jobs, whose stages differ by design: label matchers on
    # nvwatch_gpu_allocation_info, e.g. 'account="llm-pipeline"' or
    # 'namespace="pp-train"' or 'job_id=~"4711|4712"' (empty: no job is marked). A marked
    # job's ranks may differ by straggler_pipeline_tolerance more than the gaps above
    # in the load-driven signals (clock, activity, NVLink traffic, IB wait, host CPU);
    # the structural ones (PCIe and IB link width, NVLink links, NVLink errors) are
    # judged as in any job.
    straggler_pipeline_jobs: str = ""
    straggler_pipeline_tolerance: float = 0.3

    # --- scheduler (the cluster's Slurm queue) --------------------------------------
    # The scheduler series come from the one agent of each cluster that runs `--sources
    # scheduler` (on the Slurm controller or a login node). It is scraped in the agents'
    # job, so job_selector selects them too; its `instance` is that host, and the
    # source's health is nvwatch_agent_source_up{source="scheduler"}.
    # A GPU job eligible to start that has waited longer than this while GPUs of its
    # partition stay idle (for for_slow) is not waiting for capacity: the free GPUs are
    # scattered where it needs them on one node, an account or QOS limit holds it, or
    # the scheduler is stuck. Half an hour is dozens of Slurm's scheduling and backfill
    # cycles, long after a burst of submissions has settled.
    scheduler_wait_while_idle: str = "30m"
    # Nodes with GPUs that Slurm keeps out of service (drained, down, not responding,
    # failing, ...) this long: capacity nobody gets back until someone acts. Longer than
    # a reboot, a firmware update or a health check's drain and resume; short enough
    # that a drain nobody resumed is found the same working day.
    scheduler_node_unavailable_for: str = "4h"
    # Reason classes of nvwatch_scheduler_nodes_unavailable that never alert: a
    # reservation or a maintenance window is capacity taken out on purpose.
    scheduler_planned_unavailable_reasons: tuple[str, ...] = ("reserved",)
    # The capacity signal for the review (NvwatchSchedulerShortOfGpus, info): a partition
    # whose waiting GPU jobs asked for more GPUs than it had idle in more than this share
    # of the hours of scheduler_capacity_window. "Most of a week" is a backlog that
    # outlasts a deadline rush: a question for whoever buys GPUs, not a page.
    scheduler_short_of_gpus_fraction: float = 0.5
    scheduler_capacity_window: str = "7d"

    # --- health ---------------------------------------------------------------------
    critical_xids: tuple[str, ...] = DEFAULT_CRITICAL_XIDS
    # This Prometheus watches production: an agent on a simulated node
    # (nvwatch_agent_simulated, e.g. from a shell left with NVWATCH_SIMULATE set) pages
    # (NvwatchSimulatedAgentInProduction). A rule cannot see Prometheus' external labels
    # (they are added on the way out, to alerts and remote writes), and a per-target
    # label would have to be on every scrape config; so the rule file of a production
    # Prometheus is built with this set. Off for test and demo stacks, which scrape
    # simulated agents on purpose.
    production: bool = False
    # The agent's last poll older than this means it is wedged even though /metrics
    # still answers from its cache.
    agent_stale_seconds: float = 120.0

    # --- durations ------------------------------------------------------------------
    # `for:` of hard failures (a link down, an agent down) that must page quickly.
    for_fast: str = "2m"
    # `for:` of most conditions: long enough to ride over a poll or two.
    for_default: str = "5m"
    # `for:` of capacity/efficiency signals (starvation, congestion).
    for_slow: str = "15m"
    # `keep_firing_for:` of every condition alert (Prometheus 2.42+): a firing condition
    # stays firing this long after its expression last returned it. A restarted agent
    # (one failed scrape marks every series stale), a couple of failed scrapes or a
    # missed evaluation would otherwise resolve a condition that was never repaired and
    # page it again after its `for:`. A repaired condition resolves this much later.
    keep_firing_for: str = "5m"
    # How long NvwatchAgentUnscraped remembers a target that no scraper scrapes any
    # more (its scrape shard died, its file_sd entry vanished): it pages for the node
    # until it is scraped again or this long after its last sample, whichever is first.
    # Longer costs more: the rule reads every sample of `up` in the window.
    unscraped_memory: str = "1h"
    # Window of every rate()/increase()/deriv() in the rules.
    rate_window: str = "5m"
    # How far back the event alerts (XIDs, IB link_downed) look for a counter's last
    # value before a gap in its scrapes (agent restarted, Prometheus down): events
    # counted during a shorter gap page once afterwards, and a count carried over a
    # restart is no new event. Longer gaps are treated as a first scrape.
    counter_gap_lookback: str = "1d"
    # Rule group evaluation interval (Prometheus and Grafana).
    evaluation_interval: str = "1m"
    # Interval of the nvwatch-report-*.rules groups: each of the capacity report's reads
    # over this long, recorded once, so that a month of a large fleet is read from one
    # sample per interval instead of every scrape. Longer makes the report cheaper and
    # its shortest step (the report's resolution) coarser.
    report_interval: str = "5m"

    # --- node classes ---------------------------------------------------------------
    node_classes: tuple[NodeClass, ...] = DEFAULT_NODE_CLASSES

    # --- dashboard colours ----------------------------------------------------------
    # Panels that show an alerting quantity colour at the alert's own setting above (PCIe
    # replays, NVLink and IB error rates, transmit wait, host iowait, node power headroom,
    # active NVLink links from node_classes); these are the colours of everything else.
    # A die at or above this is red on the temperature panels: the lowest slowdown
    # threshold among the supported boards (P100 85 °C; V100 87, A100/H100 89), so no GPU
    # that has started slowing down shows anything but red. Orange starts
    # gpu_temp_margin_celsius below it, where NvwatchGpuTemperatureNearSlowdown fires.
    dashboard_temperature_critical_celsius: float = 85.0
    # Ratios where high is bad (a link near its line rate, a rack near its summed TDP,
    # time spent throttled): orange from the first, red from the second.
    dashboard_load_warn_ratio: float = 0.8
    dashboard_load_critical_ratio: float = 0.95
    # GPU utilization: red below the first (half the fleet's GPU time wasted), green
    # from the second, orange between.
    dashboard_utilization_poor_ratio: float = 0.5
    dashboard_utilization_good_ratio: float = 0.9
    # Memory or power headroom left at peak: red below the first (the next larger job
    # step does not fit), green from the second, orange between.
    dashboard_headroom_low_ratio: float = 0.1
    dashboard_headroom_ample_ratio: float = 0.3
    # An IB port trained below this rate is orange on the rate panel: no DGX compute
    # fabric port is healthy below EDR (100 Gb/s). Per-class expectations, which the
    # alert uses, cannot colour one panel that shows every class at once.
    dashboard_ib_rate_ok_gbps: float = 100.0

    # --- presentation ---------------------------------------------------------------
    # What the grafana.com import dialog calls the Prometheus data source it asks for
    # (the dashboards' DS_PROMETHEUS input, the default of their $datasource variable).
    grafana_datasource_name: str = "Prometheus"
    # Datasource uid the Grafana-managed alert rules query.
    grafana_datasource_uid: str = "prometheus"
    # Grafana folder for the provisioned alert rules.
    grafana_folder: str = "nvwatch"
    # Where docs/runbooks/ is read: each alert's runbook_url is this, "/", the alert's name
    # and ".md" (docs/runbooks/NvwatchGpuDown.md, one file per alert, generated with the
    # rules). The default is that folder's path in the repository, which resolves in a
    # checkout and on any Git web page of it; set the URL where your copy is published
    # (a Git host's blob/main/docs/runbooks, an internal docs site) for links that open
    # from a notification. Every alert's description carries its action as well, so a
    # page can be acted on without the link.
    runbook_base_url: str = RUNBOOK_DIR
    dashboard_tags: tuple[str, ...] = field(default=("nvwatch",))

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_for") or f.name.startswith("for_") or f.name in _WINDOWS:
                # frozen: normalising in place is the one write __post_init__ makes
                object.__setattr__(self, f.name, _prometheus_form(f.name, value))
            elif isinstance(f.default, bool) and not isinstance(value, bool):
                raise ValueError(f"{f.name}: expected true or false, got {shown(value)}")
            elif isinstance(f.default, (int, float)) and not isinstance(value, (int, float)):
                raise ValueError(f"{f.name}: expected a number, got {shown(value)}")
            elif isinstance(f.default, str) and not isinstance(value, str):
                raise ValueError(f"{f.name}: expected a string, got {shown(value)}")
        _check_runbook_base_url(self.runbook_base_url)
        _check_scheduler(self)
        _check_stragglers(self)
        names = [c.name for c in self.node_classes]
        if len(set(names)) != len(names):
            raise ValueError(f"node_classes: duplicate class name in {shown(names)}")

    # --- selector helpers -----------------------------------------------------------
    def sel(self, *matchers: str) -> str:
        """`{job="nvwatch", extra...}` for a series selector."""
        return "{" + ", ".join(m for m in (self.job_selector, *matchers) if m) + "}"

    def ib_sel(self, *matchers: str) -> str:
        return self.sel(self.ib_port_selector, *matchers)

    def bmc_sel(self, *matchers: str) -> str:
        """`{job="nvwatch-bmc", extra...}` for a BMC series selector."""
        return "{" + ", ".join(m for m in (self.bmc_job_selector, *matchers) if m) + "}"

    @property
    def node_labels(self) -> str:
        """Labels that identify a node in aggregates."""
        return f"{self.cluster_label}, {self.instance_label}"

    @property
    def dashboard_ib_rate_ok_bytes_per_second(self) -> float:
        """`dashboard_ib_rate_ok_gbps` in the unit of nvwatch_ib_port_rate_bytes_per_second."""
        return gbps(self.dashboard_ib_rate_ok_gbps)

    @property
    def fewest_nvlinks_per_gpu(self) -> int:
        """The fewest active links any NVLink node class expects per GPU (1 if none has any).

        One panel shows GPUs of every class; below this count no class is healthy.
        """
        return min((c.nvlinks_per_gpu for c in self.node_classes if c.nvlinks_per_gpu), default=1)

    def rack_gpu_power_budget_watts(self, rack: str) -> float | None:
        """The GPU power budget of `rack` in watts; None where no plan is configured."""
        kilowatts = dict(self.rack_gpu_power_budgets_kw).get(rack, self.rack_gpu_power_budget_kw)
        return kilowatts * 1000 if kilowatts > 0 else None

    def rack_power_budget_watts(self, rack: str) -> float | None:
        """The whole power budget (circuit) of `rack` in watts; None where none is set."""
        kilowatts = dict(self.rack_power_budgets_kw).get(rack, self.rack_power_budget_kw)
        return kilowatts * 1000 if kilowatts > 0 else None

    def runbook_url(self, alert_name: str) -> str:
        """The alert's runbook: its file under docs/runbooks/, as `runbook_base_url` reads it."""
        return f"{self.runbook_base_url.rstrip('/')}/{runbook_file(alert_name)}"

    def with_overrides(self, **overrides: Any) -> MixinConfig:
        """A copy with some fields replaced; unknown names are a ValueError."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown mixin config key(s): {', '.join(map(key_text, unknown))}")
        return dataclasses.replace(self, **overrides)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> MixinConfig:
        values = dict(data)
        if "node_classes" in values:
            values["node_classes"] = node_classes_from(values["node_classes"])
        for key in ("rack_gpu_power_budgets_kw", "rack_power_budgets_kw"):
            if key in values:
                values[key] = _rack_budgets(key, values[key])
        for key in ("critical_xids", "dashboard_tags", "scheduler_planned_unavailable_reasons"):
            if key in values:
                if not isinstance(values[key], list):
                    raise ValueError(f"{key}: expected a list, got {shown(values[key])}")
                values[key] = tuple(str(v) for v in values[key])
        return cls().with_overrides(**values)

    @classmethod
    def from_yaml(cls, path: Path) -> MixinConfig:
        """Load overrides from a YAML mapping; unknown keys are a ValueError naming them."""
        # the agent's loader: one-line errors naming the file, a size limit, no aliases
        data = load_yaml_text(read_config_text(path, "mixin config"), path, "mixin config")
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ValueError(f"{path}: mixin config must be a mapping, got {type(data).__name__}")
        try:
            return cls.from_mapping(data)
        except (TypeError, ValueError, OverflowError) as err:  # int(.inf): OverflowError
            raise ValueError(f"{path}: {err}") from err


def _check_scheduler(cfg: MixinConfig) -> None:
    """The capacity signal counts the window's hours: a share of them, at least one."""
    fraction = cfg.scheduler_short_of_gpus_fraction
    if not 0 <= fraction < 1:
        raise ValueError(
            f"scheduler_short_of_gpus_fraction: expected a share of the hours, 0 to below 1, "
            f"got {shown(fraction)}"
        )
    if parse_duration(cfg.scheduler_capacity_window, "scheduler_capacity_window") < 3600:
        raise ValueError(
            "scheduler_capacity_window: expected at least 1h (the signal counts hours), "
            f"got {shown(cfg.scheduler_capacity_window)}"
        )


def _check_stragglers(cfg: MixinConfig) -> None:
    """A median of ranks needs three of them, a share is a share, a scale is positive."""
    if isinstance(cfg.straggler_min_gpus, float) or cfg.straggler_min_gpus < 3:
        raise ValueError(
            "straggler_min_gpus: expected a whole number of GPUs, 3 or more (with two, "
            f"either could be the odd one), got {shown(cfg.straggler_min_gpus)}"
        )
    for name in ("straggler_busy_utilization", "straggler_reason_share"):
        if not 0 < getattr(cfg, name) <= 1:
            raise ValueError(
                f"{name}: expected a share above 0, at most 1, got {shown(getattr(cfg, name))}"
            )
    if cfg.straggler_mad_multiple <= 0 or cfg.straggler_pipeline_tolerance < 0:
        raise ValueError(
            "straggler_mad_multiple must be above 0 and straggler_pipeline_tolerance 0 or "
            f"more, got {shown(cfg.straggler_mad_multiple)} and "
            f"{shown(cfg.straggler_pipeline_tolerance)}"
        )


def _check_runbook_base_url(url: str) -> None:
    """A folder: the old form, one page with an anchor per alert, would build links to
    nowhere (the page's name with each alert's file name appended)."""
    base = url.rstrip("/")
    if not base or "#" in base or base.endswith(".md"):
        raise ValueError(
            f"runbook_base_url: expected the folder where docs/runbooks/ is published "
            f"(each alert's runbook is <folder>/<AlertName>.md), got {shown(url)}"
        )


def _rack_budgets(key: str, raw: Any) -> tuple[tuple[str, float], ...]:
    """rack_gpu_power_budgets_kw or rack_power_budgets_kw: {rack: kW}, every budget a
    positive number."""
    if not isinstance(raw, dict):
        raise ValueError(f"{key}: expected a mapping of rack to kW")
    budgets = []
    for rack, kilowatts in raw.items():
        if isinstance(kilowatts, bool) or not isinstance(kilowatts, (int, float)) or kilowatts <= 0:
            where = f"{key}.{key_text(rack)}"
            raise ValueError(f"{where}: expected kW > 0, got {shown(kilowatts)}")
        budgets.append((str(rack), float(kilowatts)))
    return tuple(budgets)


def _prometheus_form(name: str, value: object) -> str:
    """`value` in the one duration grammar, rewritten as rule files and PromQL take it."""
    if not isinstance(value, str):
        raise ValueError(f"{name}: {shown(value)} is not a duration like 5m, 1h30m or 2.5s")
    return prometheus_duration(parse_duration(value, name))


def load(path: Path | None) -> MixinConfig:
    """The config from `path`, or the defaults when no file is given."""
    return MixinConfig() if path is None else MixinConfig.from_yaml(path)
