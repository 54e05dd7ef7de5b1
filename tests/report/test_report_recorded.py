"""The report read from nvwatch-report-*.rules' recorded series says what it says from the
scraped samples.

The synthetic history's report rules are backfilled the way the README's flow makes
them (`nvwatch alerts backfill-rules`, promtool's rule backfill) into a copy of its
blocks, and a Prometheus serves the copy. A recorded value stands for the interval
before it, so a report step of recorded values holds the samples up to one interval
before the step's own: the same history written one scrape later is what the recorded
reads must give, query by query, series by series, step by step.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from nvwatch.alerts.recording_report import REPORT_RULES, report_reads
from nvwatch.alerts.recording_report_bmc import BMC_GROUP
from nvwatch.common.http_connection import Connection
from nvwatch.mixin.config import load
from nvwatch.report.fetch import fetch_all
from nvwatch.report.frame import Frame
from nvwatch.report.prom import PrometheusClient
from nvwatch.report.queries import build_queries
from nvwatch.report.window import make_window
from tests.prometheus_on_blocks import prometheus_on
from tests.report import synthetic
from tests.report.conftest import (
    EXAMPLE_CONFIG,
    Backfill,
    SyntheticReport,
    report_args,
    report_json,
    serving,
    write_blocks,
)

# Reads of a rate: the samples' read rates each counter over a step, the rules over
# each interval (at the backfill's 15-minute scrape, windows of two scrapes that
# overlap), and a mean of those rates is the step's rate only where the counter grows
# evenly: the synthetic fabric's traffic changes from scrape to scrape. In the window's
# first step neither read has the sample before it that the rate starts from.
RATE_TOLERANCE = 0.05
EXACT = 1e-9


@pytest.fixture(scope="module")
def one_scrape_later(backfill: Backfill, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("later")
    write_blocks(backfill.history, work, work / "tsdb", shift=synthetic.INTERVAL)
    with prometheus_on(work / "tsdb", work / "prometheus") as url:
        yield url


def test_each_recorded_read_gives_the_samples_read(
    recorded_url: str, one_scrape_later: str, synthetic_prometheus: str, backfill: Backfill
) -> None:
    """A recorded value holds the samples of the interval before its evaluation, and
    promtool evaluates a group at an offset within its interval that it draws from the
    group's name and file (as Prometheus does). The agents' samples sit on the intervals'
    edges: whatever the offset, a step of recorded values holds the samples one scrape
    before the step's own, the history one scrape later read from its samples. The
    BMCs' sit half an interval after them (synthetic.BMC_OFFSET): an offset past that
    holds each step's own samples, one before it the scrape before, as the agents'."""
    cfg = load(EXAMPLE_CONFIG)
    window = make_window(f"{synthetic.DAYS}d", str(int(synthetic.END)), None, 0.0)
    later = _frames(one_scrape_later, build_queries(cfg, window, None), window)
    same = _frames(synthetic_prometheus, build_queries(cfg, window, None), window)
    recorded = _frames(recorded_url, build_queries(cfg, window, None, recorded=True), window)
    bmc_like = same if _evaluation_offset(recorded_url) >= synthetic.BMC_OFFSET else later
    written = {
        s.family + ("_total" if s.kind == "counter" else "") for s in backfill.history.series
    }
    assert any(read.bmc for read in report_reads())
    for read in report_reads():
        frame = (bmc_like if read.bmc else later)[read.name]
        assert bool(len(frame)) == (read.metric in written), read.name
        if read.fn == "rate":
            _same_frame(
                read.name, _after_first(frame), _after_first(recorded[read.name]), RATE_TOLERANCE
            )
        else:
            _same_frame(read.name, frame, recorded[read.name], EXACT)


def test_the_report_reads_the_rules(
    recorded_url: str, synthetic_report: SyntheticReport, tmp_path: Path
) -> None:
    with report_json(recorded_url, tmp_path, "--read", "rules") as (data, stderr):
        assert data["read_from"] == f"{REPORT_RULES} (one sample per 5m)"
        assert f"read {REPORT_RULES}" in stderr
    assert data["step_seconds"] == synthetic_report.data["step_seconds"]
    assert data["sections"].keys() == synthetic_report.data["sections"].keys()


@pytest.fixture(scope="module")
def without_bmc_rules(
    backfill: Backfill, report_rule_blocks: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The history and the agents' report rules, as at a site that deployed the BMCs'
    group later."""
    with serving(tmp_path_factory.mktemp("no-bmc-rules"), backfill.tsdb, report_rule_blocks) as url:
        yield url


