"""The report's numbers against the synthetic history they were made from.

Expectations come from the generated samples (tests/report/synthetic.py), computed here
with numpy: integrals, sums and the known episode windows. A step is one hour, so an
episode's length may differ by up to one step where it starts or ends inside an hour.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.report import synthetic
from tests.report.conftest import Backfill, SyntheticReport

# the first test also waits for the session backfill and report
pytestmark = pytest.mark.timeout(600)

STEP_HOURS = 1.0
IN_RANGE = slice(1, None)  # the window is (START, END]: the sample at START is outside


def _instance(node: str) -> str:
    return f"{node}:9477"


def _trapezoid(values: np.ndarray, times: np.ndarray) -> float:
    """Integral of the samples, leaving out every interval that touches a gap."""
    keep = ~np.isnan(values[:-1]) & ~np.isnan(values[1:])
    areas = (values[:-1] + values[1:]) / 2 * np.diff(times)
    return float(np.sum(areas[keep]))


def test_energy_is_the_integral_of_the_generated_power(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    times = synthetic.TIMES[IN_RANGE]
    joules = sum(_trapezoid(p[IN_RANGE], times) for p in backfill.history.power.values())
    kwh = joules / 3.6e6
    assert synthetic_report.number("power", "energy_kwh") == pytest.approx(kwh, rel=0.01)
    per_class = {
        r["node_class"]: r["energy_kwh"] for r in synthetic_report.table("power", "energy_by_class")
    }
    assert sum(per_class.values()) == pytest.approx(synthetic_report.number("power", "energy_kwh"))


def test_gpu_hours_match_the_samples_and_add_up(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    hours_per_sample = synthetic.INTERVAL / 3600
    up = sum(np.nansum(v[IN_RANGE]) for v in backfill.history.up.values()) * hours_per_sample
    busy = sum(np.nansum(v[IN_RANGE]) for v in backfill.history.util.values()) * hours_per_sample
    n = synthetic_report.section("utilization")["numbers"]
    assert n["available_gpu_hours"]["value"] == pytest.approx(up, rel=0.01)
    assert n["busy_gpu_hours"]["value"] == pytest.approx(busy, rel=0.01)
    gpus = len(synthetic.NODES) * synthetic.GPUS
    assert n["installed_gpu_hours"]["value"] == pytest.approx(gpus * synthetic.DAYS * 24)
    for level in ("by_class", "by_rack", "by_cluster"):
        rows = synthetic_report.table("utilization", level)
        assert sum(r["gpus"] for r in rows) == gpus
        assert sum(r["available_gpu_hours"] for r in rows) == pytest.approx(
            n["available_gpu_hours"]["value"]
        )
        assert sum(r["busy_gpu_hours"] for r in rows) == pytest.approx(n["busy_gpu_hours"]["value"])
        assert sum(r["allocated_gpu_hours"] for r in rows) == pytest.approx(
            n["allocated_gpu_hours"]["value"]
        )


def test_the_thermal_runaway_is_on_its_gpu_in_week_one(synthetic_report: SyntheticReport) -> None:
    node, gpu, window = synthetic.THERMAL
    rows = synthetic_report.table("thermal", "slowdown")
    # the runaway first (the longest), then the two the BMC episodes' heat slowed down
    episodes = (synthetic.ROOM_SLOWDOWN, synthetic.NODE_SLOWDOWN)
    assert {(r["node"], r["gpu"]) for r in rows[1:]} == {
        (_instance(n), str(g)) for n, g, _, _ in episodes
    }
    assert (rows[0]["node"], rows[0]["gpu"]) == (_instance(node), str(gpu))
    expected = window.sum() * synthetic.INTERVAL / 3600
    assert rows[0]["hours"] == pytest.approx(expected, abs=STEP_HOURS)
    assert rows[0]["week_1"] == pytest.approx(rows[0]["hours"])
    assert rows[0]["week_2"] == rows[0]["week_3"] == 0
    assert rows[0]["max_celsius"] == 91.0
    hottest = synthetic_report.table("thermal", "hottest")[0]
    assert hottest["gpu_name"] == f"{_instance(node)} GPU {gpu}"
    assert hottest["margin_celsius"] == pytest.approx(89.0 - 91.0)  # A100 slows at 89 °C
    # its HBM ran 2 °C above the die: 93 °C against a 95 °C limit
    hbm = synthetic_report.table("thermal", "hbm")[0]
    assert (hbm["gpu_name"], hbm["margin_celsius"]) == (f"{_instance(node)} GPU {gpu}", 2.0)


def test_the_power_capped_week_is_on_its_node(synthetic_report: SyntheticReport) -> None:
    node, window = synthetic.POWER_CAP
    rows = synthetic_report.table("power", "power_cap_weeks")
    assert [r["node"] for r in rows] == [_instance(node)]
    expected = synthetic.GPUS * window.sum() * synthetic.INTERVAL / 3600  # GPU-hours
    assert rows[0]["week_2"] == pytest.approx(expected, abs=synthetic.GPUS * STEP_HOURS)
    assert rows[0]["week_1"] == rows[0]["week_3"] == 0
    by_node = {r["node"]: r for r in synthetic_report.table("power", "by_node")}
    # at the cap every GPU drew its TDP: the node's step maximum is its summed TDP
    assert by_node[_instance(node)]["max_watts"] == pytest.approx(synthetic.GPUS * 300.0)
    assert by_node[_instance(node)]["tdp_watts"] == pytest.approx(synthetic.GPUS * 300.0)


def test_rack_power_against_the_example_rack_plan(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    racks = {r["rack"]: r for r in synthetic_report.table("power", "by_rack")}
    for rack in {n.rack for n in synthetic.NODES}:
        members = [n.name for n in synthetic.NODES if n.rack == rack]
        power = sum(
            backfill.history.power[(name, g)][IN_RANGE]
            for name in members
            for g in range(synthetic.GPUS)
        )
        # hourly means of the rack's summed power (hours with a gap left out)
        hourly = np.asarray(power).reshape(-1, 4).mean(axis=1)
        expected_max = float(np.nanmax(hourly))
        assert racks[rack]["max_watts"] == pytest.approx(expected_max, rel=0.01)
        assert racks[rack]["budget_watts"] == pytest.approx(9600.0)
        assert racks[rack]["max_of_budget"] == pytest.approx(expected_max / 9600.0, rel=0.01)


def test_the_congestion_episode_is_on_its_port_in_week_three(
    synthetic_report: SyntheticReport,
) -> None:
    node, device, window, share = synthetic.CONGESTION
    rows = synthetic_report.table("fabric", "congestion")
    assert [(r["node"], r["port"]) for r in rows] == [(_instance(node), f"{device}/1")]
    assert rows[0]["hours"] == pytest.approx(
        window.sum() * synthetic.INTERVAL / 3600, abs=STEP_HOURS
    )
    assert rows[0]["week_3"] == rows[0]["hours"]
    assert rows[0]["max_wait_share"] == pytest.approx(share, rel=0.01)
    fabric = synthetic_report.section("fabric")
    assert "congestion" in fabric["findings"][0]
    # IB load: the busier direction (transmit, 30 % of the node's mean utilization)
    assert synthetic_report.number("fabric", "ib_load_max") < 0.31


def test_the_idle_node_is_idle_in_week_two_only(synthetic_report: SyntheticReport) -> None:
    node, _ = synthetic.IDLE
    weeks = {r["node"]: r for r in synthetic_report.table("utilization", "node_weeks")}
    assert weeks[_instance(node)]["week_2"] < 0.01
    assert weeks[_instance(node)]["week_1"] > 0.3
    assert weeks[_instance(node)]["week_3"] > 0.3
    assert synthetic_report.number("utilization", "idle_node_weeks") == 1
    assert _instance(node) in synthetic_report.section("utilization")["findings"][1]


def test_who_used_it(synthetic_report: SyntheticReport) -> None:
    users = {r["user"]: r for r in synthetic_report.table("usage", "by_user")}
    _, bob_window, bob_util = synthetic.BOB
    bob_hours = synthetic.GPUS * bob_window.sum() * synthetic.INTERVAL / 3600
    assert users["bob"]["allocated_gpu_hours"] == pytest.approx(bob_hours, rel=0.01)
    assert users["bob"]["efficiency"] == pytest.approx(bob_util, abs=0.005)
    _, alice_window = synthetic.ALICE
    lost = synthetic.LOST[2] & alice_window  # node-a GPU 3 was lost during alice's job
    alice_hours = (synthetic.GPUS * alice_window.sum() - lost.sum()) * synthetic.INTERVAL / 3600
    assert users["alice"]["allocated_gpu_hours"] == pytest.approx(alice_hours, rel=0.01)
    idle = synthetic_report.table("usage", "idle_jobs")[0]
    assert (idle["job"], idle["gpus"]) == ("slurm/202/bob", synthetic.GPUS)
    assert synthetic_report.number("usage", "idle_jobs") == 1


def test_health_events_are_on_their_node_and_week(synthetic_report: SyntheticReport) -> None:
    node, gpu, _, code = synthetic.XID
    xids = synthetic_report.table("health", "xids")
    assert [(r["node"], r["gpu"], r["xid"], r["critical"], r["events"]) for r in xids] == [
        (_instance(node), str(gpu), code, "yes", 1.0)
    ]
    assert xids[0]["worst_week"] == "week of 2026-10-19"
    errors = synthetic_report.table("fabric", "errors")
    link_node, _, _, downs = synthetic.LINK_DOWN
    assert [(r["node"], r["type"], r["events"]) for r in errors] == [
        (_instance(link_node), "link_downed", downs)
    ]
    assert errors[0]["worst_week"] == "week of 2026-10-12"
    memory = synthetic_report.table("health", "memory_errors")
    ecc_node, _, _, ecc_count = synthetic.ECC
    assert [(r["node"], r["type"], r["events"]) for r in memory] == [
        (_instance(ecc_node), "corrected", ecc_count)
    ]
    lost = synthetic_report.table("health", "gpus_lost")
    lost_node, lost_gpu, lost_window = synthetic.LOST
    assert [(r["node"], r["gpu"]) for r in lost] == [(_instance(lost_node), str(lost_gpu))]
    assert lost[0]["hours_down"] == pytest.approx(lost_window.sum() * synthetic.INTERVAL / 3600)
    down = synthetic_report.table("health", "agent_downtime")
    down_node, down_window = synthetic.AGENT_DOWN
    assert [r["node"] for r in down] == [_instance(down_node)]
    assert down[0]["hours_without_data"] == pytest.approx(
        down_window.sum() * synthetic.INTERVAL / 3600, abs=STEP_HOURS
    )


def test_coverage_counts_the_gaps(synthetic_report: SyntheticReport, backfill: Backfill) -> None:
    cells = present = 0
    for values in backfill.history.util.values():
        hourly = values[IN_RANGE].reshape(-1, 4)
        cells += hourly.shape[0]
        present += int(np.sum(~np.all(np.isnan(hourly), axis=1)))
    assert synthetic_report.section("utilization")["coverage"] == pytest.approx(present / cells)


def test_the_summary_names_the_numbers_and_what_to_do(synthetic_report: SyntheticReport) -> None:
    summary = synthetic_report.data["summary"]
    assert 3 <= len(summary) <= 6
    text = " ".join(summary)
    assert text.startswith(f"Over the last {synthetic.DAYS} days")
    # the rack plan on the node power the BMCs measured, against the 12.8 kW circuit
    assert "kWh as their BMCs measured it" in text and "12.8 kW circuit budget" in text
    assert "node-c:9477 GPU 2" in text  # the thermal runaway
    assert "critical XID" in text
