"""One fleet, one Prometheus, one Alertmanager for the whole e2e module: started once.

Layout: cluster "healthy" holds 4x dgx1-v100 + 4x dgx-a100 (GPUs 0-3 of the last one
partitioned with MIG) that must never alert; cluster "faults" holds one node per fault
scenario, all running side by side for the same length of time, plus one healthy node
whose agent the test kills.

Simulated time runs TIME_SCALE times faster than real time, so a thermal runaway that
takes minutes on hardware crosses slowdown in seconds. Every rate a rule compares with a
threshold is then TIME_SCALE times larger per real second, so those thresholds are scaled
by the same factor through MixinConfig overrides; the `for:` durations are shrunk to
seconds. What a rule means is unchanged, only the time it takes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvwatch.agent.config import ScenarioSpec
from nvwatch.alerts import build as alerts_build
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.fabric.fabric import XMIT_WAIT_TICKS_PER_SECOND
from nvwatch.sim.fleet.fleet import Fleet
from nvwatch.sim.fleet.jobs import FleetJob
from tests.conftest import require_tool
from tests.e2e.loopback import wait_for
from tests.e2e.stack import Receiver, Stack

TIME_SCALE = 10.0
POLL_INTERVAL = 2.0  # agents poll (and the fleet ticks) every 2 s; Prometheus scrapes every 1 s
SCRAPE_INTERVAL = "1s"
BASELINE_S = 3.0  # healthy scrapes of every node before simulated time starts


@dataclass(frozen=True)
class Fault:
    node: int
    profile: str
    scenario: str | None  # None: a healthy node whose agent the test kills
    target: str | None
    alert: str
    labels: dict[str, str]  # labels the delivered alert must carry, besides instance


HEALTHY = ["dgx1-v100"] * 4 + ["dgx-a100"] * 4
# the last healthy A100 node runs half its GPUs partitioned, for the dashboards' MIG row
HEALTHY_MIG = (range(7, 8), "0-3:3g.20gb,2g.10gb,1g.5gb*2")
FAULTS = (
    Fault(8, "dgx1-v100", "thermal-runaway", "2", "NvwatchGpuThermalSlowdown", {"gpu": "2"}),
    Fault(9, "dgx-a100", "power-capped", "1", "NvwatchGpuPowerCapped", {"gpu": "1"}),
    Fault(10, "dgx1-v100", "nvlink-degraded", "3", "NvwatchNvlinkDown", {"gpu": "3", "link": "0"}),
    Fault(11, "dgx-a100", "ecc-dbe", "4", "NvwatchGpuEccUncorrectable", {"gpu": "4"}),
    Fault(12, "dgx1-v100", "gpu-lost", "5", "NvwatchGpuDown", {"gpu": "5"}),
    Fault(13, "dgx-a100", "ib-congestion", "mlx5_1", "NvwatchIbPortCongested", {"device": "mlx5_1"}),  # noqa: E501
    Fault(14, "dgx1-v100", "ib-link-flap", "mlx5_2", "NvwatchIbLinkDowned", {"device": "mlx5_2"}),
    Fault(15, "dgx-a100", "ib-degraded", "mlx5_3", "NvwatchIbPortRateDegraded", {"device": "mlx5_3"}),  # noqa: E501
    Fault(16, "dgx1-v100", None, None, "NvwatchAgentDown", {}),
    # job 1004 of carol holds GPUs 2 (training) and 3 (idle): only GPU 3 is idle
    Fault(17, "dgx1-v100", "idle", "3", "NvwatchGpuAllocatedIdle", {"gpu": "3", "job_id": "1004", "user": "carol"}),  # noqa: E501
)  # fmt: skip
KILLED = 16
# Simulated Slurm jobs (sim/fleet/jobs.py): alice runs two jobs and bob one in the
# healthy cluster, all training, for the jobs dashboard and the GPU-hours rules; carol's
# job in the faults cluster holds the idle GPU of node 17.
JOBS = (
    FleetJob(0, (0, 1, 2, 3), "1001", "alice", "physics"),
    FleetJob(1, None, "1002", "alice", "physics"),
    FleetJob(4, None, "1003", "bob", "ml"),
    FleetJob(17, (2, 3), "1004", "carol", "ml"),
)


def mixin_config() -> MixinConfig:
    s = TIME_SCALE
    base = MixinConfig()
    return base.with_overrides(
        evaluation_interval="1s",
        # windows and `for:` of noisy signals scale with simulated time (5m -> 30s): a
        # shorter one would let a healthy job's warm-up or its power swings page
        rate_window="30s",
        for_fast="12s",
        for_default="30s",
        for_slow="30s",
        # 5m -> 30s would hold a repaired condition 30 s past its repair, longer than the
        # matrix's resolve margin; 5 s still rides over the 1 s scrapes an agent restart
        # misses
        keep_firing_for="5s",
        # signals that are never set on a healthy simulated GPU may be shorter
        thermal_slowdown_for="10s",
        power_cap_for="10s",
        hw_power_brake_for="2s",
        # an hour of a job holding an idle GPU: 20 s of it here (6 minutes at 10x)
        gpu_allocated_idle_for="20s",
        # per-real-second rates of simulated counters are TIME_SCALE times the real ones
        temp_rise_celsius_per_minute=base.temp_rise_celsius_per_minute * s,
        nvlink_error_rate_per_second=base.nvlink_error_rate_per_second * s,
        ib_error_rate_per_second=base.ib_error_rate_per_second * s,
        pcie_replay_rate_per_second=base.pcie_replay_rate_per_second * s,
        # port_xmit_wait ticks per real second are TIME_SCALE times the simulated ones
        ib_transmit_wait_tick_seconds=1.0 / XMIT_WAIT_TICKS_PER_SECOND / s,
        # At 10x, the congested port's 32-bit port_xmit_wait saturates ~22 s into the run
        # (as a real one does after ~3.6 min) and the rate over the 30 s window decays
        # after that: true while 0.08 * (52 s - t) / 30 s exceeds the ratio. A 1 %
        # threshold, still 5x a healthy port's ~0.2 %, keeps it true ~46 s (2 %: ~42 s),
        # so slow rule evaluations and scrapes under CI load still leave it firing for
        # half a minute past its 12 s `for:`.
        ib_transmit_wait_ratio=0.01,
    )


# per module, not per session: its 17 agents would otherwise poll on through every later
# e2e module (the restart matrix runs a fleet of its own) on the same two cores
@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus = require_tool("prometheus")
    alertmanager = require_tool("prometheus-alertmanager", "alertmanager")
    workdir: Path = tmp_path_factory.mktemp("e2e")
    config = mixin_config()
    rules = workdir / "rules"
    alerts_build.write(rules, config)
    profiles = HEALTHY + [f.profile for f in FAULTS]
    scenarios = [
        (f.node, ScenarioSpec(f.scenario, f.target)) for f in FAULTS if f.scenario is not None
    ]
    fleet = Fleet(
        profiles,
        base_port=0,
        interval=POLL_INTERVAL,
        scenarios=scenarios,
        seed=7,
        time_scale=TIME_SCALE,
        cluster=["healthy"] * len(HEALTHY) + ["faults"] * len(FAULTS),
        # faults must begin under a scraping Prometheus: event alerts (IB link flaps,
        # XIDs) treat a count already above 0 at a node's first scrape as history, not a
        # new event (docs/alerts.md); condition alerts would fire either way
        hold_time=True,
        mig=[HEALTHY_MIG],
        jobs=JOBS,
    )
    receiver = Receiver()
    result = Stack(workdir, fleet, receiver)
    try:
        fleet.start()
        result.start_alertmanager(alertmanager)
        rule_files = [
            rules / alerts_build.PROMETHEUS_ALERTS,
            rules / alerts_build.PROMETHEUS_RECORDING,
        ]
        result.start_prometheus(prometheus, rule_files, SCRAPE_INTERVAL, bmc=True)
        wait_for(
            "every agent scraped",
            lambda: result.query(f'count(up{{job="nvwatch"}} == 1) == {len(profiles)}'),
            60,
        )
        time.sleep(BASELINE_S)
        fleet.run_time()
        result.started_monotonic = time.monotonic()
        yield result
    finally:
        result.close()
