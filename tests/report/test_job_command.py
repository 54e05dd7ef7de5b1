"""`nvwatch job` against a real Prometheus holding two jobs written by hand
(tests/report/job_series.py): every figure is arithmetic on that file's constants, every
note is raised where its episode is and nowhere else, and a summary kept in a job store
prints the same as the one made from Prometheus."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvwatch.common.http_connection import Connection
from nvwatch.mixin.config import load
from nvwatch.report.jobs.life import find_life
from nvwatch.report.prom import PrometheusClient
from nvwatch.sim.ports import free_port
from tests.history.backfill import backfill, serve_tsdb
from tests.report import job_series as js

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
KWH = 3.6e6
# figures keep 3 significant digits (report/jobs/model.py): what a summary needs
DIGITS = 5e-3


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float]]:
    work = tmp_path_factory.mktemp("job-prometheus")
    first = float(int(time.time()) - js.SPAN_S - 600)
    history = work / "jobs.om"
    js.write_openmetrics(history, first)
    backfill(history, work / "tsdb", days=1)
    with serve_tsdb(work / "tsdb", work, step=js.STEP_S) as url:
        yield url, first


def _job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NVWATCH, "job", *args], capture_output=True, text=True, timeout=120)


def _json(url: str, job: str, *more: str) -> dict[str, Any]:
    done = _job(job, "--prometheus", url, "--format", "json", *more)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _gpus(data: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(g["instance"], g["gpu"]): g for g in data["gpus"]}


def test_the_jobs_life_owner_and_gpus(prometheus: tuple[str, float]) -> None:
    url, first = prometheus
    data = _json(url, "4711")
    assert data["start"] == pytest.approx(first + js.JOB_A.start, abs=0.01)
    assert data["end"] == pytest.approx(first + js.JOB_A.end, abs=0.01)
    assert (data["user"], data["account"], data["cluster"]) == ("alice", "ml", "c1")
    assert sorted(_gpus(data)) == sorted((n, str(g)) for n, g in js.A_GPUS)
    assert data["gpu_count"] == 12
    assert data["source"].startswith("Prometheus http://127.0.0.1:")


def test_every_figure_per_gpu(prometheus: tuple[str, float]) -> None:
    gpus = _gpus(_json(prometheus[0], "4711"))
    life = js.JOB_A.end - js.JOB_A.start  # 3600 s: 240 steps of 15 s
    for g in range(7):
        row = gpus["n1", str(g)]
        assert row["utilization"] == pytest.approx(0.9, rel=DIGITS)
        assert row["memory_peak_bytes"] == pytest.approx(40 * js.GIB, rel=DIGITS)
        assert row["memory_total_bytes"] == pytest.approx(80 * js.GIB, rel=DIGITS)
        assert (row["power_mean_watts"], row["power_limit_watts"]) == (300, 400)
        assert row["energy_joules"] == pytest.approx(300 * life, rel=DIGITS)  # 1.08 MJ
        assert row["model"] == js.GPU_NAME
    assert gpus["n1", "7"]["utilization"] == 0
    assert gpus["n1", "7"]["energy_joules"] == pytest.approx(60 * life, rel=DIGITS)
    # the counter restarted from zero halfway: still every joule of the hour
    assert gpus["n2", "0"]["energy_joules"] == pytest.approx(280 * life, rel=DIGITS)
    # sw_power_cap held over the job's first 30 %: samples 0..1065 s after the start, of
    # which the window (start, end] holds 71 of its 240
    assert gpus["n2", "1"]["clock_events"] == {"sw_power_cap": pytest.approx(71 / 240, rel=DIGITS)}
    assert gpus["n2", "2"]["clock_events"] == {}
    assert gpus["n2", "2"]["sm_active"] is None  # no GPM series: absent, not zero


def test_the_totals_and_the_energy_split(prometheus: tuple[str, float]) -> None:
    data = _json(prometheus[0], "4711")
    life = 3600
    assert data["utilization"] == pytest.approx((7 * 0.9 + 0 + 4 * 0.8) / 12, rel=DIGITS)
    gpu_energy = (7 * 300 + 60 + 4 * 280) * life
    assert data["gpu_energy_joules"] == pytest.approx(gpu_energy, rel=DIGITS)
    nodes = {n["instance"]: n for n in data["nodes"]}
    # n1: every GPU the job's, so the whole node; n2: 4 of its 8 GPUs, half of it. c2's
    # n1 (4 GPUs, 7 kW, a job of its own) is another node of the same name
    assert nodes["n1"]["method"] == "exclusive"
    assert (nodes["n1"]["gpus_held"], nodes["n1"]["gpus_total"]) == (8, 8)
    assert nodes["n1"]["node_energy_joules"] == pytest.approx(5000 * life, rel=DIGITS)
    assert nodes["n2"]["method"] == "gpu-share"
    assert (nodes["n2"]["gpus_held"], nodes["n2"]["gpus_total"]) == (4, 8)
    assert nodes["n2"]["node_energy_joules"] == pytest.approx(4000 * life, rel=DIGITS)


def test_the_notes_are_raised_where_their_episode_is(prometheus: tuple[str, float]) -> None:
    a = {n["code"]: n for n in _json(prometheus[0], "4711")["notes"]}
    # n1/7 idle; n2/1 capped 30 % > 20 % and named by the straggler alert; two nodes
    # whose port counters did not move
    assert set(a) == {"idle-gpus", "power-capped", "idle-infiniband", "straggler"}
    # c1's ports stood still; c2's n1/mlx5_0/1, which moved, is another cluster's
    ports = _json(prometheus[0], "4711")["ports"]
    assert [(p["instance"], p["transmit_bytes"], p["receive_bytes"]) for p in ports] == [
        ("n1", 0, 0),
        ("n2", 0, 0),
    ]
    assert "n2/1 (power-capped)" in a["straggler"]["text"]
    assert a["straggler"]["gpu_hours"] == pytest.approx(12.0, rel=DIGITS)
    assert "1 of its 12 GPUs" in a["idle-gpus"]["text"] and "n1/7" in a["idle-gpus"]["text"]
    assert a["idle-gpus"]["gpu_hours"] == pytest.approx(1.0, rel=DIGITS)
    assert "gpu_allocated_idle_utilization" in a["idle-gpus"]["threshold"]
    assert "job_throttled_ratio" in a["power-capped"]["threshold"]
    b = {n["code"]: n for n in _json(prometheus[0], "4712")["notes"]}
    # 10 % busy against 90 %, the median of 4711's 12 GPUs (0, 4 x 80 %, 7 x 90 %) over
    # its half hour (c2's four GPUs at 30 % are not its cluster's: with them, 80 %);
    # 4 GiB of 80 at most: a 1g slice
    assert set(b) == {"low-utilization", "small-memory"}
    assert "10% busy against 90%" in b["low-utilization"]["text"]
    assert "1g MIG slice" in b["small-memory"]["text"]


def test_carbon_from_the_configured_grid_intensity(
    prometheus: tuple[str, float], tmp_path: Path
) -> None:
    config = tmp_path / "mixin.yaml"
    config.write_text("grid_intensity_g_per_kwh: 400\n")
    data = _json(prometheus[0], "4711", "--config", str(config))
    node_kwh = (5000 + 4000 / 2) * 3600 / KWH  # 7 kWh
    assert data["grid_intensity_g_per_kwh"] == 400
    text = _job("4711", "--prometheus", prometheus[0], "--config", str(config)).stdout
    assert f"{node_kwh * 0.4:.1f} kg CO2" in text
    assert "kg CO2" not in _job("4711", "--prometheus", prometheus[0]).stdout


def test_a_stored_summary_prints_the_same_without_prometheus(
    prometheus: tuple[str, float], tmp_path: Path
) -> None:
    store = f"dir:{tmp_path / 'jobs'}"
    stored = _job("4711", "--prometheus", prometheus[0], "--store", "--job-store", store)
    assert stored.returncode == 0, stored.stderr
    live = _job("4711", "--prometheus", prometheus[0]).stdout
    kept = _job("4711", "--job-store", store)
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.splitlines()[:-1] == live.splitlines()[:-1]
    assert (
        kept.stdout.splitlines()[-1]
        == f"source: job store {tmp_path / 'jobs'}, stored at the job's end"
    )


def test_unknown_job_and_unreachable_prometheus_are_one_line(
    prometheus: tuple[str, float], tmp_path: Path
) -> None:
    unknown = _job("99999", "--prometheus", prometheus[0])
    assert unknown.returncode == 3 and unknown.stdout == ""
    assert unknown.stderr.count("\n") == 1 and "job 99999 held no GPU" in unknown.stderr
    missing = _job("99999", "--job-store", f"dir:{tmp_path}")
    assert missing.returncode == 3 and "not in the job store" in missing.stderr
    down = _job("4711", "--prometheus", f"http://127.0.0.1:{free_port('127.0.0.1')}")
    assert down.returncode == 2 and down.stderr.count("\n") == 1
    assert "cannot reach Prometheus" in down.stderr and "Traceback" not in down.stderr


def _jobs(store: str, *args: str) -> list[list[str]]:
    done = subprocess.run(
        [*NVWATCH, "jobs", "--job-store", store, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [line.split() for line in done.stdout.splitlines()[1:]]


def test_jobs_lists_the_stored_jobs_one_line_each_with_filters(
    prometheus: tuple[str, float], tmp_path: Path
) -> None:
    store = f"dir:{tmp_path / 'jobs'}"
    for job, partition in (("4711", "h100"), ("4712", "shared")):
        done = _job(job, "--prometheus", prometheus[0], "--store", "--job-store", store,
                    "--partition", partition)  # fmt: skip
        assert done.returncode == 0, done.stderr
    rows = _jobs(store, "--since", "1d")
    # 4712 ended first (half an hour into 4711's hour); GPU-hours 0.5 x 4 and 1 x 12
    assert [r[:6] for r in rows] == [
        ["4712", "bob", "cv", "shared", "4", "2.0"],
        ["4711", "alice", "ml", "h100", "12", "12.0"],
    ]
    assert rows[0][6] == "10%" and rows[1][6] == "79%"
    # 4711's costliest note: the straggler held all 12 GPUs for its hour
    assert rows[1][9:15] == ["a", "straggler", "held", "it", "back:", "one"]
    assert [r[0] for r in _jobs(store, "--since", "1d", "--user", "bob")] == ["4712"]
    assert [r[0] for r in _jobs(store, "--since", "1d", "--account", "ml")] == ["4711"]
    assert [r[0] for r in _jobs(store, "--since", "1d", "--partition", "h100")] == ["4711"]
    # both ended more than ten minutes ago
    assert _jobs(store, "--since", "10m") == []


def test_a_job_shorter_than_the_search_step_is_found(prometheus: tuple[str, float]) -> None:
    """A year's lookback searches in steps of 8.8 h: job 4712's half hour lies inside one
    step, between two of the search's instants, and is found all the same."""
    url, first = prometheus
    data = _json(url, "4712", "--lookback", "365d")
    assert data["start"] == pytest.approx(first + js.JOB_B.start, abs=0.01)
    assert data["end"] == pytest.approx(first + js.JOB_B.end, abs=0.01)


