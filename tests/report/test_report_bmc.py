"""The report's BMC parts against the synthetic history's BMCs (tests/report/synthetic.py).

Expectations come from the generated arrays, computed here with numpy: the step means of
the samples (a step is an hour of four 15-minute samples, the window (START, END]),
their integrals and maxima, and the known episode windows. BMC samples sit between the
step edges, so a BMC number is exact; GPU samples sit on them, where Prometheus 2 counts
a sample in both steps it ends and begins, so one mixing GPU power in agrees within 1 %.
Two more reports of the same Prometheus: one with a rack plan that one rack's measured
draw breaks while its GPUs keep to their share, and one whose BMC job selector matches
nothing, as on a site that does not probe its BMCs.
"""

from __future__ import annotations

import datetime as dt
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import yaml
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from nvwatch.report import units
from nvwatch.report.air import GPU, NODE, ROOM
from tests.report import synthetic
from tests.report.conftest import EXAMPLE_CONFIG, Backfill, SyntheticReport, report_args

# the first test also waits for the session backfill and report
pytestmark = pytest.mark.timeout(600)

Array = npt.NDArray[np.float64]
PER_STEP = round(3600 / synthetic.INTERVAL)  # samples in a report step of one hour
# The window is (START, END]: an agent's sample at START is outside it, and a BMC's last
# one (BMC_OFFSET after END) too.
GPU_SAMPLES = slice(1, None)
BMC_SAMPLES = slice(0, -1)
GPU_REL = 0.01  # GPU samples on the step edges (module docstring)
CIRCUIT_WATTS = 12800.0  # deploy/mixin.example.yaml's rack_power_budget_kw


def _instance(node: str) -> str:
    return f"{node}:9477"


