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
    "counter_gap_lookback",
    "pcie_degraded_window",
    "unscraped_memory",
    "scheduler_wait_while_idle",
    "scheduler_capacity_window",
)


@dataclass(frozen=True)
class NodeClass:
    """What a healthy node of one class looks like; `node_class` comes from file_sd labels."""

    name: str
    # GPUs nvml should enumerate; fewer up means a GPU fell off the bus or was never seen.
    gpus: int
    # Active NVLink links per GPU (0: no NVLink on this class, nothing to expect).
    nvlinks_per_gpu: int
    # RDMA ports under /sys/class/infiniband (compute fabric plus any RoCE NIC).
    ib_ports: int
    # Nominal port rate; None where the class has no RDMA fabric to compare against.
    ib_rate_bytes_per_second: float | None
    # --- the node around the GPUs, as its BMC reports it (None or 0: not known, so
    # nothing to compare with and no alert for the class)
    # Highest operating inlet air temperature, °C, from the system's user guide.
    inlet_max_celsius: float | None = None
    # The whole system's maximum power draw, W (GPUs, CPUs, fans, NICs, drives).
    max_power_watts: float | None = None
    # Power supplies installed, and how many of them may fail with the node still
    # powered at full load (N+R: R of N+R).
    power_supplies: int = 0
    power_supplies_redundant: int = 0

    @property
    def power_supplies_for_redundancy(self) -> int | None:
        """Healthy supplies the node needs to still have a spare: N+1 of an N+R design.

        One fewer and the next failure takes the node below full power; None for a class
        built without redundancy (nothing to lose) or whose supplies are not known.
        """
        if self.power_supplies <= 0 or self.power_supplies_redundant <= 0:
            return None
        return self.power_supplies - self.power_supplies_redundant + 1


def _gbps(gigabits: float) -> float:
    # sysfs `rate` Gb/s to bytes/s, the same conversion the agent and node_exporter use.
    return gigabits * 125_000_000


# Figures of the simulated systems (sim/profiles.py: public datasheets). The node figures
# (inlet air, system power, power supplies) are from NVIDIA's DGX user guides and, for
# the DGX-1, its white paper; "~" marks a figure to check against the guide of the exact
# model before relying on it (node_classes in the mixin config replaces the table).
DEFAULT_NODE_CLASSES: tuple[NodeClass, ...] = (
    NodeClass(
        "dgx1-p100", gpus=8, nvlinks_per_gpu=4, ib_ports=4, ib_rate_bytes_per_second=_gbps(100),
        inlet_max_celsius=35.0,  # DGX-1 white paper: inlet air 5-35 °C
        max_power_watts=3200.0,  # DGX-1 white paper: 3.2 kW TDP
        power_supplies=4, power_supplies_redundant=1,  # ~ DGX-1 guide: 4 x 1,600 W, 3+1
    ),
    NodeClass(
        "dgx1-v100", gpus=8, nvlinks_per_gpu=6, ib_ports=4, ib_rate_bytes_per_second=_gbps(100),
        inlet_max_celsius=35.0,  # DGX-1 white paper: inlet air 5-35 °C
        max_power_watts=3500.0,  # DGX-1 (V100) guide: 3.5 kW
        power_supplies=4, power_supplies_redundant=1,  # ~ DGX-1 guide: 4 x 1,600 W, 3+1
    ),
    NodeClass(
        "dgx-station", gpus=4, nvlinks_per_gpu=6, ib_ports=0, ib_rate_bytes_per_second=None,
        inlet_max_celsius=30.0,  # ~ DGX Station guide: 10-30 °C
        max_power_watts=1500.0,  # DGX Station guide: 1.5 kW
        power_supplies=1,  # ~ one supply, no redundancy to lose
    ),
    NodeClass(
        "dgx2", gpus=16, nvlinks_per_gpu=6, ib_ports=8, ib_rate_bytes_per_second=_gbps(100),
        inlet_max_celsius=35.0,  # ~ DGX-2 guide: 5-35 °C
        max_power_watts=10000.0,  # DGX-2 guide: 10 kW
        # ~ 6 x 3,000 W; the guide's redundancy is not in our sources: no redundancy alert
        power_supplies=6,
    ),
    NodeClass(
        "dgx-a100", gpus=8, nvlinks_per_gpu=12, ib_ports=8, ib_rate_bytes_per_second=_gbps(200),
        inlet_max_celsius=30.0,  # ~ DGX A100 guide: 5-30 °C
        max_power_watts=6500.0,  # DGX A100 guide: 6.5 kW
        power_supplies=6, power_supplies_redundant=3,  # ~ 6 x 3,000 W, 3+3
    ),
    NodeClass(
        "dgx-h100", gpus=8, nvlinks_per_gpu=18, ib_ports=8, ib_rate_bytes_per_second=_gbps(400),
        inlet_max_celsius=30.0,  # ~ DGX H100 guide: 5-30 °C
        max_power_watts=10200.0,  # DGX H100 guide: 10.2 kW
        power_supplies=6, power_supplies_redundant=2,  # ~ 6 x 3,300 W, 4+2
    ),
    NodeClass(
        "hgx-h200", gpus=8, nvlinks_per_gpu=18, ib_ports=8, ib_rate_bytes_per_second=_gbps(400),
        # ~ as the DGX H200, whose chassis is the DGX H100's
        inlet_max_celsius=30.0,
        max_power_watts=10200.0,
        power_supplies=6, power_supplies_redundant=2,
    ),
    NodeClass(
        "geforce-workstation", gpus=4, nvlinks_per_gpu=0, ib_ports=0, ib_rate_bytes_per_second=None,
        max_power_watts=1200.0,  # ~ 1.2 kW; no published inlet range or supplies
    ),
    NodeClass(
        "inference-t4", gpus=4, nvlinks_per_gpu=0, ib_ports=1, ib_rate_bytes_per_second=_gbps(25),
        max_power_watts=600.0,  # ~ 0.6 kW; the server's vendor sets inlet and supplies
    ),
)  # fmt: skip

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
        return _gbps(self.dashboard_ib_rate_ok_gbps)

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
            values["node_classes"] = _node_classes(values["node_classes"])
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