def test_a_job_id_on_two_clusters_is_named_with_cluster(prometheus: tuple[str, float]) -> None:
    """Both clusters ran a job 4800 while the other's was running, on a node named n1 there
    and here: unnamed it is refused, named each is its own cluster's alone."""
    url, first = prometheus
    both = _job("4800", "--prometheus", url)
    assert both.returncode == 2 and both.stdout == "" and "Traceback" not in both.stderr
    assert both.stderr.count("\n") == 1
    assert "clusters 'c1', 'c2'" in both.stderr and "--cluster" in both.stderr
    c2 = _json(url, "4800", "--cluster", "c2")
    life = js.JOB_C2.end - js.JOB_C2.start  # 1800 s
    assert (c2["cluster"], c2["user"], c2["account"]) == ("c2", "dave", "bio")
    assert c2["start"] == pytest.approx(first + js.JOB_C2.start, abs=0.01)
    gpus = _gpus(c2)
    assert sorted(gpus) == [("n1", str(g)) for g in range(4)]
    for row in gpus.values():
        assert row["model"] == js.C2_GPU_NAME
        assert row["utilization"] == pytest.approx(0.3, rel=DIGITS)
        assert row["memory_peak_bytes"] == pytest.approx(60 * js.GIB, rel=DIGITS)
        assert row["energy_joules"] == pytest.approx(200 * life, rel=DIGITS)
    # its node is its own (4 of 4 GPUs), though c1's n1 was held by 4711 meanwhile
    [node] = c2["nodes"]
    assert (node["method"], node["gpus_held"], node["gpus_total"]) == ("exclusive", 4, 4)
    assert node["node_energy_joules"] == pytest.approx(7000 * life, rel=DIGITS)
    # its agent's 400 s outage is a hole in one run, not a requeue: the agent reported
    # nothing then, its GPUs neither
    assert c2["end"] == pytest.approx(first + js.JOB_C2.end, abs=0.01)
    assert c2["runs"] == 1
    [port] = c2["ports"]
    assert port["transmit_bytes"] == pytest.approx(js.C2_IB_BYTES_PER_S * life, rel=DIGITS)
    # 30 % busy with no other job on c2 to compare with: no low-utilization note (c1's
    # jobs, 80-90 % busy, would have raised one); the straggler alert is c2's
    notes = {n["code"]: n for n in c2["notes"]}
    assert set(notes) == {"straggler"} and "n1/2 (thermal)" in notes["straggler"]["text"]
    c1 = _json(url, "4800", "--cluster", "c1")
    assert (c1["user"], sorted(_gpus(c1))) == ("carol", [("n2", str(g)) for g in range(4, 8)])
    assert c1["end"] - c1["start"] == pytest.approx(js.JOB_C1.end - js.JOB_C1.start, abs=0.01)
    [node] = c1["nodes"]
    assert (node["method"], node["gpus_held"], node["gpus_total"]) == ("gpu-share", 4, 8)
    assert node["node_energy_joules"] == pytest.approx(4000 * 900, rel=DIGITS)
    # c2's straggler alert for its own 4800 fired during this one's life: not this job's
    assert {n["code"] for n in c1["notes"]} == {"low-utilization", "small-memory"}