def _hourly(values: Array, samples: slice = BMC_SAMPLES) -> Array:
    """Each hour's mean of its samples, NaN for an hour without one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        means: Array = np.nanmean(values[samples].reshape(-1, PER_STEP), axis=1)
    return means


def _sum_present(rows: list[Array]) -> Array:
    """Sum per hour, NaN only where every row is NaN."""
    stacked = np.stack(rows)
    total: Array = np.nansum(stacked, axis=0)
    total[np.all(np.isnan(stacked), axis=0)] = np.nan
    return total


def _node_power(backfill: Backfill, node: str) -> Array:
    return _hourly(backfill.history.node_power[node])


def _gpu_power(backfill: Backfill, node: str) -> Array:
    power = backfill.history.power
    return _sum_present([_hourly(power[(node, g)], GPU_SAMPLES) for g in range(synthetic.GPUS)])


def _nodes_of(attribute: str, value: str) -> list[synthetic.Node]:
    return [n for n in synthetic.NODES if getattr(n, attribute) == value]


def _step_start(text: str) -> float:
    return (
        dt.datetime.strptime(text, "%Y-%m-%d %H:%M UTC").replace(tzinfo=dt.timezone.utc).timestamp()
    )


def _window_edges(window: npt.NDArray[np.bool_]) -> tuple[float, float]:
    """The first sample in the window and the first one after it."""
    inside = np.flatnonzero(window)
    return float(synthetic.TIMES[inside[0]]), float(synthetic.TIMES[inside[-1] + 1])


def _report(url: str, out: Path, config: dict[str, Any]) -> dict[str, Any]:
    path = out / "mixin.yaml"
    path.write_text(yaml.safe_dump(config))
    args = report_args(url, out / "report", "--config", str(path))
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads((out / "report" / "report.json").read_text())
    return data


def _example_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    return config


def _rows(data: dict[str, Any], section: str, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = data["sections"][section]["tables"][table]["rows"]
    return rows


# --- power ---------------------------------------------------------------------------


def test_node_energy_and_the_non_gpu_share_per_node_and_class(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    by_node = {r["node"]: r for r in synthetic_report.table("power", "measured_by_node")}
    by_class = {r["node_class"]: r for r in synthetic_report.table("power", "non_gpu_by_class")}
    total = 0.0
    for node_class in {n.node_class for n in synthetic.NODES}:
        node_kwh = gpu_kwh = rest_kwh = 0.0
        base, busy = synthetic.REST[node_class]
        for node in _nodes_of("node_class", node_class):
            watts = _node_power(backfill, node.name)
            energy = float(np.nansum(watts)) / 1000  # an hour per step: W x h -> kWh
            assert by_node[_instance(node.name)]["energy_kwh"] == pytest.approx(energy, rel=1e-6)
            total += energy
            # the share counts the hours both the BMC and the GPUs were read
            gpus = _gpu_power(backfill, node.name)
            both = ~np.isnan(watts) & ~np.isnan(gpus)
            # what the node draws beyond its GPUs, in the BMC's steps
            rest = _hourly(base + busy * synthetic.node_utilization(node))
            node_kwh += float(np.sum(watts[both])) / 1000
            gpu_kwh += float(np.sum(gpus[both])) / 1000
            rest_kwh += float(np.sum(rest[both])) / 1000
        row = by_class[node_class]
        assert row["node_energy_kwh"] == pytest.approx(node_kwh, rel=1e-6)
        assert row["gpu_energy_kwh"] == pytest.approx(gpu_kwh, rel=GPU_REL)
        # node power is the GPUs' plus the known rest
        assert row["non_gpu_energy_kwh"] == pytest.approx(rest_kwh, rel=GPU_REL)
        assert row["non_gpu_share"] == pytest.approx(rest_kwh / node_kwh, rel=GPU_REL)
    assert synthetic_report.number("power", "node_energy_kwh") == pytest.approx(total, rel=1e-6)


def test_node_power_is_dcmi_where_read_else_the_largest_sensor(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    """node-a reports DCMI and each supply's input; node-b a total and each supply's
    input; node-c DCMI only; node-d a total only. A supply's input is about half."""
    rows = {r["node"]: r for r in synthetic_report.table("power", "measured_by_node")}
    for node in synthetic.NODES:
        row = rows[_instance(node.name)]
        assert row["method"] == ("dcmi" if node.name in synthetic.DCMI_NODES else "sensor")
        watts = _node_power(backfill, node.name)
        assert row["max_watts"] == pytest.approx(float(np.nanmax(watts)), rel=1e-6)
        assert row["p50_watts"] == pytest.approx(float(np.nanpercentile(watts, 50)), rel=1e-6)
        raw = backfill.history.node_power[node.name][BMC_SAMPLES]
        assert row["peak_watts"] == pytest.approx(float(np.nanmax(raw)), rel=1e-6)


def test_racks_against_their_circuit_on_measured_node_power(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    racks = {r["rack"]: r for r in synthetic_report.table("power", "measured_by_rack")}
    assert set(racks) == {n.rack for n in synthetic.NODES}
    for rack, row in racks.items():
        members = [n.name for n in _nodes_of("rack", rack)]
        power = _sum_present([_node_power(backfill, n) for n in members])
        gpus = _sum_present([_gpu_power(backfill, n) for n in members])
        assert (row["nodes_measured"], row["nodes"]) == (len(members), len(members))
        assert row["max_watts"] == pytest.approx(float(np.nanmax(power)), rel=1e-6)
        assert row["gpu_max_watts"] == pytest.approx(float(np.nanmax(gpus)), rel=GPU_REL)
        assert row["budget_watts"] == CIRCUIT_WATTS
        assert row["max_of_budget"] == pytest.approx(float(np.nanmax(power)) / CIRCUIT_WATTS)
        assert row["hours_over_budget"] == 0
        assert row["energy_kwh"] == pytest.approx(float(np.nansum(power)) / 1000, rel=1e-6)


@pytest.fixture(scope="module")
def over_circuit(
    synthetic_report: SyntheticReport, backfill: Backfill, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], dict[str, float]]:
    """A report whose plan rack-00's measured draw breaks while its GPUs keep to their
    share, and rack-01's GPUs break their share while its measured draw keeps to its
    circuit. Budgets in kW; the plan's figures come from the generated arrays."""
    peaks = {}
    for rack in ("rack-00", "rack-01"):
        members = [n.name for n in _nodes_of("rack", rack)]
        peaks[rack] = float(np.nanmax(_sum_present([_node_power(backfill, n) for n in members])))
        gpus = _sum_present([_gpu_power(backfill, n) for n in members])
        peaks[f"{rack} GPUs"] = float(np.nanmax(gpus))
    budgets = {
        "rack-00": round(0.9 * peaks["rack-00"] / 1000, 2),
        "rack-00 GPUs": round(1.1 * peaks["rack-00 GPUs"] / 1000, 2),
        "rack-01": round(1.1 * peaks["rack-01"] / 1000, 2),
        "rack-01 GPUs": round(0.9 * peaks["rack-01 GPUs"] / 1000, 2),
    }
    config = _example_config()
    config["rack_power_budgets_kw"] = {r: budgets[r] for r in ("rack-00", "rack-01")}
    config["rack_gpu_power_budgets_kw"] = {r: budgets[f"{r} GPUs"] for r in ("rack-00", "rack-01")}
    data = _report(synthetic_report.url, tmp_path_factory.mktemp("over-circuit"), config)
    return data, budgets


