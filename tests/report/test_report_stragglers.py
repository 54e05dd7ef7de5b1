"""The report's Stragglers section against a small history written by hand: ALERTS as the
rule manager writes them (pending, then firing), the jobs' allocations, and the straggler
rules' series of each job (its whole GPUs, its slowdown), one sample a minute, backfilled
with promtool into a real Prometheus.

Every expected figure is worked out below from what the history says, not from the code:

    job 101: 16 GPUs (n3 0-3, n4 0-7, n5 0-3), slowdown 0.25 while flagged
             thermal on n3 GPU 5, firing minutes 60-180; power-capped on n4 GPU 2,
             firing 120-180 (the two overlap: the job is slowed 2 h, not 3)
             -> 16 x 2 h = 32 GPU-hours slowed, x 0.25 = 8 lost
    job 102: 8 GPUs (n3 4-7, n5 4-7), power-capped on n3 GPU 6, firing 150-240, slowdown
             0.10 -> 8 x 1.5 h = 12 slowed, 1.2 lost
    job 103: 8 whole GPUs on n1 (and a MIG instance elsewhere, not a whole GPU), host-cpu
             on n1, firing 240-300, slowdown 0.5 -> 8 x 1 h = 8 slowed, 4 lost
    job 104: 8 GPUs on n2, a thermal alert that stayed pending -> not slowed

    by cause: thermal 32 / 8 (1 job); power-capped 101's hour on n4 (16 / 4) and 102
    (12 / 1.2): 28 / 5.2 (2 jobs); host-cpu 8 / 4 (1 job)
    by node: n3 thermal 101 (32 / 8) and power-capped 102 (12 / 1.2): 44 / 9.2, 2 jobs;
    n4 16 / 4; n1 8 / 4; totals 52 slowed, 13.2 lost, 3 jobs.

The slowdown series is recorded all the time, at other values outside the alerts, so a
figure that read it outside the firing minutes would come out different.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvwatch.common.http_connection import Connection
from nvwatch.mixin.config import MixinConfig
from nvwatch.report.context import Context
from nvwatch.report.fetch import fetch_all
from nvwatch.report.model import Report, Section
from nvwatch.report.output import write_report
from nvwatch.report.prom import PrometheusClient
from nvwatch.report.queries import build_queries
from nvwatch.report.queries_straggler import straggler_queries
from nvwatch.report.sections.stragglers import ACTIONS, stragglers
from nvwatch.report.summary import executive_summary
from nvwatch.report.window import make_window
from tests.history.backfill import backfill, serve_tsdb

END = 1_793_491_200.0  # 2026-11-01T00:00:00Z: a whole hour
START = END - 6 * 3600.0  # the report's window: minutes 0-360
FIRST_MINUTE = -120  # data from two hours before it: a window without any alert
CLUSTER = "c1"
# within each minute, where the scrape and the rule groups write (never on a step's edge)
ALLOCATION_OFFSET, RECORDING_OFFSET, ALERT_OFFSET = 11.0, 5.0, 17.0
SLOWDOWN = "job:nvwatch_straggler_slowdown:ratio"
RANKS = "job:nvwatch_straggler_ranks:count"


@dataclass(frozen=True)
class Series:
    family: str
    labels: dict[str, str]
    samples: list[tuple[float, float]]  # (unix seconds, value), in time order


def _minutes(first: int, last: int, offset: float) -> list[float]:
    """Sample times of minutes first..last-1 of the window."""
    return [START + minute * 60.0 + offset for minute in range(first, last)]


def _allocations(job: str, gpus: dict[str, range], first: int, last: int) -> list[Series]:
    return [
        Series(
            "nvwatch_gpu_allocation_info",
            {
                "job": "nvwatch",
                "cluster": CLUSTER,
                "instance": node,
                "gpu": str(gpu),
                "uuid": f"GPU-{node}-{gpu}",
                "scheduler": "slurm",
                "job_id": job,
                "user": f"user{job}",
                "account": "physics",
            },
            [(t, 1.0) for t in _minutes(first, last, ALLOCATION_OFFSET)],
        )
        for node, numbers in gpus.items()
        for gpu in numbers
    ]


def _ranks(job: str, whole_gpus: int, first: int, last: int) -> Series:
    """The job's whole GPUs, as the straggler rules record them each minute it runs."""
    samples = [(t, float(whole_gpus)) for t in _minutes(first, last, RECORDING_OFFSET)]
    return Series(RANKS, {"cluster": CLUSTER, "job_id": job}, samples)


