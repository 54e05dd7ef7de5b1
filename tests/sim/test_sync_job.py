"""A synchronous data-parallel job across four simulated nodes runs at its slowest rank.

Each test plans a fleet as `simulate fleet` does (`--job 0-3:all`, scenarios by node),
builds its nodes on one manual clock and reads what the simulator integrates over a
minute: every GPU's energy, GPM activity and NVLink bytes, every rail's InfiniBand
counters, the hosts' CPU. The expected steps are worked out here from a healthy step of
2 s, 30 % of it in the all-reduce: a rank whose part of the step runs at a share x of its
speed takes 1/x as long for that part, and the job takes as long as its slowest rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvwatch.agent.sources.host import HostSource
from nvwatch.agent.sources.infiniband_parse import parse_rate
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fleet.jobs import FleetJob, check_jobs, parse_job, sync_job_plans
from nvwatch.sim.fleet.plan import FleetError, parse_node_scenario, plan_fleet
from nvwatch.sim.gpu.state import (
    REASON_HW_THERMAL,
    REASON_SW_POWER_CAP,
    REASON_SW_THERMAL,
)
from nvwatch.sim.job.plan import rail
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.profiles import PROFILES

PROFILE = "dgx-h100"  # 8 GPUs on NVSwitch, 8 InfiniBand rails
GPUS = 8
STEP_S = 2.0  # a healthy training step ...
COMPUTE_S = 0.7 * STEP_S  # ... 70 % computing
COMM_S = 0.3 * STEP_S  # ... 30 % in the all-reduce
SETTLED_S = 300.0  # past every onset (30 s) and the cells that follow it
WINDOW_S = 60.0
MAX_CLOCK = PROFILES[PROFILE].gpus[0].max_sm_clock_mhz
STRAGGLER = (2, 3)  # node 2, GPU 3
RAIL = rail(PROFILES[PROFILE], STRAGGLER[1])
THERMAL = REASON_SW_THERMAL | REASON_HW_THERMAL


@dataclass(frozen=True)
class Reading:
    """One GPU over the window."""

    power_w: float
    tensor: float  # GPM tensor activity
    util: float
    nvlink_bytes_per_s: float
    sm_clock_mhz: int
    reasons: int


@dataclass(frozen=True)
class Window:
    gpus: dict[tuple[int, int], Reading]  # (node, GPU) -> reading
    port_bytes_per_s: dict[tuple[int, str], float]  # (node, HCA) -> data sent
    port_stall: dict[tuple[int, str], float]  # share of the window waiting to send
    step_s: float  # the job's step, as node 0 follows it

    def healthy(self) -> list[Reading]:
        return [r for (node, _), r in self.gpus.items() if node != STRAGGLER[0]]


PortCounts = dict[tuple[int, str], tuple[float, float]]  # (data words, xmit_wait ticks)


class Fleet:
    """The simulated nodes of a fleet plan, on one manual clock."""

    def __init__(self, root: Path, scenarios: Sequence[str], jobs: Sequence[str]) -> None:
        specs = plan_fleet(
            [PROFILE] * 4, base_port=0, scenarios=[parse_node_scenario(s) for s in scenarios]
        )
        fleet_jobs = [parse_job(text, n) for n, text in enumerate(jobs)]
        check_jobs(fleet_jobs, [GPUS] * 4)
        plans = sync_job_plans(fleet_jobs, specs)
        self.clock = ManualClock()
        self.nodes = [
            SimulatedNode(
                spec.profile,
                spec.scenarios,
                seed=spec.seed,
                clock=self.clock,
                sysfs_root=root / spec.name,
                sync_jobs=[p for p in plans if p.ranks_on(spec.index)],
                fleet_index=spec.index,
            )
            for spec in specs
        ]

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        for node in self.nodes:
            node.tick()

    def window(self, seconds: float = WINDOW_S) -> Window:
        before = self._counters()
        self.advance(seconds)
        after = self._counters()
        gpus = {}
        for key, (energy, tensor, nvlink) in after[0].items():
            gpu = self.nodes[key[0]].nvml.gpus[key[1]]
            e0, t0, n0 = before[0][key]
            gpus[key] = Reading(
                power_w=(energy - e0) / 1000.0 / seconds,
                tensor=(tensor - t0) / seconds,
                util=gpu.utilization,
                nvlink_bytes_per_s=(nvlink - n0) / seconds,
                sm_clock_mhz=gpu.sm_clock_mhz,
                reasons=gpu.reasons,
            )
        sent = {k: (v[0] - before[1][k][0]) * 4 / seconds for k, v in after[1].items()}
        ticks_per_s = 250_000_000  # a stalled ConnectX port's port_xmit_wait rate
        stall = {k: (v[1] - before[1][k][1]) / seconds / ticks_per_s for k, v in after[1].items()}
        jobs = self.nodes[0].sync_jobs
        step = jobs[0].state(self.clock()).step_s if jobs else STEP_S
        return Window(gpus, sent, stall, step)

    def _counters(self) -> tuple[dict[tuple[int, int], tuple[float, float, float]], PortCounts]:
        gpus = {}
        ports: PortCounts = {}
        for n, node in enumerate(self.nodes):
            for gpu in node.nvml.gpus:
                nvlink = sum(link.tx_bytes for link in gpu.links)
                gpus[(n, gpu.index)] = (gpu.energy_mj, gpu.activity().tensor_active, nvlink)
            for device in node.fabric.devices:
                counters = node.fabric.port(device).counters
                ports[(n, device)] = (counters["port_xmit_data"], counters["port_xmit_wait"])
        return gpus, ports

    def repair(self, index: int, what: str) -> list[str]:
        """What the fleet does with a repair request: the node repairs itself, and every
        node's view of the job learns of it."""
        repaired = self.nodes[index].repair(what)
        for node in self.nodes:
            for job in node.sync_jobs:
                job.repair(index, what)
        return repaired

    def close(self) -> None:
        for node in self.nodes:
            node.close()


