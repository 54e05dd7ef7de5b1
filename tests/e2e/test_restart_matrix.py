"""Restart matrix: faults older than the first scrape, agent and Prometheus restarts, repair.

One fleet runs every fault scenario side by side (on two fault nodes, each fault on a
GPU or port of its own) plus one healthy node of each of the eight profiles, under a real
Prometheus and Alertmanager. The cases run in sequence over that one fleet, because a
restart is what changes between them:

(a) the faults begin before Prometheus's first scrape: simulated time runs, every fault
    is visible in its agent's own /metrics, and only then does Prometheus start;
(b) every agent is restarted while the faults last (held down until Prometheus has
    seen it down, so the restart is one a scrape notices);
(c) Prometheus is restarted while the faults last, keeping its data directory, with
    its alert timings (resend delay, `for` restore grace period) scaled like the rules'
    for: (PROMETHEUS_ALERT_FLAGS);
then every fault is repaired.

What each alert must do in each case is written down per (scenario, alert) in EXPECTED,
with its reason: a condition alert pages within its bound and stays firing through both
restarts with no resolve-and-repage (Alertmanager's resolved notifications, send_resolved,
show a resolve), and resolves after the repair; an event alert over a continuing stream
of events behaves the same way, unless its rule by design loses the page over a scrape
gap (Expect.refires_because says why): then it must page again within its bound; an
event that happened once before the first scrape is history and must not page, before or
after a restart. The healthy nodes go through the same restarts and must not alert at
all, firing or pending.

Every alert and scenario is accounted for (test_matrix_accounts_for_every_alert_and_
scenario): those outside the matrix are listed with the reason, none is skipped silently.
Run with -s to see the matrix.
"""

from __future__ import annotations

import enum
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.config import ScenarioSpec
from nvwatch.alerts import build as alerts_build
from nvwatch.alerts.rules import Severity, all_alerts
from nvwatch.common.durations import parse_duration
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.fleet.fleet import Fleet
from nvwatch.sim.gpu.scenarios import XID_STORM_BURST
from nvwatch.sim.node.node import known_scenarios
from nvwatch.sim.profiles import get_profile
from tests.conftest import require_tool
from tests.e2e.conftest import POLL_INTERVAL, TIME_SCALE, mixin_config
from tests.e2e.loopback import wait_for
from tests.e2e.stack import Receiver, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

# The e2e's for: and windows are the mixin's shrunk ~10x (5m -> 30s); production timings
# outside the rules (Prometheus's, the agent's) shrink by the same factor here.
RULE_TIME_FACTOR = 10.0

# --- the fleet -------------------------------------------------------------------------

HEALTHY_PROFILES = (
    "dgx1-p100",
    "dgx1-v100",
    "dgx-station",
    "dgx2",
    "dgx-a100",
    "dgx-h100",
    "geforce-workstation",
    "inference-t4",
)
FAULTS_CLUSTER = "faults-restart"


def healthy_cluster(profile: str) -> str:
    # by InfiniBand: a node without HCAs is where "absent is not broken" shows
    return "healthy-ib" if get_profile(profile).nics else "healthy-no-ib"


@dataclass(frozen=True)
class Fault:
    scenario: str
    profile: str  # the fault node it runs on (one per profile in FAULT_PROFILES)
    target: str | None  # GPU index or HCA, each fault its own; None: the whole node
    # what shows the fault in the agent's own /metrics before Prometheus starts: (sample
    # name, labels, test); None where the fault develops under Prometheus (say why)
    visible: tuple[str, Mapping[str, str], Callable[[float], bool]] | None


# Faults share three nodes, each on a GPU or port of its own: two cores cannot poll,
# scrape and tick a node per fault without stalling the simulation (sysfs counters stood
# still for 10-15 s at a time with 17 nodes). Every fault node is restarted and repaired
# as a whole anyway. The node-wide presence faults (a driver that is not loaded, HCAs
# that vanished) get a small node of their own.
FAULT_PROFILES = ("dgx1-v100", "dgx-a100", "inference-t4")
FAULTS = (
    # the cooling fails at once, the die needs ~2 simulated minutes to reach slowdown
    Fault("thermal-runaway", "dgx1-v100", "2", None),
    Fault(
        "nvlink-degraded", "dgx1-v100", "3",
        ("nvwatch_nvlink_up", {"gpu": "3", "link": "0"}, lambda v: v == 0),
    ),
    Fault("gpu-lost", "dgx1-v100", "5", ("nvwatch_gpu_up", {"gpu": "5"}, lambda v: v == 0)),
    Fault(
        "ib-link-flap", "dgx1-v100", "mlx5_2",
        ("nvwatch_ib_port_errors_total", {"device": "mlx5_2", "type": "link_downed"}, lambda v: v > 0),  # noqa: E501
    ),
    Fault(
        "ib-symbol-errors", "dgx1-v100", "mlx5_1",
        ("nvwatch_ib_port_errors_total", {"device": "mlx5_1", "type": "symbol"}, lambda v: v > 0),
    ),
    Fault(
        "power-capped", "dgx-a100", "1",
        ("nvwatch_gpu_clock_event_active", {"gpu": "1", "reason": "sw_power_cap"}, lambda v: v == 1),  # noqa: E501
    ),
    Fault(
        "ecc-dbe", "dgx-a100", "4",
        ("nvwatch_gpu_ecc_errors_total", {"gpu": "4", "type": "uncorrected", "scope": "volatile"}, lambda v: v > 0),  # noqa: E501
    ),
    Fault(
        "xid-storm", "dgx-a100", "6",
        ("nvwatch_gpu_xid_errors_total", {"gpu": "6", "xid": "13"}, lambda v: v > 0),
    ),
    Fault(
        "ib-degraded", "dgx-a100", "mlx5_3",
        # below the 200 Gb/s a dgx-a100 port trains to
        ("nvwatch_ib_port_rate_bytes_per_second", {"device": "mlx5_3"}, lambda v: v < 25e9),
    ),
    # NVIDIA PCI functions present, NVML fails (DRIVER_NOT_LOADED): down, not absent
    Fault(
        "nvml-driver-broken", "inference-t4", None,
        ("nvwatch_agent_source_up", {"source": "nvml"}, lambda v: v == 0),
    ),
    # the HCA's PCI function stays, its RDMA device is gone: down, not absent
    Fault(
        "ib-hca-vanish", "inference-t4", None,
        ("nvwatch_agent_source_up", {"source": "infiniband"}, lambda v: v == 0),
    ),
)  # fmt: skip

