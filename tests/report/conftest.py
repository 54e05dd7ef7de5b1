"""A real Prometheus serving the synthetic history, backfilled with promtool, and a report of it.

Session-scoped: the backfill (promtool over 21 days) and the report run once for every
test that reads them. Every process started here is stopped in a finally.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from tests.conftest import require_tool
from tests.prometheus_on_blocks import prometheus_on
from tests.report import synthetic, synthetic_queue

HOST = "127.0.0.1"
EXAMPLE_CONFIG = Path(__file__).parents[2] / "deploy" / "mixin.example.yaml"


@dataclass(frozen=True)
class Backfill:
    tsdb: Path
    history: synthetic.History
    queue: synthetic_queue.Queue


@dataclass(frozen=True)
class SyntheticReport:
    out: Path
    data: dict[str, Any]
    url: str
    stderr: str

    def section(self, key: str) -> dict[str, Any]:
        section: dict[str, Any] = self.data["sections"][key]
        return section

    def table(self, section: str, name: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.section(section)["tables"][name]["rows"]
        return rows

    def number(self, section: str, name: str) -> float:
        value = self.section(section)["numbers"][name]["value"]
        assert value is not None, f"{section}.{name} is null"
        return float(value)


@pytest.fixture(scope="session")
def backfill(tmp_path_factory: pytest.TempPathFactory) -> Backfill:
    work = tmp_path_factory.mktemp("backfill")
    history = synthetic.build()
    queue = synthetic_queue.build_queue()
    synthetic_queue.add_scheduler_series(history, queue)
    tsdb = work / "tsdb"
    write_blocks(history, work, tsdb)
    return Backfill(tsdb, history, queue)


def write_blocks(history: synthetic.History, work: Path, tsdb: Path, shift: float = 0.0) -> None:
    """The history's samples, `shift` seconds later, as promtool's blocks in `tsdb`."""
    openmetrics = work / "history.om"
    synthetic.write_openmetrics(history, openmetrics, shift)
    subprocess.run(
        [
            require_tool("promtool"),
            "tsdb",
            "create-blocks-from",
            # one block for the whole range: promtool reads its input once per block,
            # and 2 h blocks would read these 80 MB 252 times
            f"--max-block-duration={synthetic.DAYS * 24 + 48}h",
            "openmetrics",
            "--quiet",
            str(openmetrics),
            str(tsdb),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    openmetrics.unlink()


@pytest.fixture(scope="session")
def synthetic_prometheus(
    backfill: Backfill, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with prometheus_on(backfill.tsdb, tmp_path_factory.mktemp("prometheus")) as url:
        yield url


def report_args(url: str, out: Path, *extra: str) -> list[str]:
    return [
        "report",
        "--prometheus",
        url,
        "--range",
        f"{synthetic.DAYS}d",
        "--end",
        str(int(synthetic.END)),
        "--config",
        str(EXAMPLE_CONFIG),
        "--out",
        str(out),
        *extra,
    ]


def _rule_blocks(url: str, work: Path, *groups: str) -> Path:
    """`groups` over the synthetic history at `url`, backfilled as the README's flow
    makes them (`nvwatch alerts backfill-rules`, promtool's rule backfill): a folder of
    blocks for a server's data directory."""
    from tests.history.backfill import backfill_recording_rules

    blocks = work / "blocks"
    blocks.mkdir()
    backfill_recording_rules(
        url,
        blocks,
        work,
        start=synthetic.START,
        end=synthetic.END,
        step=synthetic.INTERVAL,
        config=EXAMPLE_CONFIG,
        only_groups=groups,
    )
    return blocks


@pytest.fixture(scope="session")
def report_rule_blocks(synthetic_prometheus: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The agents' report rules (GPUs, links, ports) over the synthetic history."""
    from nvwatch.alerts.recording_report import FABRIC_GROUP, GPU_GROUP

    work = tmp_path_factory.mktemp("report-rules")
    return _rule_blocks(synthetic_prometheus, work, GPU_GROUP, FABRIC_GROUP)


@pytest.fixture(scope="session")
def bmc_rule_blocks(synthetic_prometheus: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The BMCs' report rules over the synthetic history."""
    from nvwatch.alerts.recording_report_bmc import BMC_GROUP

    return _rule_blocks(synthetic_prometheus, tmp_path_factory.mktemp("bmc-rules"), BMC_GROUP)


def link_blocks(source: Path, tsdb: Path) -> None:
    """`source`'s blocks into the data directory `tsdb`, shared by hard links: a block is
    never written again."""
    for block in source.iterdir():
        if (block / "meta.json").is_file():
            shutil.copytree(block, tsdb / block.name, copy_function=os.link)


@contextlib.contextmanager
def serving(work: Path, *sources: Path) -> Iterator[str]:
    """One server on the blocks of every folder of `sources`."""
    tsdb = work / "tsdb"
    tsdb.mkdir()
    for source in sources:
        link_blocks(source, tsdb)
    with prometheus_on(tsdb, work / "prometheus") as url:
        yield url


@pytest.fixture(scope="session")
def recorded_url(
    backfill: Backfill,
    report_rule_blocks: Path,
    bmc_rule_blocks: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The synthetic history and its report rules' series: one server with every sample."""
    work = tmp_path_factory.mktemp("recorded")
    with serving(work, backfill.tsdb, report_rule_blocks, bmc_rule_blocks) as url:
        yield url


@pytest.fixture(scope="session")
def synthetic_report(
    synthetic_prometheus: str, tmp_path_factory: pytest.TempPathFactory
) -> SyntheticReport:
    out = tmp_path_factory.mktemp("report")
    result = CliRunner().invoke(cli, report_args(synthetic_prometheus, out), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "report.json").read_text())
    return SyntheticReport(out, data, synthetic_prometheus, result.stderr)


@contextlib.contextmanager
def report_json(url: str, out: Path, *extra: str) -> Iterator[tuple[dict[str, Any], str]]:
    """`nvwatch report` of the synthetic range at `url`: report.json and stderr."""
    result = CliRunner().invoke(cli, report_args(url, out, *extra), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    yield json.loads((out / "report.json").read_text()), result.stderr