def _check_runbook_base_url(url: str) -> None:
    """A folder: the old form, one page with an anchor per alert, would build links to
    nowhere (the page's name with each alert's file name appended)."""
    base = url.rstrip("/")
    if not base or "#" in base or base.endswith(".md"):
        raise ValueError(
            f"runbook_base_url: expected the folder where docs/runbooks/ is published "
            f"(each alert's runbook is <folder>/<AlertName>.md), got {shown(url)}"
        )


_NODE_CLASS_KEYS = (
    "gpus",
    "nvlinks_per_gpu",
    "ib_ports",
    "ib_rate_gbps",
    "inlet_max_celsius",
    "max_power_watts",
    "power_supplies",
    "power_supplies_redundant",
)


def _optional_float(spec: Mapping[str, Any], key: str) -> float | None:
    value = spec.get(key)
    return None if value is None else float(value)


def _node_classes(raw: Any) -> tuple[NodeClass, ...]:
    """node_classes: {name: {gpus, nvlinks_per_gpu, ib_ports, ib_rate_gbps, and the BMC
    figures inlet_max_celsius, max_power_watts, power_supplies,
    power_supplies_redundant}} (replaces all)."""
    if not isinstance(raw, dict):
        raise ValueError("node_classes: expected a mapping of class name to expectations")
    classes = []
    for name, spec in raw.items():
        where = f"node_classes.{key_text(name)}"
        if not isinstance(spec, dict):
            raise ValueError(f"{where}: expected a mapping")
        unknown = sorted(set(spec) - set(_NODE_CLASS_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown key(s): {', '.join(map(key_text, unknown))}")
        rate = _optional_float(spec, "ib_rate_gbps")
        node_class = NodeClass(
            name=str(name),
            gpus=int(spec.get("gpus", 0)),
            nvlinks_per_gpu=int(spec.get("nvlinks_per_gpu", 0)),
            ib_ports=int(spec.get("ib_ports", 0)),
            ib_rate_bytes_per_second=None if rate is None else _gbps(rate),
            inlet_max_celsius=_optional_float(spec, "inlet_max_celsius"),
            max_power_watts=_optional_float(spec, "max_power_watts"),
            power_supplies=int(spec.get("power_supplies", 0)),
            power_supplies_redundant=int(spec.get("power_supplies_redundant", 0)),
        )
        if node_class.power_supplies_redundant >= max(node_class.power_supplies, 1):
            raise ValueError(
                f"{where}: power_supplies_redundant must be fewer than power_supplies, got "
                f"{node_class.power_supplies_redundant} of {node_class.power_supplies}"
            )
        classes.append(node_class)
    return tuple(classes)


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