# Scenarios with no node in the matrix, and why.
# the chassis's faults page through the nvwatch-bmc job, which a management host probes:
# restarting a node's agent does not touch it (tests/e2e/test_bmc_e2e.py pages each)
_BMC_OUTSIDE = "a BMC fault: its alerts come from the management host's probes, not the agent"
SCENARIOS_OUTSIDE = {
    **dict.fromkeys(("hot-aisle", "fan-failure", "psu-failure", "bmc-unreachable"), _BMC_OUTSIDE),
    "healthy-training": "a workload, not a fault: every healthy node runs it",
    "idle": "a workload, not a fault",
    "cold-start": "a workload, not a fault: GPUs warming up under a new job page nothing",
    "ib-congestion": (
        "its only alert, NvwatchIbPortCongested, is info (a capacity signal, never paged); "
        "and at 10x time its 32-bit port_xmit_wait saturates ~22 s into the run, after "
        "which the rate reads 0 by design (NvwatchIbCounterSaturated leaves port_xmit_wait "
        "out), so it could not stay firing through the restarts anyway"
    ),
    **dict.fromkeys(
        ("gpu-slow", "pcie-downtrained", "cpu-starved"),
        "no alert of its own: a rank it slows stands out only against the other ranks of "
        "its synchronous job (tests/sim/test_sync_job.py), not against a threshold",
    ),
}


def node_index(scenario: str) -> int:
    (fault,) = [f for f in FAULTS if f.scenario == scenario]
    return len(HEALTHY_PROFILES) + FAULT_PROFILES.index(fault.profile)


FAULT_NODE_INDICES = [len(HEALTHY_PROFILES) + i for i in range(len(FAULT_PROFILES))]


def node_name(index: int) -> str:
    return f"dgx-{index:03d}"


# --- what each alert must do -----------------------------------------------------------


class Pattern(enum.Enum):
    # the fault is a state until repaired: page within the bound from the first scrape
    # on, stay firing through both restarts, resolve after the repair
    CONDITION = "condition"
    # events keep coming while the fault lasts: the same as a condition. The alert counts
    # events over a window, so it may take one window to page, and it must ride over the
    # scrape gap of a restart and over the counter reset of an agent that counts by itself
    EVENT_STREAM = "event stream"
    # one event, at the fault's onset, before the first scrape: history. The scenario's
    # condition alerts carry the page; this one must not page for it, and no restart may
    # page it again (the agent reads the count back from the kernel log, or not at all)
    EVENT_HISTORY = "event history"


@dataclass(frozen=True)
class Expect:
    scenario: str
    alert: str
    labels: Mapping[str, str]  # besides alertname, cluster and instance
    pattern: Pattern
    # real seconds, after simulated time starts, the condition needs to develop
    develops_s: float = 0.0
    # real seconds, after the repair, the hardware needs to become healthy again
    recovers_s: float = 0.0
    # why a restart may resolve it, if it must page again within its bound once scraping
    # resumes ("fires again within bound" instead of "stays firing"); empty: stays firing
    refires_because: str = ""

    @property
    def node(self) -> int:
        return node_index(self.scenario)

    @property
    def name(self) -> str:
        labels = ",".join(f"{k}={v}" for k, v in self.labels.items())
        return f"{self.scenario:<16} {self.alert}{{{labels}}}"

    def matches(self, labels: Mapping[str, str]) -> bool:
        return (
            labels.get("alertname") == self.alert
            and labels.get("cluster") == FAULTS_CLUSTER
            and labels.get("instance") == node_name(self.node)
            and all(labels.get(k) == v for k, v in self.labels.items())
        )