def test_a_cluster_that_did_not_run_the_job(prometheus: tuple[str, float], tmp_path: Path) -> None:
    url = prometheus[0]
    other = _job("4711", "--prometheus", url, "--cluster", "c2")
    assert other.returncode == 3 and other.stderr.count("\n") == 1
    assert "job 4711 of cluster c2 held no GPU" in other.stderr
    store = f"dir:{tmp_path / 'jobs'}"
    kept = _job("4800", "--prometheus", url, "--cluster", "c2", "--store", "--job-store", store)
    assert kept.returncode == 0, kept.stderr
    wrong = _job("4800", "--job-store", store, "--cluster", "c1")
    assert wrong.returncode == 3 and wrong.stderr.count("\n") == 1
    assert "of cluster 'c2', not of 'c1'" in wrong.stderr
    right = _job("4800", "--job-store", store, "--cluster", "c2", "--format", "json")
    assert right.returncode == 0 and json.loads(right.stdout)["user"] == "dave"


def test_a_requeued_job_is_summarised_from_its_last_run(prometheus: tuple[str, float]) -> None:
    """Job 4900 ran on n2's GPUs 4-7, was requeued, and ran again an hour later on n1's
    GPUs 0-1 (n2's agent reported its GPUs in between): its summary is of that last
    run, as sacct shows it, and says so; not of the span with 4711's hour inside."""
    url, first = prometheus
    data = _json(url, "4900")
    assert data["start"] == pytest.approx(first + js.JOB_R2.start, abs=0.01)
    assert data["end"] == pytest.approx(first + js.JOB_R2.end, abs=0.01)
    assert (data["runs"], data["user"]) == (2, "erin")
    life = js.JOB_R2.end - js.JOB_R2.start  # 600 s
    gpus = _gpus(data)
    assert sorted(gpus) == [("n1", "0"), ("n1", "1")]
    for row in gpus.values():
        assert row["utilization"] == pytest.approx(0.9, rel=DIGITS)
        assert row["energy_joules"] == pytest.approx(300 * life, rel=DIGITS)
    # 4711 had let n1 go: the whole node's 5 kW over the run is this job's
    [node] = data["nodes"]
    assert (node["method"], node["gpus_held"], node["gpus_total"]) == ("exclusive", 2, 8)
    assert node["node_energy_joules"] == pytest.approx(5000 * life, rel=DIGITS)
    text = _job("4900", "--prometheus", url).stdout
    assert "(600 s, the last of 2 runs: requeued), 2 GPUs on 1 node(s)" in text


@pytest.mark.parametrize("lookback_s", [30 * 86400.0, 7000.0])
def test_a_job_summarised_as_it_ends_keeps_its_last_samples(
    prometheus: tuple[str, float], lookback_s: float
) -> None:
    """The slurmctld epilog asks a second after the job's last sample. The range
    queries' grids end on that moment: one stepped on from the lookback's start stops up
    to a step short of it and lost the job's last samples (here 4900's last 15 s; a job
    shorter than a step, all of them). 7000 s is no whole number of 15 s steps."""
    url, first = prometheus
    client = PrometheusClient(Connection(url=url, url_flag="--prometheus"))
    now = first + js.JOB_R2.end + 1
    life = find_life(client, load(None), "4900", now, lookback_s)
    assert life.start == pytest.approx(first + js.JOB_R2.start, abs=0.01)
    assert life.end == pytest.approx(first + js.JOB_R2.end, abs=0.01)
    assert life.gpus == (("n1", "0"), ("n1", "1"))