def test_the_summary_says_when_a_racks_measured_draw_breaks_its_circuit(
    over_circuit: tuple[dict[str, Any], dict[str, float]], backfill: Backfill
) -> None:
    data, budgets = over_circuit
    over = [s for s in data["summary"] if "circuit budget" in s]
    assert len(over) == 1, data["summary"]
    sentence = over[0]
    assert sentence.startswith("Measured at its BMCs, rack rack-00 drew up to")
    assert f"{units.watts(budgets['rack-00'] * 1000)} circuit budget" in sentence
    assert f"within their {units.watts(budgets['rack-00 GPUs'] * 1000)} share" in sentence
    # rack-01's GPUs broke their share, its measured draw did not break its circuit
    assert "rack-01" not in " ".join(data["summary"])
    members = [n.name for n in _nodes_of("rack", "rack-00")]
    power = _sum_present([_node_power(backfill, n) for n in members])
    racks = {r["rack"]: r for r in _rows(data, "power", "measured_by_rack")}
    over_hours = float(np.sum(power > budgets["rack-00"] * 1000))
    assert over_hours > 0
    assert racks["rack-00"]["hours_over_budget"] == pytest.approx(over_hours)
    assert racks["rack-01"]["hours_over_budget"] == 0
    gpu_racks = {r["rack"]: r for r in _rows(data, "power", "by_rack")}
    assert gpu_racks["rack-01"]["max_of_budget"] > 1 > gpu_racks["rack-00"]["max_of_budget"]


# --- cooling -------------------------------------------------------------------------