MakeFleet = Callable[..., Fleet]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[MakeFleet]:
    made: list[Fleet] = []

    def make(scenarios: Sequence[str] = (), jobs: Sequence[str] = ("0-3:all,id=77",)) -> Fleet:
        built = Fleet(tmp_path / str(len(made)), scenarios, jobs)
        made.append(built)
        return built

    yield make
    for built in made:
        built.close()


def settled(fleet: MakeFleet, *scenarios: str) -> Window:
    run = fleet(scenarios)
    run.advance(SETTLED_S)
    return run.window()


@pytest.fixture
def healthy(fleet: MakeFleet) -> Window:
    return settled(fleet)


def spread(values: Sequence[float]) -> float:
    return (max(values) - min(values)) / max(values)


# --- a healthy job and one slowed everywhere: no rank stands out -----------------------


def test_a_healthy_job_runs_its_ranks_alike(healthy: Window) -> None:
    assert healthy.step_s == pytest.approx(STEP_S)
    readings = list(healthy.gpus.values())
    assert spread([r.power_w for r in readings]) < 0.01
    assert spread([r.tensor for r in readings]) < 0.01
    assert all(r.util >= 0.9 and r.reasons == 0 for r in readings)
    assert all(r.sm_clock_mhz == MAX_CLOCK for r in readings)


def test_a_job_capped_everywhere_slows_with_no_rank_standing_out(
    fleet: MakeFleet, healthy: Window
) -> None:
    capped = settled(fleet, *(f"power-capped@{g},slowdown=0.2" for g in range(GPUS)))
    assert capped.step_s == pytest.approx(COMPUTE_S / 0.8 + COMM_S)
    readings = list(capped.gpus.values())
    assert spread([r.power_w for r in readings]) < 0.01
    assert spread([r.tensor for r in readings]) < 0.01
    assert all(r.reasons & REASON_SW_POWER_CAP for r in readings)
    # nobody waits: each rank computes as long as the step lets it
    assert min(r.tensor for r in readings) >= min(r.tensor for r in healthy.gpus.values())


# --- one rank slowed: the job waits for it, the others idle in NCCL --------------------