C, S, H = Pattern.CONDITION, Pattern.EVENT_STREAM, Pattern.EVENT_HISTORY
THERMAL_DEVELOPS_S = 45.0  # ramp 12 s + the die's thermal lag, measured ~25 s at 10x
THERMAL_COOLS_S = 30.0  # back under slowdown - margin after the fan is fixed
# The agent retries a failed nvmlInit with a doubling backoff capped at 300 s, so a loaded
# driver shows within 5 min in production: 30 s at this time scale, if the backoff runs
# on the fleet's simulated clock like the hardware does (NvmlSource's clock= argument).
NVML_RETRY_S = 300.0 / RULE_TIME_FACTOR
EXPECTED = (
    Expect("thermal-runaway", "NvwatchGpuThermalSlowdown", {"gpu": "2"}, C,
           THERMAL_DEVELOPS_S, THERMAL_COOLS_S),
    Expect("thermal-runaway", "NvwatchGpuTemperatureNearSlowdown", {"gpu": "2"}, C,
           THERMAL_DEVELOPS_S, THERMAL_COOLS_S),
    # the runaway heats the HBM with the die, past memory_max - margin
    Expect("thermal-runaway", "NvwatchGpuMemoryTemperatureNearMax", {"gpu": "2"}, C,
           THERMAL_DEVELOPS_S, THERMAL_COOLS_S),
    Expect("power-capped", "NvwatchGpuPowerCapped", {"gpu": "1"}, C),
    Expect("nvlink-degraded", "NvwatchNvlinkDown", {"gpu": "3", "link": "0"}, C),
    Expect("nvlink-degraded", "NvwatchNvlinkLinksMissing", {"gpu": "3"}, C),
    Expect("nvlink-degraded", "NvwatchGpuXidCritical", {"gpu": "3", "xid": "74"}, H),
    Expect("ecc-dbe", "NvwatchGpuEccUncorrectable", {"gpu": "4"}, C),
    Expect("ecc-dbe", "NvwatchGpuMemoryRepairPending", {"gpu": "4"}, C),
    Expect("ecc-dbe", "NvwatchGpuXidCritical", {"gpu": "4", "xid": "48"}, H),
    Expect("ecc-dbe", "NvwatchGpuXidCritical", {"gpu": "4", "xid": "63"}, H),
    Expect("gpu-lost", "NvwatchGpuDown", {"gpu": "5"}, C),
    Expect("gpu-lost", "NvwatchGpuMissing", {}, C),
    Expect("gpu-lost", "NvwatchGpuXidCritical", {"gpu": "5", "xid": "79"}, H),
    # application XIDs are not critical by default (the job's fault, not the GPU's): the
    # matrix adds the storm's codes to critical_xids (matrix_config) so that an XID
    # stream crosses the restarts through the real rule
    Expect("xid-storm", "NvwatchGpuXidCritical", {"gpu": "6", "xid": "13"}, S,
           refires_because=(
               "an XID page is per new event: the rule compares the count now with the "
               "count a window ago, and while the agent is not scraped there is no count "
               "now; the storm's next XIDs page again"
           )),
    Expect("ib-link-flap", "NvwatchIbLinkDowned", {"device": "mlx5_2"}, S),
    # each flap's retrain logs 40 symbol errors: ~7/s at 10x, above the scaled 1/s
    Expect("ib-link-flap", "NvwatchIbPortErrors", {"device": "mlx5_2", "type": "symbol"}, S),
    Expect("ib-degraded", "NvwatchIbPortRateDegraded", {"device": "mlx5_3"}, C),
    Expect("ib-symbol-errors", "NvwatchIbPortErrors", {"device": "mlx5_1", "type": "symbol"}, S),
    Expect("nvml-driver-broken", "NvwatchAgentSourceDown", {"source": "nvml"}, C,
           recovers_s=NVML_RETRY_S),
    Expect("nvml-driver-broken", "NvwatchGpuMissing", {}, C, recovers_s=NVML_RETRY_S),
    Expect("ib-hca-vanish", "NvwatchAgentSourceDown", {"source": "infiniband"}, C),
    Expect("ib-hca-vanish", "NvwatchIbPortsMissing", {}, C),
)  # fmt: skip