def test_inlet_percentiles_and_hours_above_the_envelope_per_rack(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    rows = {r["rack"]: r for r in synthetic_report.table("cooling", "inlet_by_rack")}
    episodes = {
        synthetic.HOT_AISLE[0]: synthetic.HOT_AISLE[1],
        synthetic.WARM[0]: synthetic.WARM[1],
    }
    for rack, row in rows.items():
        nodes = _nodes_of("rack", rack)
        inlet = [_hourly(backfill.history.inlet[n.name]) for n in nodes]
        pooled = np.concatenate(inlet)
        pooled = pooled[~np.isnan(pooled)]
        assert row["p50_celsius"] == pytest.approx(float(np.percentile(pooled, 50)), abs=1e-6)
        assert row["p95_celsius"] == pytest.approx(float(np.percentile(pooled, 95)), abs=1e-6)
        raw = np.concatenate([backfill.history.inlet[n.name][BMC_SAMPLES] for n in nodes])
        assert row["max_celsius"] == pytest.approx(float(np.nanmax(raw)))
        envelopes = [synthetic.ENVELOPE[n.node_class] for n in nodes]
        assert row["envelope_celsius"] == min(envelopes)
        above = np.stack([v > e for v, e in zip(inlet, envelopes, strict=True)])
        assert row["hours_above"] == float(np.sum(np.any(above, axis=0)))
        assert row["node_hours_above"] == float(np.sum(above))
        # the episode's own length: it starts and ends on the hour
        assert row["hours_above"] == episodes[rack].sum() / PER_STEP
    for node in synthetic_report.table("cooling", "inlet_by_node"):
        raw = backfill.history.inlet[node["node"].split(":")[0]][BMC_SAMPLES]
        assert node["max_celsius"] == pytest.approx(float(np.nanmax(raw)))
    # 32 °C on rack-01 is above the DGX A100's 30 °C; rack-00 at 24 °C there is not
    # above the DGX-1's 35 °C, whose inlet only the hot aisle broke
    assert rows["rack-01"]["hours_above"] > 0
    assert rows["rack-00"]["worst_week"] == "week of 2026-10-19"
    hot = synthetic_report.section("cooling")["findings"][0]
    assert hot.startswith("Inlet air ran above its envelope on 2 rack(s)")
    assert "the worst, rack-00" in hot and "is the room" in hot


def _event(rows: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (row,) = [r for r in rows if r["kind"] == kind]
    return row


def test_fan_and_supply_events_with_their_node_and_window(
    synthetic_report: SyntheticReport,
) -> None:
    rows = synthetic_report.table("cooling", "events")
    assert len(rows) == 3, rows
    expected = [
        ("power supply failed", synthetic.PSU_FAILURE, f"{synthetic.PSU_FAILURE[1]} Status", None),
        ("fan stopped", synthetic.FAN_FAILURE, synthetic.FAN_FAILURE[1], 0.0),
        ("fan critical", synthetic.FAN_SLOW, synthetic.FAN_SLOW[1], synthetic.FAN_SLOW[3]),
    ]
    for kind, episode, sensor, lowest in expected:
        row = _event(rows, kind)
        assert (row["node"], row["sensor"]) == (_instance(episode[0]), sensor)
        # each episode starts and ends on the hour, and so do the report's steps
        assert (_step_start(row["start"]), _step_start(row["end"])) == _window_edges(episode[2])
        assert row["hours"] == episode[2].sum() / PER_STEP
        assert row["lowest_rpm"] == lowest
    numbers = synthetic_report.section("cooling")["numbers"]
    assert (numbers["fan_events"]["value"], numbers["supply_events"]["value"]) == (2, 1)
    findings = " ".join(synthetic_report.section("cooling")["findings"])
    assert (
        f"{synthetic.FAN_FAILURE[1]} of {_instance(synthetic.FAN_FAILURE[0])} stopped" in findings
    )
    assert f"PSU2 Status of {_instance(synthetic.PSU_FAILURE[0])} failed for 36 h" in findings


def test_cooling_coverage_counts_the_unreachable_bmc(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    hours = [_hourly(v) for v in backfill.history.inlet.values()]
    present = sum(int(np.sum(~np.isnan(h))) for h in hours)
    assert present < sum(h.size for h in hours)  # node-d's BMC did not answer for 6 h
    coverage = synthetic_report.section("cooling")["coverage"]
    assert coverage == pytest.approx(present / sum(h.size for h in hours))


def test_each_slowdown_names_where_its_heat_came_from(
    synthetic_report: SyntheticReport, backfill: Backfill
) -> None:
    """The room when its node's inlet air was above its envelope while it slowed, the
    node when one of its fans was stopped or critical, else the GPU."""
    rows = {(r["node"], r["gpu"]): r for r in synthetic_report.table("thermal", "slowdown")}
    nodes = {n.name: n for n in synthetic.NODES}
    fan_down = {synthetic.FAN_FAILURE[0]: synthetic.FAN_FAILURE[2]}
    fan_down[synthetic.FAN_SLOW[0]] = synthetic.FAN_SLOW[2]
    episodes = [
        synthetic.THERMAL,
        synthetic.ROOM_SLOWDOWN[:3],
        synthetic.NODE_SLOWDOWN[:3],
    ]
    sources = set()
    for name, gpu, window in episodes:
        slowed = _hourly(window.astype(float), GPU_SAMPLES) > 0
        inlet = _hourly(backfill.history.inlet[name])
        fans = _hourly(fan_down.get(name, np.zeros(window.size, dtype=bool)).astype(float))
        if np.any(inlet[slowed] > synthetic.ENVELOPE[nodes[name].node_class]):
            expected = ROOM
        elif np.any(fans[slowed] > 0):
            expected = NODE
        else:
            expected = GPU
        assert rows[(_instance(name), str(gpu))]["heat_source"] == expected
        sources.add(expected)
    assert sources == {ROOM, NODE, GPU}  # the history has one of each
    # the worst (the runaway) says so in the thermal finding, and so in the summary
    assert "the GPU itself" in synthetic_report.section("thermal")["findings"][0]


# --- a site without BMC data ---------------------------------------------------------


@pytest.fixture(scope="module")
def without_bmc(
    synthetic_report: SyntheticReport, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    config = _example_config()
    config["bmc_job_selector"] = 'job="nvwatch-bmc-not-probed"'
    return _report(synthetic_report.url, tmp_path_factory.mktemp("without-bmc"), config)


def test_without_bmc_data_the_plan_is_gpu_only_and_says_so(
    without_bmc: dict[str, Any], synthetic_report: SyntheticReport
) -> None:
    power = without_bmc["sections"]["power"]
    assert set(power["tables"]) == {"by_node", "by_rack", "energy_by_class", "power_cap_weeks"}
    assert [p["name"] for p in power["plots"]] == ["rack_power", "node_power_of_tdp"]
    assert not {"node_energy_kwh", "non_gpu_share"} & set(power["numbers"])
    # the GPU plan is the one the BMC report has beside its measured plan
    assert power["tables"]["by_rack"] == synthetic_report.section("power")["tables"]["by_rack"]
    assert power["findings"][0].startswith("The GPUs used")
    (note,) = [f for f in power["findings"] if f.startswith("No node power from BMCs")]
    assert "counts GPU power only" in note and "rack_gpu_power_budget_kw" in note
    cooling = without_bmc["sections"]["cooling"]
    assert cooling["absent"].startswith('no BMC series (job="nvwatch-bmc-not-probed")')
    assert cooling["plots"] == [] and cooling["tables"] == {}
    assert "9.6 kW budget" in " ".join(without_bmc["summary"])
    slowdown = without_bmc["sections"]["thermal"]["tables"]["slowdown"]["rows"]
    assert {r["heat_source"] for r in slowdown} == {""}
    assert "inlet air, fans, blocked airflow" in without_bmc["sections"]["thermal"]["findings"][0]


def test_a_rack_with_a_node_not_probed_counts_what_was_measured(
    synthetic_report: SyntheticReport, backfill: Backfill, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """node-b's BMC left out of the probe job (its selector): rack-00 is measured on
    node-a alone, and says so."""
    config = _example_config()
    config["bmc_job_selector"] = f'job="{synthetic.BMC_JOB}", instance!="{_instance("node-b")}"'
    data = _report(synthetic_report.url, tmp_path_factory.mktemp("partly-probed"), config)
    racks = {r["rack"]: r for r in _rows(data, "power", "measured_by_rack")}
    assert (racks["rack-00"]["nodes_measured"], racks["rack-00"]["nodes"]) == (1, 2)
    node_a = _node_power(backfill, "node-a")
    assert racks["rack-00"]["max_watts"] == pytest.approx(float(np.nanmax(node_a)), rel=1e-6)
    measured = {r["node"] for r in _rows(data, "power", "measured_by_node")}
    assert measured == {_instance(n.name) for n in synthetic.NODES} - {_instance("node-b")}
    inlet = {r["rack"]: r for r in _rows(data, "cooling", "inlet_by_rack")}
    assert inlet["rack-00"]["nodes"] == 1
    events = {(e["kind"], e["node"]) for e in _rows(data, "cooling", "events")}
    assert ("power supply failed", _instance("node-b")) not in events