def assert_the_others_wait(slowed: Window, healthy: Window) -> None:
    """The healthy ranks look busy but draw less and compute less, by the job's step;
    their NVLink moves one step's gradients per (longer) step."""
    slower = slowed.step_s / healthy.step_s
    base = healthy.gpus[(0, 0)]
    for reading in slowed.healthy():
        assert reading.util >= 0.85
        assert reading.power_w < base.power_w * (1 - 0.3 * (1 - 1 / slower))
        assert reading.tensor < base.tensor * (1 - 0.5 * (1 - 1 / slower))
        assert reading.nvlink_bytes_per_s == pytest.approx(
            base.nvlink_bytes_per_s / slower, rel=0.02
        )
        assert reading.sm_clock_mhz == MAX_CLOCK and reading.reasons == 0
    # the straggler never waits: its tensor activity is the highest of the job's
    straggler = slowed.gpus[STRAGGLER]
    assert straggler.tensor > max(r.tensor for r in slowed.healthy())


@pytest.mark.parametrize(
    ("slowdown", "job_slower"),
    [(0.125, 1.10), (1 - COMPUTE_S / (1.5 * STEP_S - COMM_S), 1.50)],
    ids=["10%", "50%"],
)
def test_a_slow_gpu_slows_the_job_by_its_compute_share(
    fleet: MakeFleet, healthy: Window, slowdown: float, job_slower: float
) -> None:
    slowed = settled(fleet, f"2:gpu-slow@3,slowdown={slowdown!r}")
    expected = COMPUTE_S / (1 - slowdown) + COMM_S
    assert expected == pytest.approx(job_slower * STEP_S)
    assert slowed.step_s == pytest.approx(expected)
    assert_the_others_wait(slowed, healthy)
    straggler = slowed.gpus[STRAGGLER]
    assert straggler.sm_clock_mhz == pytest.approx((1 - slowdown) * MAX_CLOCK, abs=2)
    assert straggler.reasons & (THERMAL | REASON_SW_POWER_CAP) == 0  # no reason shown


def test_a_repaired_rank_lets_the_job_run_at_full_speed_again(fleet: MakeFleet) -> None:
    run = fleet(["2:gpu-slow@3,slowdown=0.5"])
    run.advance(SETTLED_S)
    assert run.window().step_s == pytest.approx(COMPUTE_S / 0.5 + COMM_S)
    assert run.repair(2, "gpu-slow") == ["gpu-slow@3"]
    run.advance(10.0)  # the next cell of the job's time
    after = run.window()
    assert after.step_s == pytest.approx(STEP_S)
    assert all(job.state(run.clock()).step_s == STEP_S for n in run.nodes for job in n.sync_jobs)
    assert spread([r.power_w for r in after.gpus.values()]) < 0.01


@pytest.mark.parametrize("slowdown", [0.2, 0.08])
def test_a_power_capped_rank_slows_the_job(
    fleet: MakeFleet, healthy: Window, slowdown: float
) -> None:
    """The cap leaves the rank 1 - S of its clocks while it computes (idle power plus
    1 - S of the compute phase's demand), and NVML shows that clock and sw_power_cap,
    even where the step's average power stays under the cap (a small cap)."""
    slowed = settled(fleet, f"2:power-capped@3,slowdown={slowdown}")
    assert slowed.step_s == pytest.approx(COMPUTE_S / (1 - slowdown) + COMM_S)
    assert_the_others_wait(slowed, healthy)
    straggler = slowed.gpus[STRAGGLER]
    assert straggler.reasons & REASON_SW_POWER_CAP
    assert straggler.sm_clock_mhz == pytest.approx((1 - slowdown) * MAX_CLOCK, abs=2)


def test_a_rank_in_thermal_slowdown_slows_the_job_by_its_clocks(
    fleet: MakeFleet, healthy: Window
) -> None:
    run = fleet(["2:thermal-runaway@3,slowdown=0.2"])
    run.advance(900.0)  # the ramp, then ten thermal time constants
    slowed = run.window()
    straggler = slowed.gpus[STRAGGLER]
    assert straggler.reasons & THERMAL == THERMAL
    speed = straggler.sm_clock_mhz / MAX_CLOCK
    assert speed == pytest.approx(0.8, abs=0.03)  # the controller holds it near 1 - S
    assert slowed.step_s == pytest.approx(COMPUTE_S / speed + COMM_S, rel=0.01)
    assert_the_others_wait(slowed, healthy)


