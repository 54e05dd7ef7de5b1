"""`nvwatch dashboards preview` against a simulated fleet in a real Prometheus.

The fleet runs every fault a dashboard panel shows only under a fault (a thermal runaway,
a power cap, a degraded NVLink, an ECC error, an XID storm, IB congestion and symbol
errors) and MIG on two GPUs, all on its first node (a DGX H100, the one the node
dashboard picks first), beside healthy nodes of three classes. Prometheus scrapes it
with the mixin's recording and alert rules (time scaled as in tests/e2e), and every
node's BMC through the fleet's management host (the `nvwatch-bmc` job), which the power
& cooling dashboard and the node dashboard's BMC row read. A simulated Slurm queue runs
over the fleet (more GPU work offered than it has GPUs, so jobs wait), and the fleet's
Slurm controller agent reads it with the real scheduler source: the queue & fairness
dashboard's series. A synchronous job holds every GPU of the third node, one of them
slowed (gpu-slow): the straggler rules compare its ranks and NvwatchJobStraggler names
that GPU, for the jobs dashboard's stragglers row. Every panel of every dashboard must
come back with data, every PNG must decode to a picture of the dashboard's size, and no
text of a panel may run into another or out of the panel (tests/preview/text_layout.py)
with the fleet's own series.

The faults develop at TIME_SCALE times real time, so every rate drawn then is that many
times what hardware can do (the preview's maxima check says so). The module's last test
turns the fleet to real time, with the rules' rate thresholds back at their real values,
and draws again once the whole range holds real-time samples only: no figure may exceed
its hardware's published maximum there, and the GPUs' energy stays below their nodes'.
With NVWATCH_UPDATE_PREVIEWS=1 that drawing covers REAL_TIME_RANGE_S (5 minutes) and its
PNGs go to docs/dashboards/ (the README shows them); scripts/dashboard-previews runs it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvwatch.agent.config import ScenarioSpec
from nvwatch.alerts import build as alerts_build
from nvwatch.common.durations import DurationBounds, parse_duration
from nvwatch.dashboards.build import build_all
from nvwatch.dashboards.preview import (
    PanelResult,
    Prometheus,
    Window,
    build_figure,
    drawn_series,
    panels_of,
    preview,
)
from nvwatch.dashboards.preview_maxima import Fleet as HardwareFleet
from nvwatch.dashboards.preview_maxima import beyond_maxima
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.fabric.fabric import XMIT_WAIT_TICKS_PER_SECOND
from nvwatch.sim.fleet.fleet import Fleet
from nvwatch.sim.fleet.jobs import FleetJob
from nvwatch.sim.fleet.queue import QueueSpec
from nvwatch.sim.ports import free_port
from tests.conftest import require_tool
from tests.e2e.conftest import TIME_SCALE, mixin_config
from tests.e2e.stack import HOST, Receiver, Stack, wait_for
from tests.preview.text_layout import text_problems

# the fleet's faults take a minute and more to show; six dashboards take a while to draw
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]
# the e2e suite's 2 s leaves an NVML poll of an H100 with MIG 1.6 s, which a loaded
# machine overruns: the source goes down and the instant tables lose their series. It is
# also the interval the preview's $__rate_interval must know: values change once a poll.
POLL_INTERVAL = 5.0
DOCS = Path(__file__).parents[2] / "docs" / "dashboards"
UPDATE = os.environ.get("NVWATCH_UPDATE_PREVIEWS") == "1"
# the range drawn at real time: the README's pictures show 5 minutes; the suite checks 30 s
REAL_TIME_RANGE_S = 300.0 if UPDATE else 60.0  # energy panels integrate whole minutes
FAULTY = 0
SCENARIOS = [
    ScenarioSpec("thermal-runaway", "2"),
    ScenarioSpec("power-capped", "1"),
    ScenarioSpec("nvlink-degraded", "3"),
    ScenarioSpec("ecc-dbe", "4"),
    ScenarioSpec("xid-storm", "5"),
    ScenarioSpec("ib-congestion", "mlx5_1"),
    ScenarioSpec("ib-symbol-errors", "mlx5_2"),
]
PROFILES = ["dgx-h100", "dgx1-v100", "dgx-a100", "dgx-a100"]
# MIG on two of the first node's GPUs (Hopper: per-instance GPM too), for the MIG row
MIG = [(range(FAULTY, FAULTY + 1), "6-7:3g.40gb,3g.40gb")]
# Slurm jobs for the jobs dashboard: one on the faulty node's throttled GPUs, one on a
# healthy node, and a synchronous one over every GPU of STRAGGLING's node. A queue pins a
# job to GPUs of one node (sim/fleet/queue.py), so the synchronous job holds one node's
# eight GPUs (sync=yes) rather than spanning two: eight ranks still have a median and a
# spread, and the node and its IB ports are ranks too (the only ones of their level).
STRAGGLING = 2
JOBS = [
    FleetJob(FAULTY, (0, 1, 2, 3), "1001", "alice", "physics"),
    FleetJob(1, None, "1002", "bob", "ml"),
    FleetJob(STRAGGLING, None, "1003", "carol", "ml", sync=True),
]
# its GPU 3 at 70 % of its speed, with no clock event reason: cause clock-other
STRAGGLER = ScenarioSpec("gpu-slow", "3", slowdown=0.3)
# the queue: GPU work offered at 1.2 times the fleet's GPUs, so some jobs always wait
QUEUE = QueueSpec(1.2)


def preview_config() -> MixinConfig:
    """The e2e suite's rules, with the straggler rules' warm-up and `for:` (15m and 10m)
    short enough for the few minutes the fleet runs: its job is compared 30 s after it
    starts, as a rate window of samples has passed, and its straggler named 10 s later."""
    return mixin_config().with_overrides(straggler_warmup="30s", straggler_for="10s")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus = require_tool("prometheus")
    workdir = tmp_path_factory.mktemp("preview")
    rules = workdir / "rules"
    alerts_build.write(rules, preview_config())
    fleet = Fleet(
        PROFILES,
        base_port=0,
        interval=POLL_INTERVAL,
        scenarios=[*((FAULTY, s) for s in SCENARIOS), (STRAGGLING, STRAGGLER)],
        seed=11,
        time_scale=TIME_SCALE,
        hold_time=True,
        mig=MIG,
        jobs=JOBS,
        queue=QUEUE,
    )
    result = Stack(workdir, fleet, Receiver())
    # no Alertmanager: the dashboards read ALERTS, which Prometheus keeps by itself
    result.alertmanager_url = f"http://{HOST}:{free_port(HOST)}"
    try:
        fleet.start()
        rule_files = [
            rules / alerts_build.PROMETHEUS_ALERTS,
            rules / alerts_build.PROMETHEUS_RECORDING,
        ]
        # scraped once a poll: a scrape between two polls reads nothing new, and rates
        # over scrapes faster than the counters move read a poll too many at times (a
        # GPU throttled 105 % of the time)
        result.start_prometheus(prometheus, rule_files, f"{POLL_INTERVAL:g}s", bmc=True)
        wait_for(
            "every agent scraped",
            # the nodes' agents and the Slurm controller's
            lambda: result.query(f'count(up{{job="nvwatch"}} == 1) == {len(PROFILES) + 1}'),
            60,
        )
        fleet.run_time()
        # the slowest signals: a thermal runaway past slowdown for its `for:`, and the
        # congested port's 32-bit transmit-wait counter saturated
        wait_for(
            "the thermal alert firing",
            lambda: result.query(
                'ALERTS{alertname="NvwatchGpuThermalSlowdown",alertstate="firing"}'
            ),
            150,
        )
        wait_for(
            "a saturated counter",
            lambda: result.query("nvwatch_ib_port_reading_saturated == 1"),
            120,
        )
        wait_for(
            "the straggler alert firing",
            lambda: result.query(
                'ALERTS{alertname="NvwatchJobStraggler",alertstate="firing",job_id="1003"}'
            ),
            120,
        )
        time.sleep(3 * POLL_INTERVAL)  # rates over a few polls of every series
        yield result
    finally:
        result.close()


def _decoded_size(path: Path) -> tuple[int, int]:
    from matplotlib.image import imread

    pixels = imread(str(path))
    return pixels.shape[1], pixels.shape[0]


def test_every_panel_of_every_dashboard_has_data(stack: Stack, tmp_path: Path) -> None:
    dashboards = build_all(preview_config())
    drawn = preview(
        dashboards, Prometheus(stack.prometheus_url), tmp_path, range_s=300, scrape_s=POLL_INTERVAL
    )
    assert set(drawn) == set(dashboards)
    empty = [f"{name}: {p.title}" for name, panels in drawn.items() for p in panels if p.empty]
    assert empty == [], "panels with no data"
    for name, panels in drawn.items():
        assert len(panels) == sum(1 for p in dashboards[name]["panels"] if p["type"] != "row")
        png = tmp_path / (Path(name).stem + ".png")
        width, height = _decoded_size(png)
        assert width >= 1600 and height >= 400
    for name, panels in drawn.items():
        results = list(zip(panels_of(dashboards[name]), panels, strict=True))
        assert text_problems(build_figure(dashboards[name], results), results) == [], name
    node = {p.title: p for p in drawn["nvwatch-node.json"]}
    _faulty_node_is_drawn(node["NVLink errors and links down"])
    # at 10x the counters' rates are ten times the hardware's: the check sees it
    beyond = beyond_maxima(
        drawn_series(drawn), HardwareFleet.read(Prometheus(stack.prometheus_url), time.time()), 300
    )
    assert {b.quantity for b in beyond} >= {"NVLink bytes/s"}, [b.line() for b in beyond]


def _faulty_node_is_drawn(panel: PanelResult) -> None:
    """The node dashboard shows the first node, which carries every fault."""
    assert {s.labels["instance"] for s in panel.series} == {"dgx-000"}


def test_preview_command(stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nvwatch.agent.cli import main

    # at 10x the figures are beyond the hardware: --check-maxima draws, then exits 1
    with pytest.raises(SystemExit) as exit_info:
        main(["dashboards", "preview", "--prometheus", stack.prometheus_url,
              "--out", str(tmp_path), "--range", "5m", "--scrape-interval", "5s",
              "--var", "instance=dgx-000", "--strict", "--check-maxima"])  # fmt: skip
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    assert sorted(Path(p).name for p in captured.out.split()) == sorted(
        Path(n).stem + ".png" for n in build_all(preview_config())
    )
    findings = captured.err.splitlines()
    assert any("NVLink bytes/s" in line and "above the hardware's maximum" in line
               for line in findings), findings  # fmt: skip
    assert not any("no data" in line for line in findings)


def test_unreachable_prometheus_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nvwatch.agent.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["dashboards", "preview", "--prometheus", f"http://{HOST}:{free_port(HOST)}",
              "--out", str(tmp_path)])  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nvwatch: error: cannot reach Prometheus") and "\n" not in err


def real_time_config() -> MixinConfig:
    """The module's rules with their rate thresholds at real time again (the `for:` and
    windows stay short: the alerts already firing keep firing over the reload)."""
    base = MixinConfig()
    return preview_config().with_overrides(
        temp_rise_celsius_per_minute=base.temp_rise_celsius_per_minute,
        nvlink_error_rate_per_second=base.nvlink_error_rate_per_second,
        ib_error_rate_per_second=base.ib_error_rate_per_second,
        pcie_replay_rate_per_second=base.pcie_replay_rate_per_second,
        ib_transmit_wait_tick_seconds=1.0 / XMIT_WAIT_TICKS_PER_SECOND,
    )


@pytest.mark.timeout(300 + REAL_TIME_RANGE_S)
def test_at_real_time_no_figure_exceeds_the_hardware(stack: Stack, tmp_path: Path) -> None:
    """Last of the module: it turns the fleet's simulated time to real time."""
    config = real_time_config()
    alerts_build.write(stack.workdir / "rules", config)
    stack.reload_prometheus()
    stack.fleet.set_time_scale(1.0)
    # every point drawn is a rate over real-time samples only: the range, the longest
    # rate window before its first point (the panel's or the recording rules'), and a
    # poll for the first real-time sample
    rate_s = max(
        Window(0.0, REAL_TIME_RANGE_S, POLL_INTERVAL).rate_interval_s,
        parse_duration(config.rate_window, "rate window", DurationBounds(1.0, 3600.0)),
    )
    real_from = time.time() + POLL_INTERVAL
    time.sleep(max(0.0, real_from + rate_s + REAL_TIME_RANGE_S - time.time()))
    prometheus = Prometheus(stack.prometheus_url)
    end = time.time()
    drawn = preview(build_all(config), prometheus, tmp_path, range_s=REAL_TIME_RANGE_S,
                    scrape_s=POLL_INTERVAL, end=end)  # fmt: skip
    empty = [f"{name}: {p.title}" for name, panels in drawn.items() for p in panels if p.empty]
    assert empty == [], "panels with no data"
    beyond = beyond_maxima(drawn_series(drawn), HardwareFleet.read(prometheus, end),
                           REAL_TIME_RANGE_S, scrape_s=POLL_INTERVAL)  # fmt: skip
    assert not beyond, "\n".join(b.line() for b in beyond)
    energy = {p.title: p for p in drawn["nvwatch-power-cooling.json"]}[
        "Energy in the time range: nodes vs GPUs"
    ]
    kwh = {s.legend: s.last for s in energy.series}
    assert 0 < kwh["GPUs"] < kwh["nodes"], kwh
    if UPDATE:
        DOCS.mkdir(parents=True, exist_ok=True)
        for png in sorted(tmp_path.glob("*.png")):
            shutil.copyfile(png, DOCS / png.name)
