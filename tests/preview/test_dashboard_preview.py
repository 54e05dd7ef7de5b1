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
dashboard's series. Every panel of every dashboard must come back with data, every
PNG must decode to a picture of the dashboard's size, and no text of a panel may run
into another or out of the panel (tests/preview/text_layout.py) with the fleet's own
series.

NVWATCH_UPDATE_PREVIEWS=1 also writes the PNGs to docs/dashboards/ (the README shows
them).
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
from nvwatch.dashboards.build import build_all
from nvwatch.dashboards.preview import PanelResult, Prometheus, build_figure, panels_of, preview
from nvwatch.sim.fleet import Fleet
from nvwatch.sim.fleet_jobs import FleetJob
from nvwatch.sim.fleet_queue import QueueSpec
from nvwatch.sim.ports import free_port
from tests.conftest import require_tool
from tests.e2e.conftest import SCRAPE_INTERVAL, TIME_SCALE, mixin_config
from tests.e2e.stack import HOST, Receiver, Stack, wait_for
from tests.preview.text_layout import text_problems

# the fleet's faults take a minute and more to show; six dashboards take a while to draw
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]
# the e2e suite's 2 s leaves an NVML poll of an H100 with MIG 1.6 s, which a loaded
# machine overruns: the source goes down and the instant tables lose their series. It is
# also the interval the preview's $__rate_interval must know: values change once a poll.
POLL_INTERVAL = 5.0
DOCS = Path(__file__).parents[2] / "docs" / "dashboards"
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
# healthy node
JOBS = [
    FleetJob(FAULTY, (0, 1, 2, 3), "1001", "alice", "physics"),
    FleetJob(1, None, "1002", "bob", "ml"),
]
# the queue: GPU work offered at 1.2 times the fleet's GPUs, so some jobs always wait
QUEUE = QueueSpec(1.2)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus = require_tool("prometheus")
    workdir = tmp_path_factory.mktemp("preview")
    rules = workdir / "rules"
    alerts_build.write(rules, mixin_config())
    fleet = Fleet(
        PROFILES,
        base_port=0,
        interval=POLL_INTERVAL,
        scenarios=[(FAULTY, s) for s in SCENARIOS],
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
        result.start_prometheus(prometheus, rule_files, SCRAPE_INTERVAL, bmc=True)
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
        time.sleep(3 * POLL_INTERVAL)  # rates over a few polls of every series
        yield result
    finally:
        result.close()


def _decoded_size(path: Path) -> tuple[int, int]:
    from matplotlib.image import imread

    pixels = imread(str(path))
    return pixels.shape[1], pixels.shape[0]


def test_every_panel_of_every_dashboard_has_data(stack: Stack, tmp_path: Path) -> None:
    dashboards = build_all(mixin_config())
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
    if os.environ.get("NVWATCH_UPDATE_PREVIEWS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        for png in sorted(tmp_path.glob("*.png")):
            shutil.copyfile(png, DOCS / png.name)


def _faulty_node_is_drawn(panel: PanelResult) -> None:
    """The node dashboard shows the first node, which carries every fault."""
    assert {s.labels["instance"] for s in panel.series} == {"dgx-000"}


def test_preview_command(stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nvwatch.agent.cli import main

    main(["dashboards", "preview", "--prometheus", stack.prometheus_url, "--out", str(tmp_path),
          "--range", "5m", "--scrape-interval", "5s", "--var", "instance=dgx-000",
          "--strict"])  # fmt: skip
    out = capsys.readouterr().out.split()
    assert sorted(Path(p).name for p in out) == sorted(
        Path(n).stem + ".png" for n in build_all(mixin_config())
    )


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