def test_a_degraded_nvlink_slows_the_job_by_its_comm_share(
    fleet: MakeFleet, healthy: Window
) -> None:
    slowed = settled(fleet, "2:nvlink-degraded@3,slowdown=0.5")
    assert slowed.step_s == pytest.approx(COMPUTE_S + COMM_S / 0.5)
    assert_the_others_wait(slowed, healthy)
    neighbour = slowed.gpus[(2, 2)]
    assert slowed.gpus[STRAGGLER].nvlink_bytes_per_s == pytest.approx(
        0.5 * neighbour.nvlink_bytes_per_s, rel=0.02
    )


def test_a_congested_rail_slows_the_job_and_shows_its_waits(
    fleet: MakeFleet, healthy: Window
) -> None:
    assert RAIL is not None
    run = fleet([f"2:ib-congestion@{RAIL},slowdown=0.3"])
    # from its onset (30 s), before the 32-bit port_xmit_wait saturates (minutes)
    run.advance(35.0)
    slowed = run.window()
    assert slowed.step_s == pytest.approx(COMPUTE_S + COMM_S / 0.7)
    assert_the_others_wait(slowed, healthy)
    victim, twin = (2, RAIL), (1, RAIL)
    assert slowed.port_stall[victim] > 0.05 > 10 * slowed.port_stall[twin]
    assert slowed.port_bytes_per_s[victim] == pytest.approx(
        0.7 * slowed.port_bytes_per_s[twin], rel=0.05
    )
    # the job's rails all move less than a healthy job's
    assert slowed.port_bytes_per_s[twin] < 0.9 * healthy.port_bytes_per_s[twin]


def test_a_rail_trained_down_slows_the_job_by_its_rate(
    fleet: MakeFleet, healthy: Window, tmp_path: Path
) -> None:
    assert RAIL is not None
    run = fleet([f"2:ib-degraded@{RAIL}"])
    run.advance(SETTLED_S)
    slowed = run.window()
    node = run.nodes[2]
    rate_file = node.sysfs_root / "class/infiniband" / RAIL / "ports/1/rate"
    healthy_rate = parse_rate(PROFILES[PROFILE].nics[0].rate).bytes_per_second
    share = parse_rate(rate_file.read_text().strip()).bytes_per_second / healthy_rate
    assert share < 1
    assert slowed.step_s == pytest.approx(COMPUTE_S + COMM_S / share)
    assert_the_others_wait(slowed, healthy)
    assert slowed.port_bytes_per_s[(2, RAIL)] < slowed.port_bytes_per_s[(1, RAIL)]


def test_a_pcie_link_trained_down_slows_the_job(fleet: MakeFleet, healthy: Window) -> None:
    run = fleet(["2:pcie-downtrained@3,slowdown=0.5"])
    run.advance(SETTLED_S)
    slowed = run.window()
    assert slowed.step_s == pytest.approx(COMPUTE_S + COMM_S / 0.5)
    assert_the_others_wait(slowed, healthy)
    gpus = run.nodes[2].nvml.gpus
    assert gpus[3].pcie_width_current < gpus[2].pcie_width_current == 16


def test_a_starved_host_slows_its_ranks_and_shows_its_cpu(
    fleet: MakeFleet, healthy: Window
) -> None:
    run = fleet(["2:cpu-starved,slowdown=0.25"])
    hosts = [HostSource(cpu_times=node.host.cpu_times) for node in run.nodes]
    run.advance(SETTLED_S)
    for host in hosts:
        host.collect()
    slowed = run.window()
    # the loaders deliver a batch in C0 / 0.75 while the GPU computes it in C0
    assert slowed.step_s == pytest.approx(COMPUTE_S / 0.75 + COMM_S)
    ratios = [host.collect().cpu_utilization_ratio or 0.0 for host in hosts]
    assert ratios[2] > 0.95 and max(ratios[:2] + ratios[3:]) < 0.5
    # every rank of the starved node waits for input, idle: it is the one less busy
    starved = [r for (node, _), r in slowed.gpus.items() if node == 2]
    assert max(r.util for r in starved) < min(r.util for r in slowed.healthy()) - 0.1
    for reading in slowed.healthy():
        assert reading.util >= 0.85
        assert reading.power_w < healthy.gpus[(0, 0)].power_w