def _slowdown(job: str, *spans: tuple[int, int, float]) -> Series:
    samples = [
        (t, value) for first, last, value in spans for t in _minutes(first, last, RECORDING_OFFSET)
    ]
    return Series(SLOWDOWN, {"cluster": CLUSTER, "job_id": job}, samples)


def _alert(
    job: str, culprit: tuple[str, int | None], cause: str, pending: int, firing: int, end: int
) -> list[Series]:
    """Pending from `pending`, firing from `firing` to `end` (exclusive): two series, as
    the rule manager writes ALERTS (alertstate is a label). The culprit: (node, GPU) or
    (node, None) for its host CPUs."""
    node, gpu = culprit
    labels = {
        "alertname": "NvwatchJobStraggler",
        "severity": "warning",
        "cluster": CLUSTER,
        "job_id": job,
        "instance": node,
        "cause": cause,
        **({} if gpu is None else {"gpu": str(gpu), "uuid": f"GPU-{node}-{gpu}"}),
    }
    times = [(pending, firing, "pending"), (firing, end, "firing")]
    return [
        Series(
            "ALERTS",
            {**labels, "alertstate": state},
            [(t, 1.0) for t in _minutes(first, last, ALERT_OFFSET)],
        )
        for first, last, state in times
        if last > first
    ]


def _history() -> list[Series]:
    whole = (FIRST_MINUTE, 360)
    mig = _allocations("103", {"n6": range(1)}, *whole)[0]
    mig.labels["uuid"] = "MIG-0b5f2c4e-1d7a-5b0e-9c31-5a0f7e2d8c11"
    return [
        *_allocations("101", {"n3": range(4), "n4": range(8), "n5": range(4)}, *whole),
        *_allocations("102", {"n3": range(4, 8), "n5": range(4, 8)}, 60, 300),
        *_allocations("103", {"n1": range(8)}, *whole),
        mig,
        *_allocations("104", {"n2": range(8)}, *whole),
        _ranks("101", 16, *whole),
        _ranks("102", 8, 60, 300),
        _ranks("103", 8, *whole),  # its MIG instance is not a whole GPU
        _ranks("104", 8, *whole),
        _slowdown("101", (FIRST_MINUTE, 50, 0.05), (50, 180, 0.25), (180, 360, 0.03)),
        _slowdown("102", (70, 150, 0.02), (150, 240, 0.10), (240, 300, 0.02)),
        _slowdown("103", (FIRST_MINUTE, 240, 0.01), (240, 300, 0.5), (300, 360, 0.01)),
        _slowdown("104", (FIRST_MINUTE, 360, 0.03)),
        *_alert("101", ("n3", 5), "thermal", 50, 60, 180),
        *_alert("101", ("n4", 2), "power-capped", 110, 120, 180),
        *_alert("102", ("n3", 6), "power-capped", 140, 150, 240),
        *_alert("103", ("n1", None), "host-cpu", 230, 240, 300),
        *_alert("104", ("n2", 1), "thermal", 100, 108, 108),  # resolved while pending
        Series(
            "nvwatch_gpu_up",
            {"job": "nvwatch", "cluster": CLUSTER, "instance": "n3", "gpu": "0", "uuid": "GPU-n3-0",
             "rack": "r1", "node_class": "dgx-h100"},
            [(t, 1.0) for t in _minutes(FIRST_MINUTE, 360, ALLOCATION_OFFSET)],
        ),
    ]  # fmt: skip


