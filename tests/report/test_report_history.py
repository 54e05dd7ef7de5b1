"""`nvwatch report` over the simulated month (tests/history: the `history` generator's
30 days of a mixed fleet with placed episodes, backfilled into a real Prometheus).

Expectations come from the generator's ground truth (its integrals over the samples it
wrote, and where and when it placed each episode), not from the report's code. The
report's window ends on a whole hour, up to one step before the history's end, so sums
agree within 1 % and episode lengths within a step or two.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from nvwatch.mixin import config as mixin_config
from nvwatch.report.air import GPU, NODE
from nvwatch.report.style import RACK_COLOURS
from nvwatch.report.window import WEEK_SECONDS
from tests.history.backfill import HistoryPrometheus
from tests.report.conftest import EXAMPLE_CONFIG

pytestmark = pytest.mark.timeout(900)  # the first test waits for the session's backfill
SLACK_HOURS = 2.0  # an episode's edges fall inside an hour step


@pytest.fixture(scope="module")
def history_report(
    history_prometheus: HistoryPrometheus, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("history-report")
    args = [
        "report",
        "--prometheus",
        history_prometheus.url,
        "--range",
        "30d",
        "--end",
        str(int(history_prometheus.end)),
        "--config",
        str(EXAMPLE_CONFIG),
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(Path(out / "report.json").read_text())
    return report


def _rows(report: dict[str, Any], section: str, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = report["sections"][section]["tables"][table]["rows"]
    return rows


def _number(report: dict[str, Any], section: str, name: str) -> float:
    return float(report["sections"][section]["numbers"][name]["value"])


def _episode(history: HistoryPrometheus, kind: str) -> dict[str, Any]:
    (episode,) = [e for e in history.truth["episodes"] if e["kind"] == kind]
    return episode


def _week_of(report: dict[str, Any], episode: dict[str, Any]) -> int:
    """The report's week (1-based, from its own start) the episode began in."""
    return int((episode["start"] - report["start"]) // WEEK_SECONDS) + 1


def _week_label(report: dict[str, Any], week: int) -> str:
    import datetime as dt

    first = dt.datetime.fromtimestamp(report["start"] + (week - 1) * WEEK_SECONDS, dt.timezone.utc)
    return f"week of {first:%Y-%m-%d}"


def test_energy_and_gpu_hours_match_the_ground_truth(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    nodes = history_prometheus.truth["nodes"]
    assert _number(history_report, "power", "energy_kwh") == pytest.approx(
        sum(n["energy_kwh"] for n in nodes), rel=0.01
    )
    assert _number(history_report, "utilization", "available_gpu_hours") == pytest.approx(
        sum(n["gpu_hours_up"] for n in nodes), rel=0.01
    )
    assert _number(history_report, "utilization", "busy_gpu_hours") == pytest.approx(
        sum(n["gpu_hours_busy"] for n in nodes), rel=0.01
    )
    by_class = {r["group"]: r for r in _rows(history_report, "utilization", "by_class")}
    for node_class in {n["node_class"] for n in nodes}:
        members = [n for n in nodes if n["node_class"] == node_class]
        assert by_class[node_class]["gpus"] == sum(n["gpus"] for n in members)
        assert by_class[node_class]["busy_gpu_hours"] == pytest.approx(
            sum(n["gpu_hours_busy"] for n in members), rel=0.01
        )


def test_the_thermal_runaway(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    episode = _episode(history_prometheus, "thermal-runaway")
    top = _rows(history_report, "thermal", "slowdown")[0]
    assert (top["node"], top["gpu"]) == (episode["node"], str(episode["gpu"]))
    assert top["worst_week"] == _week_label(history_report, _week_of(history_report, episode))
    assert top["hours"] == pytest.approx(
        episode["measured"]["slowdown_seconds"] / 3600, abs=SLACK_HOURS
    )
    assert top["max_celsius"] == episode["measured"]["peak_temperature_celsius"]


def test_the_power_capped_week(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    episode = _episode(history_prometheus, "power-capped")
    (row,) = [
        r for r in _rows(history_report, "power", "power_cap_weeks") if r["node"] == episode["node"]
    ]
    week = _week_of(history_report, episode)
    weeks = {k: v for k, v in row.items() if k.startswith("week_")}
    assert max(weeks, key=lambda k: weeks[k]) == f"week_{week}"
    gpus = {n["instance"]: n["gpus"] for n in history_prometheus.truth["nodes"]}[episode["node"]]
    assert sum(weeks.values()) == pytest.approx(
        episode["measured"]["capped_gpu_seconds"] / 3600, abs=gpus * SLACK_HOURS
    )


def test_the_congestion_episode(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    episode = _episode(history_prometheus, "ib-congestion")
    rows = _rows(history_report, "fabric", "congestion")
    assert [(r["node"], r["port"].split("/")[0]) for r in rows] == [
        (episode["node"], episode["device"])
    ]
    assert rows[0]["worst_week"] == _week_label(history_report, _week_of(history_report, episode))
    assert rows[0]["max_wait_share"] > 0.05


def test_the_uncorrectable_ecc_error(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    episode = _episode(history_prometheus, "ecc-dbe")
    xids = [r for r in _rows(history_report, "health", "xids") if r["node"] == episode["node"]]
    assert {(r["gpu"], r["xid"], r["critical"]) for r in xids} == {
        (str(episode["gpu"]), xid, "yes") for xid in episode["measured"]["xids"]
    }
    label = _week_label(history_report, _week_of(history_report, episode))
    assert {r["worst_week"] for r in xids} == {label}
    assert _number(history_report, "health", "critical_xid_events") >= len(xids)


def test_the_agent_downtime(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    episode = _episode(history_prometheus, "agent-down")
    missed = {n["instance"]: n["missed_scrapes"] for n in history_prometheus.truth["nodes"]}
    rows = {r["node"]: r for r in _rows(history_report, "health", "agent_downtime")}
    assert rows[episode["node"]]["hours_without_data"] == pytest.approx(
        missed[episode["node"]] * history_prometheus.step / 3600, abs=SLACK_HOURS
    )


def test_the_idle_node(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    episode = _episode(history_prometheus, "idle")
    (row,) = [
        r
        for r in _rows(history_report, "utilization", "node_weeks")
        if r["node"] == episode["node"]
    ]
    assert all(v < 0.05 for k, v in row.items() if k.startswith("week_") and v is not None)
    assert episode["node"] in " ".join(history_report["sections"]["utilization"]["findings"])


def test_each_rack_has_one_colour_of_its_own_in_every_chart(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    """The simulated racks mix node classes (one colour per class would be grey for all):
    each rack gets a colour of its own, the same in every chart that shows it."""
    racks = {node["rack"] for node in history_prometheus.truth["nodes"]}
    assert len(racks) >= 2
    plots = [p for section in history_report["sections"].values() for p in section["plots"]]
    (rack_plot,) = [p for p in plots if p["name"] == "rack_power"]
    colours = {entry["label"]: entry["colour"].upper() for entry in rack_plot["legend"]}
    assert set(colours) == racks
    assert len(set(colours.values())) == len(racks)
    assert set(colours.values()) <= set(RACK_COLOURS)
    for plot in plots:
        for entry in plot["legend"]:
            if entry["label"] in racks:
                assert entry["colour"].upper() == colours[entry["label"]], plot["name"]


# --- the BMCs: node power, inlet air, fans and supplies --------------------------------


def test_node_energy_and_the_non_gpu_share_match_the_ground_truth(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    nodes = {n["instance"]: n for n in history_prometheus.truth["nodes"]}
    rows = _rows(history_report, "power", "measured_by_node")
    assert {r["node"] for r in rows} == set(nodes)
    for row in rows:
        assert row["energy_kwh"] == pytest.approx(nodes[row["node"]]["node_energy_kwh"], rel=0.01)
    assert _number(history_report, "power", "node_energy_kwh") == pytest.approx(
        sum(n["node_energy_kwh"] for n in nodes.values()), rel=0.01
    )
    # the truth counts node energy while an agent is down and no GPU energy then, the
    # report only the steps both were read: within a point
    classes = {c["node_class"]: c for c in history_prometheus.truth["classes"]}
    for row in _rows(history_report, "power", "non_gpu_by_class"):
        truth = classes[row["node_class"]]
        assert row["non_gpu_share"] == pytest.approx(truth["non_gpu_share"], abs=0.01)


def test_inlet_air_per_rack_against_the_envelope_matches_the_ground_truth(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    """The truth's percentiles are of every sample, the report's of step means."""
    racks = {r["rack"]: r for r in history_prometheus.truth["racks"]}
    rows = {r["rack"]: r for r in _rows(history_report, "cooling", "inlet_by_rack")}
    assert set(rows) == set(racks)
    for rack, row in rows.items():
        truth = racks[rack]
        assert row["p50_celsius"] == pytest.approx(truth["inlet_celsius"]["p50"], abs=0.5)
        assert row["p95_celsius"] == pytest.approx(truth["inlet_celsius"]["p95"], abs=0.5)
        assert row["max_celsius"] == pytest.approx(truth["inlet_celsius"]["max"], abs=0.5)
        assert row["hours_above"] == pytest.approx(
            truth["seconds_above_envelope"] / 3600, abs=SLACK_HOURS
        )
    episode = _episode(history_prometheus, "hot-aisle")
    assert rows[episode["rack"]]["hours_above"] > 0
    assert rows[episode["rack"]]["worst_week"] == _week_label(
        history_report, _week_of(history_report, episode)
    )


def test_the_fan_and_supply_failures_are_events_of_their_node(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    events = _rows(history_report, "cooling", "events")
    fan = _episode(history_prometheus, "fan-failure")
    supply = _episode(history_prometheus, "psu-failure")
    expected = {
        ("fan stopped", fan["node"], fan["fan"]): fan["measured"]["stopped_seconds"],
        ("power supply failed", supply["node"], supply["supply"]): supply["measured"][
            "failed_seconds"
        ],
    }
    assert {(e["kind"], e["node"], e["sensor"]) for e in events} == set(expected)
    for event in events:
        seconds = expected[(event["kind"], event["node"], event["sensor"])]
        assert event["hours"] == pytest.approx(seconds / 3600, abs=SLACK_HOURS)


def test_a_slowdown_behind_a_stopped_fan_names_the_node(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    fan = _episode(history_prometheus, "fan-failure")
    slowed = set(fan["measured"]["gpu_slowdown_seconds"])
    assert slowed
    rows = {(r["node"], r["gpu"]): r for r in _rows(history_report, "thermal", "slowdown")}
    for gpu in slowed:
        assert rows[(fan["node"], gpu)]["heat_source"] == NODE
    runaway = _episode(history_prometheus, "thermal-runaway")
    assert rows[(runaway["node"], str(runaway["gpu"]))]["heat_source"] == GPU


def _scheduler_episode(history: HistoryPrometheus, kind: str) -> dict[str, Any]:
    (episode,) = [e for e in history.truth["scheduler"]["episodes"] if e["kind"] == kind]
    return episode


def test_demand_per_partition_matches_the_queue_truth(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    """Unmet demand, hours above capacity, GPUs idle while jobs wait and the queue waits
    of each partition against the simulated queue's own tally of the samples it wrote.
    The report's window sits up to one step before the history's: integrals agree within
    two steps' worth, percentiles within a few jobs' worth of rank."""
    truth = history_prometheus.truth["scheduler"]
    rows = {r["partition"]: r for r in _rows(history_report, "demand", "partitions")}
    waits = {r["partition"]: r for r in _rows(history_report, "demand", "waits")}
    assert set(rows) == set(waits) == {p["partition"] for p in truth["partitions"]}
    hours = history_report["step_seconds"] / 3600 * 2
    for expected in truth["partitions"]:
        row, wait = rows[expected["partition"]], waits[expected["partition"]]
        gpus = expected["gpus"]
        assert row["gpus_in_service"] + row["gpus_unavailable"] == pytest.approx(gpus)
        assert row["unmet_gpus_peak"] <= expected["unmet_gpus_peak"]
        assert row["unmet_gpus_typical"] == expected["unmet_gpus_typical"]
        assert row["unmet_gpus_mean"] == pytest.approx(
            expected["unmet_gpus_mean"], abs=expected["unmet_gpus_peak"] * hours / 720
        )
        assert row["hours_above_capacity"] == pytest.approx(
            expected["demand_above_capacity_hours"], abs=hours
        )
        assert row["idle_while_waiting_hours"] == pytest.approx(
            expected["idle_while_waiting_hours"], abs=hours
        )
        assert row["idle_gpu_hours_while_waiting"] == pytest.approx(
            expected["idle_gpu_hours_while_waiting"], abs=gpus * hours
        )
        assert wait["jobs_started"] == pytest.approx(expected["jobs_started"], rel=0.02, abs=2)
        for key, value in expected["wait_seconds"].items():
            got = wait[f"wait_{key}_seconds"]
            assert got == (None if value is None else pytest.approx(value, rel=0.03)), key
    # the backlog's peak lies well inside both windows
    backlog = _scheduler_episode(history_prometheus, "backlog")
    assert rows[backlog["partition"]]["unmet_gpus_peak"] == backlog["measured"]["unmet_gpus_peak"]


def test_demand_verdicts_name_each_partitions_episode(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    """The backlog week's partition is short of GPUs; the one where a limit held jobs back
    beside idle GPUs has GPUs idle while jobs wait; the one nobody submits to ran no GPU
    job; the rest, whose truth allows neither, are right-sized. The executive summary
    carries the sentence."""
    truth = history_prometheus.truth["scheduler"]
    config = mixin_config.load(EXAMPLE_CONFIG)
    cfg_fraction, week_hours = config.scheduler_short_of_gpus_fraction, 7 * 24
    backlog = _scheduler_episode(history_prometheus, "backlog")
    limits = _scheduler_episode(history_prometheus, "limits")
    assert backlog["measured"]["demand_above_capacity_share"] > cfg_fraction
    verdicts = {r["partition"]: r["verdict"] for r in _rows(history_report, "demand", "partitions")}
    assert verdicts[backlog["partition"]] == "short of GPUs"
    assert limits["partition"] != backlog["partition"]
    assert verdicts[limits["partition"]] == "GPUs idle while jobs wait"
    hours = (history_report["end"] - history_report["start"]) / 3600
    for row in truth["partitions"]:
        name = row["partition"]
        if name in (backlog["partition"], limits["partition"]):
            continue
        if row["allocated_gpu_hours"] == 0:
            assert verdicts[name] == "no GPU jobs"
            continue
        # fewer hours above capacity than half a week, and idle-while-waiting under 5 %
        assert row["demand_above_capacity_hours"] < cfg_fraction * week_hours
        assert row["idle_while_waiting_hours"] < 0.05 * hours
        assert verdicts[name] == "right-sized"
    sentence = history_report["sections"]["demand"]["findings"][0]
    assert sentence in history_report["summary"]
    assert f"{backlog['partition']} was short of GPUs" in sentence
    assert f"{limits['partition']} had GPUs idle while jobs waited" in sentence


def test_gpu_hours_per_account_against_fair_share(
    history_report: dict[str, Any], history_prometheus: HistoryPrometheus
) -> None:
    truth = history_prometheus.truth["scheduler"]
    rows = {r["account"]: r for r in _rows(history_report, "demand", "accounts")}
    assert set(rows) == {a["account"] for a in truth["accounts"]}
    for expected in truth["accounts"]:
        row = rows[expected["account"]]
        assert row["gpu_hours"] == pytest.approx(expected["gpu_hours"], rel=0.01)
        assert row["gpu_hours_share"] == pytest.approx(expected["gpu_hours_share"], abs=0.005)
        assert row["shares_norm"] == pytest.approx(expected["shares_norm"])
        assert row["usage_effective_end"] == pytest.approx(
            expected["usage_effective_end"], rel=0.02
        )
        assert row["factor_end"] == pytest.approx(expected["factor_end"], rel=0.02)
        assert row["jobs_started"] == pytest.approx(expected["jobs_started"], rel=0.02, abs=2)
        for key, value in expected["wait_seconds"].items():
            got = row[f"wait_{key}_seconds"]
            assert got == (None if value is None else pytest.approx(value, rel=0.03)), key
    over = _scheduler_episode(history_prometheus, "over-share")
    fairness = history_report["sections"]["demand"]["findings"][1]
    measured = over["measured"]
    ratio = measured["gpu_hours_share"] / measured["shares_norm"]
    assert fairness.startswith(f"Fair share: {over['account']} used ")
    assert f"({ratio:.1f} times it)" in fairness