def test_a_single_gpu_job_waits_for_no_one(fleet: MakeFleet, healthy: Window) -> None:
    run = fleet(["0:gpu-slow@3,slowdown=0.5"], jobs=["0:3,sync=yes"])
    run.advance(SETTLED_S)
    alone = run.window()
    step = alone.step_s
    assert step == pytest.approx(COMPUTE_S / 0.5 + COMM_S)  # its own step, nobody else's
    # the rest of its node, and every other node, train as before
    for key in ((0, 2), (1, 3)):
        assert alone.gpus[key].power_w == pytest.approx(healthy.gpus[key].power_w, rel=0.02)
    assert alone.gpus[(0, 3)].util == pytest.approx(healthy.gpus[(0, 3)].util, abs=0.02)


def test_nodes_outside_any_job_run_as_they_always_did(tmp_path: Path) -> None:
    """A node of the fleet holding no synchronous rank integrates exactly what a lone
    node with its seed does."""
    clock = ManualClock()
    specs = plan_fleet([PROFILE] * 2, base_port=0)
    plans = sync_job_plans([parse_job("0:all,sync=yes", 0)], specs)
    outside = SimulatedNode(
        PROFILE,
        seed=specs[1].seed,
        clock=clock,
        sysfs_root=tmp_path / "a",
        sync_jobs=plans,
        fleet_index=1,
    )
    lone = SimulatedNode(PROFILE, seed=specs[1].seed, clock=clock, sysfs_root=tmp_path / "b")
    try:
        clock.advance(200.0)
        for node in (outside, lone):
            node.tick()
        assert [g.energy_mj for g in outside.nvml.gpus] == [g.energy_mj for g in lone.nvml.gpus]
        assert not outside.simulates_host and not lone.simulates_host
    finally:
        outside.close()
        lone.close()


# --- the --job syntax --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-3:all,id=77", FleetJob(0, None, "77", "user0", nodes=(0, 1, 2, 3))),
        (" 0, 2 ,5-6 : 0-3 ", FleetJob(0, (0, 1, 2, 3), "1001", "user0", nodes=(0, 2, 5, 6))),
        ("4:all,sync=yes", FleetJob(4, None, "1001", "user0", sync=True)),
        ("1-2:0,sync=no", FleetJob(1, (0,), "1001", "user0", nodes=(1, 2), sync=False)),
    ],
)
def test_multi_node_jobs_parse(text: str, expected: FleetJob) -> None:
    assert parse_job(text, 0) == expected


def test_which_jobs_are_synchronous() -> None:
    assert parse_job("0-3:all", 0).synchronous
    assert not parse_job("0:all", 0).synchronous  # a one-node job as before
    assert parse_job("0:all,sync=yes", 0).synchronous
    assert not parse_job("0-1:all,sync=no", 0).synchronous


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0-3", "invalid fleet job '0-3': use NODE:GPUS"),
        ("3-1:all", "node range 3-1 runs backwards"),
        ("0,1,0:all", "node 0 is named twice"),
        ("0-1:all,sync=maybe", "sync='maybe' is not yes or no"),
        ("0-1:all,sink=yes", "unknown option 'sink=yes'"),
    ],
)
def test_bad_multi_node_jobs_are_one_line(text: str, message: str) -> None:
    with pytest.raises(FleetError, match=message) as err:
        parse_job(text, 0)
    assert "\n" not in str(err.value)


def test_multi_node_jobs_are_checked_against_the_fleet() -> None:
    with pytest.raises(FleetError, match=r"job 1001 on node 4: the fleet has nodes 0\.\.3"):
        check_jobs([parse_job("2-4:all", 0)], [8] * 4)
    with pytest.raises(
        FleetError, match=r"job 1001 on node 1: no GPU 5 \(the node has GPUs 0\.\.3\)"
    ):
        check_jobs([parse_job("0-1:5", 0)], [8, 4])


def test_simulate_fleet_bad_multi_node_jobs_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from nvwatch.agent.cli import main

    for args, message in (
        (["--job", "0-2:all"], "job 1001 on node 2: the fleet has nodes 0..1"),
        (["--job", "1-0:all"], "node range 1-0 runs backwards"),
        (["--queue", "1", "--job", "0-1:0"], "with --queue a --job holds GPUs of one node"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["simulate", "fleet", "--profile", "dgx1-v100:2", *args])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err