def _openmetrics(series: list[Series]) -> str:
    """Families contiguous, each series in time order, as promtool reads them."""
    families: dict[str, list[Series]] = {}
    for one in series:
        families.setdefault(one.family, []).append(one)
    lines: list[str] = []
    for family, members in families.items():
        lines.append(f"# TYPE {family} gauge")
        for one in members:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(one.labels.items()))
            lines += [f"{family}{{{labels}}} {v:g} {t:.0f}" for t, v in one.samples]
    return "\n".join([*lines, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("stragglers")
    history = work / "history.om"
    history.write_text(_openmetrics(_history()), encoding="utf-8")
    backfill(history, work / "tsdb", days=1.0)
    with serve_tsdb(work / "tsdb", work, step=60.0) as url:
        yield url


def _section(url: str, range_text: str, end: float, step_text: str | None) -> Section:
    cfg = MixinConfig()
    window = make_window(range_text, str(end), step_text, end)
    gpu_up = [q for q in build_queries(cfg, window, CLUSTER) if q.name == "gpu_up"]
    queries = [*gpu_up, *straggler_queries(cfg, window, CLUSTER)]
    frames = fetch_all(PrometheusClient(Connection(url)), queries, window, None)
    return stragglers(Context(cfg, window, frames))


def _rows(section: Section, table: str, key: str) -> dict[str, dict[str, object]]:
    rows = section.as_json()["tables"][table]["rows"]
    return {str(row[key]): row for row in rows}


@pytest.mark.parametrize("step", ["1h", "15m", None])  # None: the report's own, 1 min
def test_gpu_hours_slowed_and_lost_by_cause_node_and_job(prometheus: str, step: str | None) -> None:
    section = _section(prometheus, "6h", END, step)
    assert section.coverage == 1.0
    numbers = {k: n.value for k, n in section.numbers.items()}
    assert numbers == pytest.approx(
        {"gpu_hours_slowed": 52.0, "gpu_hours_lost": 13.2, "jobs_slowed": 3, "culprit_nodes": 3}
    )
    causes = _rows(section, "by_cause", "cause")
    assert list(causes) == ["thermal", "power-capped", "host-cpu"]  # most GPU-hours first
    expected_causes = {"thermal": (32, 8, 1), "power-capped": (28, 5.2, 2), "host-cpu": (8, 4, 1)}
    for cause, (slowed, lost, jobs) in expected_causes.items():
        row = causes[cause]
        assert (row["gpu_hours_slowed"], row["gpu_hours_lost"]) == pytest.approx((slowed, lost))
        assert row["jobs"] == jobs
        assert row["mean_slowdown"] == pytest.approx(lost / slowed)
    nodes = _rows(section, "by_node", "node")
    assert list(nodes) == ["n3", "n4", "n1"]
    expected_nodes = {"n3": (44, 9.2, 2), "n4": (16, 4, 1), "n1": (8, 4, 1)}
    for node, (slowed, lost, jobs) in expected_nodes.items():
        row = nodes[node]
        assert (row["gpu_hours_slowed"], row["gpu_hours_lost"]) == pytest.approx((slowed, lost))
        assert row["jobs"] == jobs
    assert nodes["n3"]["causes"] == "power-capped, thermal"
    assert (nodes["n3"]["node_class"], nodes["n4"]["node_class"]) == ("dgx-h100", "")
    jobs = _rows(section, "jobs", "job")
    assert list(jobs) == ["101", "102", "103"]
    assert [jobs[j]["gpus"] for j in jobs] == [16, 8, 8]  # the MIG instance is no whole GPU
    assert jobs["101"]["culprits"] == "n3 GPU 5, n4 GPU 2"
    assert jobs["103"]["culprits"] == "n1 host CPUs"
    assert jobs["101"]["gpu_hours_lost"] == pytest.approx(8.0)


def test_the_summary_names_the_worst_culprit_node_and_what_to_do(
    prometheus: str, tmp_path: Path
) -> None:
    section = _section(prometheus, "6h", END, "1h")
    finding = section.findings[0]
    assert finding.startswith("Stragglers slowed 3 job(s) for 52 h of GPU time")
    assert "13.2 h lost" in finding
    # n3 slowed 32 GPU-hours for heat and 12 for power: thermal is its main cause
    assert "n3 held back the most, 2 job(s) for 44 h, mostly as thermal" in finding
    assert finding.endswith(ACTIONS["thermal"] + ".")
    summary = executive_summary([section], "6 hours")
    assert summary[0] == finding
    source = "scraped samples"
    report = Report("t", prometheus, source, CLUSTER, START, END, 3600.0, END, summary, [section])
    written = write_report(report, tmp_path)
    data = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    by_node = data["sections"]["stragglers"]["tables"]["by_node"]["rows"]
    assert by_node[0]["node"] == "n3" and by_node[0]["gpu_hours_slowed"] == pytest.approx(44)
    assert {p.name for p in written} >= {
        "stragglers_by_cause.csv",
        "stragglers_by_node.csv",
        "stragglers_jobs.csv",
    }
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "GPU-hours slowed: that time x the whole GPUs the job held" in html


def test_no_straggler_alert_is_one_line_not_an_error(prometheus: str) -> None:
    """The two hours before the window: allocations and slowdowns, no alert."""
    section = _section(prometheus, "2h", START, None)
    assert section.absent == "No straggler alert (NvwatchJobStraggler) fired in the range."
    assert section.tables == [] and section.findings == [] and section.numbers == {}
    assert executive_summary([section], "2 hours") == [
        "Nothing else needs action: the other sections found no problem."
    ]


def test_every_cause_the_alert_names_has_an_action() -> None:
    from nvwatch.alerts.rules.straggler import CAUSES

    assert set(ACTIONS) == set(CAUSES)