def test_the_bmc_figures_come_from_the_samples_where_their_rules_are_missing(
    without_bmc_rules: str, recorded_url: str, tmp_path: Path
) -> None:
    with report_json(without_bmc_rules, tmp_path / "part") as (part, stderr):
        pass
    said = part["read_from"]
    assert said.startswith(f"{REPORT_RULES} (one sample per 5m); BMC figures from the scraped")
    assert re.search(rf"\({BMC_GROUP}' series hold 0 of the \d+ BMCs at ", said), said
    assert f"read {said}" in stderr
    with report_json(recorded_url, tmp_path / "all") as (whole, _stderr):
        pass
    # the GPUs' figures are read from the same rules either way
    assert part["sections"]["utilization"] == whole["sections"]["utilization"]
    assert part["sections"].keys() == whole["sections"].keys()


def test_rules_alone_is_an_error_where_the_bmc_rules_are_missing(
    without_bmc_rules: str, tmp_path: Path
) -> None:
    result = CliRunner().invoke(cli, report_args(without_bmc_rules, tmp_path, "--read", "rules"))
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"nvwatch: error: --read rules: {BMC_GROUP}' series hold 0 of")
    assert "Traceback" not in result.output


def _evaluation_offset(url: str) -> float:
    """Where in its interval the backfill evaluated the BMCs' report group: seconds
    after the agents' scrapes."""
    at = synthetic.START + synthetic.DAY
    series = PrometheusClient(Connection(url=url)).query(
        f"instance:nvwatch_bmc_up:bmc_up[{synthetic.INTERVAL:g}s]", at
    )
    stamp = series[0][1][0][0]  # the first series' one sample in an interval: its time
    return (float(stamp) - synthetic.START) % synthetic.INTERVAL


def _frames(url: str, queries: Any, window: Any) -> dict[str, Frame]:
    return fetch_all(PrometheusClient(Connection(url=url)), queries, window, progress=None)


def _after_first(frame: Frame) -> Frame:
    return Frame(frame.labels, frame.values[:, 1:])


def _same_frame(name: str, expected: Frame, got: Frame, tolerance: float) -> None:
    assert len(got) == len(expected), name
    if not len(expected):
        return
    labels = sorted(expected.labels[0])
    rows = dict(zip(expected.keys(labels), expected.values, strict=True))
    got_rows = dict(zip(got.keys(labels), got.values, strict=True))
    assert rows.keys() == got_rows.keys(), name
    for key, row in rows.items():
        assert np.array_equal(np.isnan(row), np.isnan(got_rows[key])), f"{name} {key}"
        assert np.allclose(row, got_rows[key], rtol=tolerance, atol=1e-9, equal_nan=True), (
            f"{name} {key}: {row} != {got_rows[key]}"
        )


def test_auto_reads_the_rules_when_they_cover_the_window(recorded_url: str, tmp_path: Path) -> None:
    with report_json(recorded_url, tmp_path) as (data, _stderr):
        assert data["read_from"].startswith(REPORT_RULES)


def test_auto_reads_the_samples_where_no_rule_ran(synthetic_report: SyntheticReport) -> None:
    """The session's history has no recorded series: the report says where it read."""
    said = synthetic_report.data["read_from"]
    assert said.startswith(f"scraped samples ({REPORT_RULES}' series hold 0 of the 16 GPUs")
    assert "nvwatch alerts backfill-rules" in said
    assert html.escape(said) in (synthetic_report.out / "report.html").read_text()


def test_rules_alone_is_an_error_where_they_are_missing(
    synthetic_prometheus: str, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        cli, report_args(synthetic_prometheus, tmp_path, "--read", "rules", "--range", "2d")
    )
    assert result.exit_code == 2  # the report's documented code for a report it cannot make
    assert result.output.startswith(f"nvwatch: error: --read rules: {REPORT_RULES}' series hold")
    assert "Traceback" not in result.output
