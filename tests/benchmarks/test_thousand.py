"""benchmarks/thousand at a size CI holds: twenty nodes for an hour, through both engines,
so the 1,000-node benchmark cannot rot; and its replaying targets on their own."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import benchmarks.thousand.run as thousand
from benchmarks.common import section_of
from benchmarks.scale.measure import panel_queries
from benchmarks.thousand.engines import RANGES_S
from benchmarks.thousand.replay import ReplayServer, replay_node
from benchmarks.thousand.report_section import estimate, report_lines
from benchmarks.thousand.rule_timing import SETTLED
from benchmarks.thousand.run import Figures, run
from benchmarks.thousand.section import (
    BEGIN,
    COMPARED_BEGIN,
    COMPARED_END,
    END,
    compared_section,
    cores_busy,
    section,
)
from nvwatch.alerts.recording_report import REPORT_RULES
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.bulk.jobs import FIRST_JOB_ID
from nvwatch.sim.bulk.templates import render_bmc_template, render_template
from nvwatch.sim.bulk.write import BulkPlan, node_specs, profile_templates
from tests.conftest import require_tool

# both engines start, scrape and evaluate every group at least once, and vmalert's as
# often as its rules chain (six minutes for the straggler rules), then twice more after
# the report (the settled readings): the run took 760-1130 s alone on two cores; a
# bound for a hang, not for speed
pytestmark = pytest.mark.timeout(1800)


def _scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_replaying_target_goes_on_where_the_history_ended() -> None:
    """Counters at their last step's rate, gauges as they were, the node's own labels
    (target labels are Prometheus' to add)."""
    template = render_template("dgx-a100")
    spec = node_specs(BulkPlan(nodes=1, end_s=0, hours=1, step_s=30))[0]
    previous = template.first.copy()
    last = template.first.copy()
    energy = [i for i, n in enumerate(template.names) if n == "nvwatch_gpu_energy_joules_total"]
    last[energy] += 300.0 * 30  # 300 W for the last 30 s step
    since = time.time()
    agent, _ = replay_node(template, spec, (previous, last), 30.0, since)
    server = ReplayServer({spec.name: agent})
    try:
        url = f"http://{server.address}/node/{spec.name}/metrics"
        began = time.monotonic()
        first = _scrape(url)
        time.sleep(0.2)
        later = _scrape(url)
        elapsed = time.monotonic() - began
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://{server.address}/node/nobody/metrics", timeout=10)
    finally:
        server.close()
    assert sum(len(v) for v in first.values()) == len(template)
    joules = first["nvwatch_gpu_energy_joules_total"]
    assert len(joules) == 8 and all("instance" not in dict(k) for k in joules)
    for labels, value in joules.items():
        gained = later["nvwatch_gpu_energy_joules_total"][labels] - value
        # 300 W for the time between the two scrapes: at least the sleep, at most all
        assert 300.0 * 0.2 <= gained <= 300.0 * elapsed
    power = first["nvwatch_gpu_power_watts"]
    assert power == later["nvwatch_gpu_power_watts"]
    # the agent's last poll keeps time: a replayed node is not stale
    (polled,) = later["nvwatch_agent_last_poll_timestamp_seconds"].values()
    moved = polled - last[template.names.index("nvwatch_agent_last_poll_timestamp_seconds")]
    assert 0.2 <= moved <= time.time() - since


def test_a_replaying_bmc_answers_its_probe_and_the_agent_has_none_of_its_series() -> None:
    """`/probe?target=<BMC>` as the management host's nvwatch answers the `nvwatch-bmc`
    job: the BMC's series alone, without the labels its target group gives; the node's
    agent at its own path without them."""
    plan = BulkPlan(nodes=1, end_s=0, hours=1, step_s=30)
    spec = node_specs(plan)[0]
    template = profile_templates(plan)[spec.profile]
    tail = (template.first, template.first)
    since = time.time()
    agent, bmc = replay_node(template, spec, tail, 30.0, since)
    server = ReplayServer({spec.name: agent}, {spec.bmc: bmc})
    try:
        probe = _scrape(f"http://{server.address}/probe?target={spec.bmc}&module=default")
        agent = _scrape(f"http://{server.address}/node/{spec.name}/metrics")
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://{server.address}/probe?target=127.9.9.9", timeout=10)
    finally:
        server.close()
    bmc = render_bmc_template(spec.profile)
    assert sum(len(v) for v in probe.values()) == len(bmc) > 0
    assert set(probe) == set(bmc.names)
    assert all({"bmc", "instance", "job"}.isdisjoint(dict(k)) for v in probe.values() for k in v)
    assert sum(len(v) for v in agent.values()) == len(template) - len(bmc)
    assert not any(name.startswith("nvwatch_bmc_") for name in agent)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("thousand-logs")


def _log_tail(logs: Path, name: str, lines: int = 30) -> str:
    """The end of a process' log the run kept, for a failure's message."""
    path = logs / f"{name}.log"
    kept = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
    return f"{name}.log ends:\n" + "\n".join(kept)


@pytest.fixture(scope="module")
def figures(logs: Path) -> Figures:
    # script (util-linux) gives vmctl the terminal it insists on
    for tool in ("prometheus", "victoria-metrics", "vmctl", "vmagent", "vmalert", "script"):
        require_tool(tool)
    # the report rules every 2 minutes, not 5: their first evaluation comes sooner, and
    # the stand-in still holds series at two intervals
    # two hours: the report over a quarter of the range is then its shortest, an hour;
    # each engine's month as well, though the 1,000-node run makes Prometheus' alone
    engines = ("prometheus", "victoria-metrics")
    return run(nodes=20, hours=2, scrape_s=30, engines=engines, nvlink_detail="link",
               rule_readings=1, report_interval="2m", keep_logs=logs,
               month_engines=engines)  # fmt: skip


def test_the_history_is_every_node_s_series_for_the_range(figures: Figures) -> None:
    g = figures.generation
    assert sum(g["profiles"].values()) == 20
    # two hours at 30 s for every series but the jobs' allocations (8 GPUs a job), which
    # hold samples for their job's life only
    allocations = 8 * g["jobs"]
    assert g["jobs"] > 0
    assert (g["series"] - allocations) * 240 < g["samples"] < g["series"] * 240
    assert g["block_bytes"] < g["samples"] * 3  # XOR chunks: bytes, not tens, per sample
    assert g["waited_s"] >= 0.0  # for the history's end, foreseen from the trials


@pytest.mark.parametrize("engine", ["prometheus", "victoria-metrics"])
def test_each_engine_ran_every_rule_group_and_answered_every_panel(
    figures: Figures, engine: str
) -> None:
    measured = figures.engines[engine]
    assert measured["rules"] and all(r["seconds"] > 0 for r in measured["rules"])
    # read again once the panels and the report were done: the engine's steady cost
    assert measured["rules_read"] == SETTLED
    panels = measured["panels"]
    assert len(panels) == len(panel_queries(MixinConfig())) * len(RANGES_S)
    assert [p for p in panels if p["error"]] == []


def test_the_run_kept_each_process_log(figures: Figures, logs: Path) -> None:
    kept = {path.name for path in logs.glob("*.log")}
    assert {"prometheus.log", "victoria-metrics.log", "vmalert.log"} <= kept


@pytest.mark.parametrize("engine", ["prometheus", "victoria-metrics"])
def test_the_rules_series_stand_in_over_the_history(figures: Figures, engine: str) -> None:
    """Every series the engine's rules recorded, over the history at its group's
    interval, answered by the engine before the panels were timed (the run waits)."""
    recorded = figures.engines[engine]["recorded_history"]
    # per node at least its instance-level rules; the rack and cluster roll-ups besides
    assert recorded["series"] > 20 * 10
    by_interval = {i["interval_s"]: i for i in recorded["intervals"]}
    assert by_interval.keys() == {60.0, 120.0}  # the mixin's minute, the report's 2m
    for interval_s, held in by_interval.items():
        points = held["samples"] / held["series"]
        # the two hours and the minutes until the engine's rules started (for VictoriaMetrics
        # after Prometheus' turn, its import and three scrapes of every node), and one
        # interval more, at that interval
        assert points == int(points) and 110 * 60 <= points * interval_s <= 135 * 60
    # the report's reads: a series per GPU for the per-GPU reads, per node for the rest
    assert by_interval[120.0]["series"] > 20 * 8
    assert recorded["load_seconds"] >= 0
    # which names they are, counted: the engines' rules compared name by name
    names = recorded["names"]
    assert sum(names.values()) == recorded["series"]
    assert all(":" in name for name in names)
    assert names["instance:nvwatch_bmc_up:bmc_up"] == 20  # every node's BMC recorded


def test_victoria_metrics_holds_the_minutes_before_its_own_scrapes(figures: Figures) -> None:
    """It scrapes after Prometheus' turn: the minutes from the history's end were written
    as the replaying targets answered them (tests/benchmarks/test_thousand_gap.py holds
    their values to the targets' answers)."""
    vm, g = figures.engines["victoria-metrics"], figures.generation
    steps = int((vm["live_from"] - g["history_end"]) // 30)
    assert steps >= 2  # Prometheus' turn took minutes
    # each node's series at every step of the gap, the running jobs' allocations besides
    assert vm["gap"]["samples"] >= steps * (g["series"] - 8 * g["jobs"])


def test_victoria_metrics_stands_in_with_every_name_prometheus_does(figures: Figures) -> None:
    """vmalert's rules read another rule's series an evaluation after it was recorded:
    the run waits for each group's chain (the straggler rules' six levels) before the
    stand-in, which then holds every recorded name Prometheus' does. Not as many series
    of each: taken minutes later, more jobs may be past the straggler rules' warm-up and
    fewer still running (at 1,000 nodes 859 jobs compared against 834)."""
    names = {e: figures.engines[e]["recorded_history"]["names"] for e in figures.engines}
    assert sorted(names["prometheus"].keys() - names["victoria-metrics"].keys()) == []
    vm = figures.engines["victoria-metrics"]
    assert vm["chained_seconds"] >= 0 and max(vm["chains"].values()) >= 3


def test_a_dashboard_without_all_is_timed_on_its_first_node(figures: Figures) -> None:
    """As Grafana opens it: the node, NVLink and InfiniBand dashboards on the first node
    by name, the jobs dashboard on the first job; every other with every node."""
    selection = {p["dashboard"]: p["selection"] for p in figures.engines["prometheus"]["panels"]}
    first = min(s.name for s in node_specs(BulkPlan(nodes=20, end_s=0, hours=1, step_s=30)))
    for name in ("nvwatch-node.json", "nvwatch-nvlink.json", "nvwatch-infiniband.json"):
        assert selection[name] == f"instance={first}"
    assert selection["nvwatch-cluster-overview.json"] == ""
    # the jobs dashboard on the first job by name (every user: that variable has "All")
    assert selection["nvwatch-jobs.json"] == f"job_id={FIRST_JOB_ID}"


@pytest.mark.parametrize("engine", ["prometheus", "victoria-metrics"])
def test_the_report_ran_over_the_history(figures: Figures, engine: str, logs: Path) -> None:
    report = figures.engines[engine]["report"]
    assert (report["returncode"], report["error"]) == (0, "")
    # the stand-in holds the report rules' series over the whole history
    rules_log = _log_tail(logs, "vmalert" if engine == "victoria-metrics" else engine)
    assert report["read_from"] == f"{REPORT_RULES} (one sample per 5m)", rules_log
    assert {"report.html", "report.json"} <= set(report["files"])
    # and over a quarter of the range, for how its time grows; each says where it went
    shorter = report["shorter"]
    assert (shorter["returncode"], shorter["hours"]) == (0, 1.0)
    # its window ends in the live minutes too, where the stand-in meets the rules' own
    assert shorter["read_from"] == report["read_from"], rules_log
    for made in (shorter, report):
        timings = made["timings"]
        assert {"source", "queries", "writing"} <= timings["phases"].keys()
        assert timings["total_seconds"] <= made["seconds"]  # the process' start besides
        assert {q["name"] for q in timings["queries"]} >= {"gpu_up", "bmc_power"}
        # every node's BMC was probed, recorded and read, as the GPUs were
        (bmc_up,) = [q for q in timings["queries"] if q["name"] == "bmc_up"]
        assert bmc_up["series"] == 20
        assert all(q["series"] >= 0 and q["requests"] >= 1 for q in timings["queries"])
    # and over 30 days: the report rules' series stand in before the history too
    month = report["month"]
    assert (month["returncode"], month["error"], month["hours"]) == (0, "", 720.0)
    assert month["read_from"] == report["read_from"] and month["step_s"] == 3600.0
    before = figures.engines[engine]["recorded_history"]["before"]
    assert [b["interval_s"] for b in before] == [120.0]  # the report rules' groups only
    assert before[0]["hours"] >= 30 * 24 - 2
    text = section(figures.__dict__)
    name = "Prometheus" if engine == "prometheus" else "VictoriaMetrics"
    assert f"| {name} | {report['read_from']} | 1 h, step 5 min |" in text
    assert estimate(figures.__dict__, report) is not None


def test_the_month_grows_reading_with_the_range_and_the_rest_with_the_points() -> None:
    """6 h and 24 h at 5-minute steps (72 and 288 points); a month at one hour (720)."""

    def made(hours: float, reading: float, wall: float, rss: float) -> dict[str, Any]:
        phases = {"source": reading / 4, "queries": reading * 3 / 4, "writing": 1.0}
        return {"returncode": 0, "seconds": wall, "peak_rss_mb": rss, "hours": hours,
                "timings": {"phases": phases}}  # fmt: skip

    whole = {**made(24, 40.0, 54.0, 900.0), "shorter": made(6, 10.0, 15.0, 300.0)}
    month = estimate({"hours": 24, "report_interval": "5m"}, whole)
    assert month is not None
    # reading: 30 s more per 18 h -> 40 + 696 h x 30/18
    assert month.reading_s == pytest.approx(40.0 + 696 * 30 / 18)
    # the rest: 5 s at 72 points, 14 s at 288 -> 14 + 432 x 9/216
    assert month.rest_s == pytest.approx(14.0 + 432 * 9 / 216)
    assert month.peak_rss_mb == pytest.approx(900.0 + 432 * 600 / 216)
    # a part measured faster over the longer range does not shrink
    whole["shorter"] = made(6, 50.0, 60.0, 300.0)
    month = estimate({"hours": 24, "report_interval": "5m"}, whole)
    assert month is not None and month.reading_s == pytest.approx(40.0)
    whole["returncode"] = 1
    assert estimate({"hours": 24, "report_interval": "5m"}, whole) is None


def test_the_month_s_reading_is_a_part_per_point_and_a_part_per_hour() -> None:
    """With the whole range also at three times the step: 24 h at 5 min (288 points)
    reads in 40 s, at 15 min (96) in 20 s, 6 h at 5 min (72) in 10 s."""

    def made(hours: float, step_s: float, reading: float) -> dict[str, Any]:
        phases = {"source": 1.0, "queries": reading - 1.0}
        return {"returncode": 0, "seconds": reading + 2, "peak_rss_mb": 100.0,
                "hours": hours, "step_s": step_s, "timings": {"phases": phases}}  # fmt: skip

    whole = {**made(24, 300, 40.0), "shorter": made(6, 300, 10.0),
             "coarser": made(24, 900, 20.0)}  # fmt: skip
    month = estimate({"hours": 24, "report_interval": "5m"}, whole)
    assert month is not None
    # 20 s per 192 points; of the 30 s from 6 h to 24 h, 216 points' 22.5 s, so 7.5 s
    # per 18 h: a month (720 points, 720 h) is 40 + 432 x 20/192 + 696 x 7.5/18
    assert month.reading_s == pytest.approx(40.0 + 45.0 + 290.0)
    assert month.rest_s == pytest.approx(2.0)  # two seconds at every size


def test_a_report_that_read_no_straggler_alert_says_why_it_has_fewer_files() -> None:
    """A coarser report's last whole step can end before the first straggler alert
    fired (they fire in the live minutes only): its Stragglers files are missing, and
    the section says so instead of leaving a smaller count unexplained."""

    def made(alerts: int, files: int) -> dict[str, Any]:
        queries = [{"name": "gpu_util", "seconds": 1.0, "series": 8},
                   {"name": "straggler_alerts", "seconds": 0.1, "series": alerts}]  # fmt: skip
        return {"returncode": 0, "seconds": 10.0, "peak_rss_mb": 100.0, "error": "",
                "read_from": "rules", "files": [f"f{n}.csv" for n in range(files)],
                "timings": {"phases": {"source": 1.0}, "queries": queries}}  # fmt: skip

    report = {**made(3, 37), "coarser": {**made(0, 34), "step_s": 900.0}}
    figures = {"nodes": 4, "hours": 24.0, "report_interval": "5m",
               "generation": {"bmc_series": 4},
               "engines": {"prometheus": {"report": report}}}  # fmt: skip
    rows = [line for line in report_lines(figures) if line.startswith("| Prometheus |")]
    assert len(rows) == 2
    assert "37 files |" in rows[0] and "no straggler alert" not in rows[0]
    assert "34 files (no Stragglers files: no straggler alert" in rows[1]


def test_an_engine_without_its_month_has_it_estimated_and_the_section_says_which_ran() -> None:
    """The 1,000-node run makes Prometheus' month alone (--month-engines): the section
    names the engines whose month ran, and the other's month row is its estimate."""

    def made(hours: float, seconds: float) -> dict[str, Any]:
        phases = {"source": 1.0, "queries": seconds / 2, "writing": 1.0}
        return {"returncode": 0, "seconds": seconds, "peak_rss_mb": 100.0, "error": "",
                "read_from": "rules", "files": ["report.html"], "hours": hours,
                "step_s": 300.0, "timings": {"phases": phases, "queries": []}}  # fmt: skip

    def report(month: bool) -> dict[str, Any]:
        whole = {**made(24.0, 40.0), "shorter": made(6.0, 12.0)}
        whole["coarser"] = {**made(24.0, 20.0), "step_s": 900.0}
        return {**whole, "month": {**made(720.0, 200.0), "step_s": 3600.0}} if month else whole

    figures = {"nodes": 4, "hours": 24.0, "report_interval": "5m",
               "generation": {"bmc_series": 4}, "month_engines": ["prometheus"],
               "engines": {"prometheus": {"report": report(True)},
                           "victoria-metrics": {"report": report(False)}}}  # fmt: skip
    text = "\n".join(report_lines(figures))
    assert "(where measured: Prometheus, `--month-engines`;" in text
    (vm,) = [line for line in text.splitlines() if line.startswith("| VictoriaMetrics | ")
             and "not measured" in line]  # fmt: skip
    (prometheus,) = [line for line in text.splitlines()
                     if line.startswith("| Prometheus | ") and "| 3.3 | yes |" in line]  # fmt: skip
    assert vm and prometheus


def test_the_global_server_federates_the_rack_server_s_recorded_series(
    figures: Figures,
) -> None:
    """prometheus-global.yml beside the run's Prometheus: its federation answer holds
    each node's recorded series, its scrapes took them in without a sample dropped as a
    second writer's, its roll-ups were evaluated."""
    f = figures.engines["prometheus"]["federation"]
    assert "error" not in f, f.get("error")
    assert f["answer"]["series"] > 20 * 8  # per GPU and per node, for 20 nodes
    assert f["samples_scraped"] >= f["answer"]["series"] * 0.9  # the jobs come and go
    assert len(f["scrape_seconds"]) >= 2 and all(s > 0 for s in f["scrape_seconds"])
    assert f["head_series"] >= f["samples_scraped"]  # and its own roll-ups
    # the roll-ups over the federated series are evaluated there; a node's are not
    groups = {r["group"] for r in f["rules"]}
    assert groups >= {"nvwatch-cluster.rules", "nvwatch-attribution.rules"}
    assert "nvwatch-node.rules" not in groups
    assert all(r["seconds"] > 0 for r in f["rules"])
    # no series has two writers: the rack's evaluation, federated, and the global's own
    assert f["duplicate_samples"] == 0
    text = section(figures.__dict__)
    assert "The global server measured" in text
    assert "| samples dropped as a series' second writer | 0 |" in text


def test_the_live_minutes_are_scraped(figures: Figures) -> None:
    # the replaying targets' series in the head, beside the recording rules' outputs
    assert figures.engines["prometheus"]["head_series"] >= figures.generation["series"]
    assert figures.engines["victoria-metrics"]["import_seconds"] > 0


def test_the_section_states_every_group_and_the_generation(figures: Figures) -> None:
    text = section(figures.__dict__)
    for r in figures.engines["prometheus"]["rules"]:
        assert f"| {r['group']} |" in text
    assert f"{figures.generation['series']:,} series" in text
    assert np.isfinite(figures.generation["seconds"])
    # the groups' times are said to be the settled ones, not the first minutes'
    assert "imports, panels and report were done" in text and "first minutes" not in text
    # the engines' own processes were busy over those readings, and within the machine
    for engine, name in (("prometheus", "prometheus"), ("victoria-metrics", "victoria-metrics")):
        cores = figures.engines[engine]["cores_during_rules"]
        assert 0 < cores[name] <= cores["machine"] + 0.05 <= (figures.machine["cores"] + 0.1)
        assert f"{name} {cores[name]:.2f}" in text
    assert figures.engines["victoria-metrics"]["merges_during_rules"]["rows_merged"] >= 0


def test_the_cores_sentence_leaves_out_processes_gone_and_runs_without_it() -> None:
    """A process that ended before the readings (a report) reads NaN and is not named;
    figures of a run before the cores were recorded render no sentence."""
    cores = {"prometheus": 0.44, "report-prometheus": float("nan"), "machine": 0.5}
    figures: dict[str, Any] = {
        "machine": {"cores": 2},
        "engines": {"prometheus": {"cores_during_rules": cores}},
    }
    said = cores_busy(figures, ["prometheus"])
    assert (
        said == "Cores busy over those readings, of the machine's 2: "
        "with Prometheus, 0.50 in all (prometheus 0.44)."
    )
    assert cores_busy({"engines": {"prometheus": {}}}, ["prometheus"]) == ""


def test_docs_scale_section_is_rendered_from_the_committed_figures() -> None:
    """docs/scale.md's 1,000-node section is what its figures (docs/scale-thousand.json,
    written by the run) render to: edited by hand, it would differ."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    figures = json.loads((docs / "scale-thousand.json").read_text())
    committed = section_of((docs / "scale.md").read_text(), BEGIN, END)
    assert committed == section(figures)
    assert figures["nodes"] == 1000 and figures["hours"] == 24
    # the same fleet at the other --nvlink-detail, in a file and section of its own
    others = sorted(docs.glob("scale-thousand-*.json"))
    assert len(others) <= 1
    for other in others:
        compared = json.loads(other.read_text())
        assert compared["nvlink_detail"] != figures["nvlink_detail"]
        assert compared["nodes"] == figures["nodes"]
        text = (docs / "scale.md").read_text()
        assert section_of(text, COMPARED_BEGIN, COMPARED_END) == compared_section(compared)


def test_an_engine_that_failed_keeps_the_other_s_figures_and_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An hour's run whose second engine fails writes what the first measured, says
    which failed in one line, exits 1 and renders no section."""
    measured = Figures(nodes=20, hours=2, scrape_s=30, nvlink_detail="gpu")
    measured.engines = {"prometheus": {"rules": []}, "victoria-metrics": {"error": "Boom: 422"}}
    monkeypatch.setattr(thousand, "run", lambda *args: measured)
    out, figures = tmp_path / "scale.md", tmp_path / "figures.json"
    out.write_text("untouched\n")
    assert thousand.main(["--json", str(figures), "--out", str(out)]) == 1
    assert json.loads(figures.read_text())["engines"]["prometheus"] == {"rules": []}
    assert out.read_text() == "untouched\n"
    assert capsys.readouterr().out == (
        "thousand: failed (victoria-metrics: Boom: 422); the rest of the figures are in the JSON\n"
    )