# Critical and warning alerts that no scenario of the simulator raises, and why.
ALERTS_OUTSIDE = {
    "NvwatchGpuHwPowerBrake": "no scenario asserts the external power brake",
    "NvwatchNodePowerNearBudget": "no scenario; a capacity signal of the whole node",
    "NvwatchNvlinkErrors": (
        "nvlink-degraded's bad link logs its errors for 20 simulated s (2 real s) before "
        "it drops, shorter than the alert's for:; its neighbours log crc_flit at 1/s, the "
        "threshold itself, so the alert only flickers pending. The link-down alerts carry "
        "the page"
    ),
    "NvwatchIbPortDown": (
        "ib-link-flap's port is down 10 of every 60 simulated s, shorter than for_fast: "
        "the flap pages through NvwatchIbLinkDowned; no scenario keeps a port down"
    ),
    "NvwatchIbCounterSaturated": (
        "only port_xmit_wait saturates within a run (ib-congestion), which the alert "
        "leaves out by design"
    ),
    "NvwatchGpuPcieLinkDegraded": "no scenario trains a PCIe link down",
    "NvwatchGpuPcieReplays": "no scenario replays PCIe packets",
    "NvwatchGpuRowRemapFailure": "no scenario exhausts the spare rows",
    "NvwatchAgentDown": "tests/e2e/test_fleet_e2e.py kills an agent for it",
    "NvwatchAgentStale": "no scenario wedges a poll loop",
    "NvwatchAgentUnscraped": "tests/e2e/test_sharded_vm.py kills a vmagent shard for it",
    # the node around the GPUs: this matrix's Prometheus does not probe the BMCs; each
    # of these pages end to end in tests/e2e/test_bmc_e2e.py (its fault from the first
    # scrape on), and none reads an agent's series, so an agent restart cannot touch it.
    # Their course through a Prometheus restart is not exercised yet.
    "NvwatchNodeInletTemperatureHigh": "BMC: hot-aisle, tests/e2e/test_bmc_e2e.py",
    "NvwatchNodeFanStopped": "BMC: fan-failure, tests/e2e/test_bmc_e2e.py",
    "NvwatchNodePowerSupplyFailed": "BMC: psu-failure, tests/e2e/test_bmc_e2e.py",
    "NvwatchNodePowerSupplyRedundancyLost": "BMC: psu-failure, tests/e2e/test_bmc_e2e.py",
    "NvwatchBmcDown": "BMC: bmc-unreachable, tests/e2e/test_bmc_e2e.py",
    "NvwatchNodePowerNearMax": "BMC: no scenario drives a node to its class's maximum power",
    # the cluster's Slurm queue: no agent of this fleet runs `--sources scheduler`; each
    # fires and stays quiet on its neighbour in tests/mixin/promtool/scheduler.yaml
    "NvwatchSchedulerJobsWaitingWhileGpusIdle": (
        "scheduler: the simulated fleet has no queue; a real Slurm's queue fires it "
        "through a real Prometheus in tests/slurm/test_queue_alerts.py"
    ),
    "NvwatchSchedulerNodesUnavailable": "scheduler: the simulated fleet has no queue",
    # a job's ranks compared with each other: the fleet's jobs are not synchronous (no rank
    # waits for another) and every run is shorter than straggler_warmup; each cause fires
    # and each look-alike stays quiet in tests/mixin/promtool/stragglers.yaml
    "NvwatchJobStraggler": "jobs: the simulated fleet runs no synchronous multi-GPU job",
    "NvwatchSchedulerSourceDown": "scheduler: no agent of the fleet runs the source",
}


def matrix_config() -> MixinConfig:
    """The e2e's config (shrunk for:, scaled rates), plus the XID storm's codes as critical,
    and a keep_firing_for as long as (b)'s outage needs (MATRIX_KEEP_FIRING_FOR)."""
    base = mixin_config()
    storm = tuple(sorted({str(x) for x in XID_STORM_BURST} - set(base.critical_xids)))
    return base.with_overrides(
        critical_xids=base.critical_xids + storm, keep_firing_for=MATRIX_KEEP_FIRING_FOR
    )


# --- timing ----------------------------------------------------------------------------

# The e2e shrinks the mixin's for: and windows ~10x (5m -> 30s). Prometheus's own alert
# timings shrink by the same factor, or a restart would be judged against production
# timings 10x too lenient: Alertmanager holds an alert 4 x resend-delay after the last
# send (4 min in production, longer than a 2m for: and shorter than a 5m one), and
# Prometheus restores an alert's `for` state after a restart only for a for: of at least
# the grace period (10m by default). With that default an alert whose for: lies between
# 4 x resend-delay and the grace period (5m) is pending again after a restart until
# Alertmanager has resolved it, then pages again; a grace period no longer than the
# shortest for: (1m) restores it firing instead, so deploy/ runs Prometheus with
# --rules.alert.for-grace-period=1m and this runs its 10x scaled form.
PROMETHEUS_ALERT_FLAGS = (
    f"--rules.alert.resend-delay={60 / RULE_TIME_FACTOR:g}s",
    f"--rules.alert.for-grace-period={60 / RULE_TIME_FACTOR:g}s",
    f"--rules.alert.for-outage-tolerance={3600 / RULE_TIME_FACTOR:g}s",
)
# In production keep_firing_for (5m) rides over 20 scrapes (15 s) of a restart that takes
# 1-3 s. (b) holds every agent down until Prometheus has seen all 17 down, then starts
# them one after the other, each polling its node once first: on two loaded cores the
# last node was back more than the e2e's 5 s after the stop. 15 s is 15 of these 1 s
# scrapes, still fewer than production's 20; the repair's resolve bound adds it.
MATRIX_KEEP_FIRING_FOR = "15s"
# Scrape 1 s + evaluation 1 s + group_wait 1 s, two samples for a rate, and two shared
# cores: how much later than its for: an alert may reach the webhook.
FIRE_MARGIN_S = 20.0
SCRAPE_AT_POLL = f"{POLL_INTERVAL:g}s"
# what a repair's resolution may take past recovery, window and keep_firing_for
RESOLVE_MARGIN_S = 15.0
# after a restart, how long resolve notifications get to arrive once every alert that
# should fire is firing again in Prometheus
NOTIFY_S = 5.0
# least time after a restart before the next phase, so a resolve shows if it happens
SETTLE_S = 10.0


@dataclass(frozen=True)
class Rule:
    for_s: float
    windowed: bool  # reads a range (rate, *_over_time, ...): may need a window of samples
    keep_firing_s: float  # how long it fires on once its expression no longer holds


def load_rules(path: Path) -> dict[str, Rule]:
    rules: dict[str, Rule] = {}
    for group in yaml.safe_load(path.read_text())["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                # no for: (events) is 0, which parse_duration refuses
                held = parse_duration(rule["for"]) if "for" in rule else 0.0
                kept = rule.get("keep_firing_for")
                kept_s = parse_duration(kept) if kept else 0.0
                rules[rule["alert"]] = Rule(held, "[" in rule["expr"], kept_s)
    return rules


# --- one run of the whole timeline -----------------------------------------------------


@dataclass
class Event:
    at: float  # monotonic, when the webhook got it
    status: str  # firing | resolved
    labels: dict[str, str]


@dataclass
class Run:
    stack: Stack
    rules: dict[str, Rule]
    rate_window_s: float
    time_started: float = 0.0  # simulated time runs; the faults begin
    prometheus_ready: float = 0.0  # (a): Prometheus's first scrapes
    agents_stopped: float = 0.0  # (b)
    agents_back: float = 0.0
    # (from, to) on Prometheus's clock: from just before a restart until every agent
    # was scraped again after it and NvwatchAgentDown was gone (see check_healthy)
    outages: list[tuple[float, float]] = field(default_factory=list)
    prometheus_stopped: float = 0.0  # (c)
    prometheus_back: float = 0.0
    repaired: float = 0.0
    ended: float = 0.0
    repair_error: str | None = None
    healthy_alerts: list[dict[str, str]] = field(default_factory=list)
    healthy_agent_down_outside_restarts: list[dict[str, str]] = field(default_factory=list)
    healthy_notifications: list[dict[str, str]] = field(default_factory=list)

    # -- observations --

    def events(self, expect: Expect) -> list[Event]:
        return [
            Event(a["received_monotonic"], a["status"], a["labels"])
            for a in self.stack.receiver.received()
            if expect.matches(a["labels"])
        ]

    def firing_in_prometheus(self, since_wall: float) -> list[dict[str, str]]:
        """Label sets of the faults cluster's alerts firing in Prometheus now.

        Only samples of the last evaluations, and of none before `since_wall` (unix
        time): after a restart, the ALERTS of the previous Prometheus still answer an
        instant query for 5 minutes (nothing marks them stale).
        """
        alerts = f'ALERTS{{cluster="{FAULTS_CLUSTER}", alertstate="firing"}}'
        query = f"timestamp({alerts}) > time() - 3 > {since_wall:.3f}"
        return [r["metric"] for r in self.stack.query(query)]

    def fire_bound(self, expect: Expect) -> float:
        """Its for:, one window for an expression over a range (new events are counted
        against the count one window ago; a rate needs its samples), and the margin."""
        rule = self.rules[expect.alert]
        return rule.for_s + (self.rate_window_s if rule.windowed else 0.0) + FIRE_MARGIN_S

    def resolve_bound(self, expect: Expect) -> float:
        rule = self.rules[expect.alert]
        window = self.rate_window_s if rule.windowed else 0.0
        return expect.recovers_s + window + rule.keep_firing_s + RESOLVE_MARGIN_S

    # -- the phases --

    def settle(self, since: float, what: str) -> None:
        """Until every condition/stream alert fires in Prometheus again, all at once (or
        the longest bound is over), and the notifications of the meantime had time to
        arrive. Once Prometheus has sent an alert firing again, Alertmanager cannot time
        it out any more: no resolve can come later from this restart."""
        expected = [e for e in EXPECTED if e.pattern is not Pattern.EVENT_HISTORY]
        deadline = since + max(self.fire_bound(e) for e in expected)
        since_wall = time.time() - (time.monotonic() - since)
        while time.monotonic() < deadline:
            firing = self.firing_in_prometheus(since_wall)
            missing = [e for e in expected if not any(e.matches(f) for f in firing)]
            if not missing and time.monotonic() >= since + SETTLE_S:
                break
            time.sleep(1)
        time.sleep(NOTIFY_S)
        print(f"restart matrix: {what} settled {time.monotonic() - since:.0f}s after")

    def phase_a(self) -> None:
        """Until every alert that must page has paged, or its bound is over."""
        waiting = [e for e in EXPECTED if e.pattern is not Pattern.EVENT_HISTORY]
        while waiting:
            now = time.monotonic()
            waiting = [
                e
                for e in waiting
                if not any(ev.status == "firing" for ev in self.events(e))
                and now < self.deadline_a(e)
            ]
            time.sleep(1)
        # an event-history alert that pages at all does so within a scrape or two
        time.sleep(NOTIFY_S)
        print(f"restart matrix: (a) over {time.monotonic() - self.prometheus_ready:.0f}s after")

    def deadline_a(self, expect: Expect) -> float:
        start = max(self.prometheus_ready, self.time_started + expect.develops_s)
        return start + self.fire_bound(expect)

    def phase_b(self) -> None:
        indices = list(range(len(self.stack.fleet.nodes)))
        began = self.prometheus_time()
        self.agents_stopped = time.monotonic()
        self.stack.stop_agents(indices)
        # a restart no scrape notices tests nothing: hold the agents down until
        # Prometheus has failed a scrape of each (a real restart takes 1-3 s; at 15 s
        # scrapes a rolling restart of a fleet fails some nodes' scrapes every time)
        wait_for(
            "Prometheus to see every agent down",
            lambda: self.stack.query(f'count(up{{job="nvwatch"}} == 0) == {len(indices)}'),
            30,
        )
        down = time.monotonic()
        self.stack.start_agents(indices)
        self.agents_back = time.monotonic()
        print(
            f"restart matrix: agents stopped and seen down in {down - self.agents_stopped:.1f}s,"
            f" started in {self.agents_back - down:.1f}s"
        )
        self.outages.append((began, self.wait_agents_clear(began)))
        self.settle(self.agents_back, "agent restart")

    def phase_c(self) -> None:
        began = self.prometheus_time()
        self.prometheus_stopped = self.stack.restart_prometheus()
        self.prometheus_back = time.monotonic()
        self.outages.append((began, self.wait_agents_clear(began)))
        self.settle(self.prometheus_back, "Prometheus restart")

    def wait_agents_clear(self, since_unix: float) -> float:
        """Until every agent has a successful scrape after `since_unix` and no
        NvwatchAgentDown is evaluated any more; then Prometheus's time()."""
        count = len(self.stack.fleet.nodes)
        up = 'up{job="nvwatch"}'
        wait_for(
            "every agent scraped again and NvwatchAgentDown gone",
            lambda: (
                self.stack.query(
                    f"count(timestamp({up}) > {since_unix:.3f} and {up} == 1) == {count}"
                )
                and not self.stack.query(
                    'timestamp(ALERTS{alertname="NvwatchAgentDown"}) > time() - 3'
                )
            ),
            30,
        )
        return self.prometheus_time()

    def phase_repair(self) -> None:
        self.repaired = time.monotonic()
        try:
            for index in FAULT_NODE_INDICES:
                repaired = repair(self.stack.fleet, index)
                wanted = {f.scenario for f in FAULTS if node_index(f.scenario) == index}
                # named with or without their target (ecc-dbe@4)
                ended = {name.partition("@")[0] for name in repaired}
                assert wanted <= ended, f"node {index}: repaired {repaired}, not all of {wanted}"
        except NotImplementedError as exc:
            self.repair_error = str(exc)
            return
        waiting = [e for e in EXPECTED if e.pattern is not Pattern.EVENT_HISTORY]
        while waiting:
            now = time.monotonic()
            waiting = [
                e
                for e in waiting
                if now < self.repaired + self.resolve_bound(e) and not self.all_resolved(e)
            ]
            time.sleep(1)

    def last_events(self, expect: Expect, before: float = float("inf")) -> dict[str, Event]:
        """The last notification before `before` of each alert (label set) of `expect`."""
        last: dict[str, Event] = {}
        for ev in self.events(expect):
            if ev.at < before:
                last[repr(sorted(ev.labels.items()))] = ev
        return last

    def all_resolved(self, expect: Expect) -> bool:
        last = self.last_events(expect)
        return bool(last) and all(ev.status == "resolved" for ev in last.values())

    def check_healthy(self) -> None:
        span = f"{int(time.monotonic() - self.time_started) + 5}s"
        self.healthy_alerts = [
            r["metric"]
            for r in self.stack.query(
                f'last_over_time(ALERTS{{cluster=~"healthy-.*", '
                f'alertname!="NvwatchAgentDown"}}[{span}])'
            )
        ]
        # NvwatchAgentDown goes pending while (b) holds an agent down: that agent is
        # down, and the alert's for: exists to ride over exactly that. So it does after
        # (c): a scrape in flight when Prometheus stops is recorded as failed (up 0), and
        # the new Prometheus reads that sample until its own first scrape. Outside those
        # outages it must not show, and it must never fire.
        samples = self.stack.query(
            f'ALERTS{{cluster=~"healthy-.*", alertname="NvwatchAgentDown"}}[{span}]'
        )
        self.healthy_agent_down_outside_restarts = [
            {**r["metric"], "at": str(t)}
            for r in samples
            for t, _ in r["values"]
            if r["metric"].get("alertstate") == "firing"
            or not any(a <= float(t) <= b for a, b in self.outages)
        ]
        self.healthy_notifications = [
            a["labels"]
            for a in self.stack.receiver.received()
            if a["labels"].get("cluster", "").startswith("healthy-")
        ]

    def prometheus_time(self) -> float:
        """Now, on Prometheus's clock (unix seconds), to bound a range query exactly."""
        return float(self.stack.query("time()")[0]["value"][1])

    # -- the cells of the matrix --

    def cell_a(self, e: Expect) -> tuple[bool, str]:
        fired = [
            ev for ev in self.events(e) if ev.status == "firing" and ev.at < self.agents_stopped
        ]
        if e.pattern is Pattern.EVENT_HISTORY:
            if fired:
                return False, f"paged {fired[0].at - self.prometheus_ready:.0f}s in for history"
            return True, "no page (history)"
        if not fired:
            return False, f"never paged (bound {self.deadline_a(e) - self.prometheus_ready:.0f}s)"
        took = fired[0].at - self.prometheus_ready
        bound = self.deadline_a(e) - self.prometheus_ready
        text = f"paged {took:.0f}s (bound {bound:.0f}s)"
        # no restart yet: a resolve now is the rule losing a fault that still lasts
        flaps = [
            ev
            for ev in self.events(e)
            if ev.status == "resolved" and fired[0].at < ev.at < self.agents_stopped
        ]
        if flaps:
            return False, f"{text}, resolved at {flaps[0].at - self.prometheus_ready:.0f}s"
        return fired[0].at <= self.deadline_a(e), text

    def cell_restart(self, e: Expect, began: float, back: float, end: float) -> tuple[bool, str]:
        before = [ev for ev in self.events(e) if ev.at < began]
        during = [ev for ev in self.events(e) if began <= ev.at < end]
        firing_before = bool(before) and before[-1].status == "firing"
        pages = [ev for ev in during if ev.status == "firing"]
        resolves = [ev for ev in during if ev.status == "resolved"]
        if e.pattern is Pattern.EVENT_HISTORY:
            if pages:
                return False, f"paged again {pages[0].at - began:.0f}s after the restart"
            return True, "no page"
        if not firing_before:
            if not pages:
                return False, "not firing before the restart, nor after"
            took = pages[0].at - back
            bound = self.fire_bound(e)
            return took <= bound, f"paged {took:.0f}s after (bound {bound:.0f}s)"
        if resolves:
            text = f"resolved {resolves[0].at - began:.0f}s after the restart began"
            later = [ev for ev in pages if ev.at > resolves[0].at]
            text += f", paged again at {later[0].at - began:.0f}s" if later else ", not again"
            if e.refires_because and later:
                # documented: a resolve is allowed, the page must come back within bound
                took, bound = later[0].at - back, self.fire_bound(e)
                return took <= bound, f"{text} (by design, bound {bound:.0f}s after)"
            return False, text
        return True, "stayed firing"

    def cell_b(self, e: Expect) -> tuple[bool, str]:
        ok, text = self.cell_restart(
            e, self.agents_stopped, self.agents_back, self.prometheus_stopped
        )
        kept = self.rules[e.alert].keep_firing_s
        if not ok and kept:
            # a resolve is keep_firing_for running out: say against how long an outage
            down = self.agents_back - self.agents_stopped
            text += f" (agents down {down:.0f}s to the last start, keep_firing_for {kept:.0f}s)"
        return ok, text

    def cell_c(self, e: Expect) -> tuple[bool, str]:
        return self.cell_restart(e, self.prometheus_stopped, self.prometheus_back, self.repaired)

    def cell_repair(self, e: Expect) -> tuple[bool, str]:
        if self.repair_error is not None:
            return False, "not repaired: " + self.repair_error
        after = [ev for ev in self.events(e) if ev.at >= self.repaired]
        if e.pattern is Pattern.EVENT_HISTORY:
            pages = [ev for ev in after if ev.status == "firing"]
            return not pages, "paged after the repair" if pages else "nothing to resolve"
        bound = self.resolve_bound(e)
        if not any(ev.status == "firing" for ev in self.last_events(e, self.repaired).values()):
            return False, "not firing at the repair: resolved while the fault lasted"
        if not self.all_resolved(e):
            return False, f"not resolved (bound {bound:.0f}s)"
        took = max(ev.at for ev in self.last_events(e).values()) - self.repaired
        return took <= bound, f"resolved {took:.0f}s (bound {bound:.0f}s)"

    def matrix(self) -> str:
        head = (
            f"{'scenario / alert':<62} | {'(a) before 1st scrape':<24} | {'(b) agent restart':<24}"
        )
        head += f" | {'(c) Prometheus restart':<24} | repair"
        lines = [head, "-" * len(head)]
        for e in EXPECTED:
            cells = [self.cell_a(e), self.cell_b(e), self.cell_c(e), self.cell_repair(e)]
            shown = [("" if ok else "FAIL ") + text for ok, text in cells]
            lines.append(f"{e.name:<62} | " + " | ".join(f"{s:<24}" for s in shown))
        return "\n".join(lines)


def repair(fleet: Fleet, index: int) -> list[str]:
    """End every scenario of node `index`, as an operator's repair does; what it ended."""
    method = getattr(fleet, "repair", None)
    if method is None:
        raise NotImplementedError("the simulated fleet has no repair yet (Fleet.repair)")
    return [str(name) for name in method(index)]


def faults_visible(fleet: Fleet) -> list[str]:
    """The scenarios whose fault does not show in their agent's /metrics yet."""
    samples = {}
    for index in FAULT_NODE_INDICES:
        with urllib.request.urlopen(fleet.nodes[index].url, timeout=5) as response:
            text = response.read().decode()
        samples[index] = [s for f in text_string_to_metric_families(text) for s in f.samples]
    missing = []
    for fault in FAULTS:
        if fault.visible is None:
            continue
        name, labels, test = fault.visible
        if not any(
            s.name == name
            and all(s.labels.get(k) == v for k, v in labels.items())
            and test(s.value)
            for s in samples[node_index(fault.scenario)]
        ):
            missing.append(fault.scenario)
    return missing


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    prometheus = require_tool("prometheus")
    alertmanager = require_tool("prometheus-alertmanager", "alertmanager")
    workdir: Path = tmp_path_factory.mktemp("restart-matrix")
    config = matrix_config()
    rules = workdir / "rules"
    alerts_build.write(rules, config)
    profiles = [*HEALTHY_PROFILES, *FAULT_PROFILES]
    fleet = Fleet(
        profiles,
        base_port=0,
        interval=POLL_INTERVAL,
        scenarios=[
            # from=0: every fault begins with simulated time, not after a healthy
            # baseline (the scenarios' own onset), so Prometheus never sees it healthy
            (node_index(f.scenario), ScenarioSpec(f.scenario, f.target, from_s=0.0))
            for f in FAULTS
        ],
        seed=11,
        time_scale=TIME_SCALE,
        cluster=[healthy_cluster(p) for p in HEALTHY_PROFILES]
        + [FAULTS_CLUSTER] * len(FAULT_PROFILES),
        # time (and with it every fault) begins once every node is up
        hold_time=True,
    )
    stack = Stack(workdir, fleet, Receiver())
    result = Run(
        stack,
        load_rules(rules / alerts_build.PROMETHEUS_ALERTS),
        parse_duration(config.rate_window),
    )
    try:
        fleet.start()
        fleet.run_time()
        result.time_started = time.monotonic()
        stack.start_alertmanager(alertmanager)
        missing: list[str] = []

        def all_visible() -> bool:
            missing[:] = faults_visible(fleet)
            return not missing

        try:
            wait_for("every fault in its agent's /metrics", all_visible, 30)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: not yet {missing}") from None
        stack.start_prometheus(
            prometheus,
            [rules / alerts_build.PROMETHEUS_ALERTS, rules / alerts_build.PROMETHEUS_RECORDING],
            # once a poll, as the sharded-VM test: a second scrape between two polls reads
            # nothing new, and a scrape's 1 s timeout ran out under load on two cores (a
            # healthy agent's NvwatchAgentDown went pending); at 2 s its timeout is 2 s
            SCRAPE_AT_POLL,
            PROMETHEUS_ALERT_FLAGS,
        )
        result.prometheus_ready = time.monotonic()
        result.phase_a()
        result.phase_b()
        result.phase_c()
        result.phase_repair()
        result.check_healthy()
        result.ended = time.monotonic()
        print(
            f"\nrestart matrix ({result.ended - result.time_started:.0f}s: (a) "
            f"{result.agents_stopped - result.prometheus_ready:.0f}s, (b) "
            f"{result.prometheus_stopped - result.agents_stopped:.0f}s, (c) "
            f"{result.repaired - result.prometheus_stopped:.0f}s, repair "
            f"{result.ended - result.repaired:.0f}s)\n{result.matrix()}"
        )
        yield result
    finally:
        stack.close()


# --- the tests -------------------------------------------------------------------------


def _failures(run: Run, cell: Callable[[Expect], tuple[bool, str]]) -> list[str]:
    return [f"{e.name}: {text}" for e in EXPECTED for ok, text in [cell(e)] if not ok]


def test_a_faults_older_than_the_first_scrape_page(run: Run) -> None:
    failed = _failures(run, run.cell_a)
    assert not failed, "\n".join(failed) + "\n\n" + run.matrix()


def test_b_agent_restart_changes_nothing(run: Run) -> None:
    failed = _failures(run, run.cell_b)
    assert not failed, "\n".join(failed) + "\n\n" + run.matrix()


def test_c_prometheus_restart_changes_nothing(run: Run) -> None:
    failed = _failures(run, run.cell_c)
    assert not failed, "\n".join(failed) + "\n\n" + run.matrix()


def test_repair_resolves(run: Run) -> None:
    failed = _failures(run, run.cell_repair)
    assert not failed, "\n".join(failed) + "\n\n" + run.matrix()


def test_healthy_profiles_never_alert(run: Run) -> None:
    assert not run.healthy_alerts, (
        f"healthy nodes alerted (firing or pending): {run.healthy_alerts}"
    )
    assert not run.healthy_agent_down_outside_restarts, (
        f"NvwatchAgentDown outside a restart: {run.healthy_agent_down_outside_restarts}"
    )
    assert not run.healthy_notifications, f"healthy nodes paged: {run.healthy_notifications}"


def test_matrix_accounts_for_every_alert_and_scenario() -> None:
    """A new alert or scenario joins the matrix or states why not; none is left out."""
    paging = {
        a.name
        for a in all_alerts(matrix_config())
        if a.severity in (Severity.CRITICAL, Severity.WARNING)
    }
    in_matrix = {e.alert for e in EXPECTED}
    assert not in_matrix - paging, f"not critical/warning alerts: {in_matrix - paging}"
    assert not ALERTS_OUTSIDE.keys() & in_matrix, "an alert both in and outside the matrix"
    assert not ALERTS_OUTSIDE.keys() - paging, "ALERTS_OUTSIDE names an alert that is gone"
    unaccounted = paging - in_matrix - ALERTS_OUTSIDE.keys()
    assert not unaccounted, f"alerts neither in the matrix nor in ALERTS_OUTSIDE: {unaccounted}"

    scenarios = set(known_scenarios())
    in_fleet = {f.scenario for f in FAULTS}
    assert not (in_fleet | SCENARIOS_OUTSIDE.keys()) - scenarios, "a scenario that is gone"
    unaccounted = scenarios - in_fleet - SCENARIOS_OUTSIDE.keys()
    assert not unaccounted, (
        f"scenarios neither in the matrix nor in SCENARIOS_OUTSIDE: {unaccounted}"
    )
    assert in_fleet == {e.scenario for e in EXPECTED}, "a fault node without an expectation"
