"""The capacity report at a global view gives the numbers of one server.

deploy/scale/prometheus-global.yml federates from each rack's Prometheus the series its
`match[]` selectors name. The global view here holds exactly those: the synthetic
history's families that a selector of the file matches, and the report rules' series
as the rack servers record them. Its report must be the one made at a server holding
every sample and the same rules' series.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from nvwatch.alerts import build as alerts_build
from nvwatch.alerts.recording_report import report_groups
from nvwatch.mixin.config import load
from tests.conftest import require_tool
from tests.prometheus_on_blocks import prometheus_on
from tests.report import synthetic
from tests.report.conftest import (
    EXAMPLE_CONFIG,
    Backfill,
    link_blocks,
    report_json,
    write_blocks,
)

GLOBAL = Path(__file__).parents[2] / "deploy" / "scale" / "prometheus-global.yml"
# `{__name__="x"}` or `{__name__=~"re"}`: the only selectors the file uses
_NAME_SELECTOR = re.compile(r'\{__name__(=~?)"([^"]+)"\}$')


def federated(name: str) -> bool:
    """Whether a series of this name is federated by the file's `match[]`."""
    for selector in _matchers():
        found = _NAME_SELECTOR.match(selector)
        assert found, f"{GLOBAL}: a selector this test cannot read: {selector}"
        op, value = found.groups()
        if (op == "=" and name == value) or (op == "=~" and re.fullmatch(value, name)):
            return True
    return False


def _matchers() -> list[str]:
    config = yaml.safe_load(GLOBAL.read_text())
    (job,) = config["scrape_configs"]
    matchers: list[str] = job["params"]["match[]"]
    return matchers


@pytest.fixture(scope="module")
def global_url(
    backfill: Backfill,
    report_rule_blocks: Path,
    bmc_rule_blocks: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    work = tmp_path_factory.mktemp("global")
    tsdb = work / "tsdb"
    kept = [s for s in backfill.history.series if federated(_name(s))]
    history = synthetic.History(series=kept)
    write_blocks(history, work, tsdb)
    link_blocks(report_rule_blocks, tsdb)
    link_blocks(bmc_rule_blocks, tsdb)
    with prometheus_on(tsdb, work / "prometheus") as url:
        yield url


def _name(series: synthetic.Series) -> str:
    return series.family + ("_total" if series.kind == "counter" else "")


def test_the_global_view_gives_one_server_s_report(
    global_url: str,
    recorded_url: str,
    backfill: Backfill,
    tmp_path: Path,
) -> None:
    names = {_name(s) for s in backfill.history.series}
    carried = {n for n in names if federated(n)}
    # the view lacks the per-GPU, per-link and per-port families
    assert "nvwatch_gpu_utilization_ratio" in names - carried
    assert "nvwatch_gpu_allocation_info" in carried
    with (
        report_json(global_url, tmp_path / "global") as (at_global, _),
        report_json(recorded_url, tmp_path / "one", "--read", "rules") as (at_one, _),
    ):
        pass
    assert at_global["read_from"] == at_one["read_from"]
    for key in ("prometheus", "generated"):
        at_global.pop(key), at_one.pop(key)
    assert at_global == at_one


def test_every_report_rule_is_federated() -> None:
    """What the rack servers record for the report reaches the global view."""
    for group in report_groups(load(EXAMPLE_CONFIG)):
        for rule in group.rules:
            assert federated(rule.record), rule.record


def _records(path: Path) -> list[str]:
    groups = yaml.safe_load(path.read_text())["groups"]
    return [rule["record"] for group in groups for rule in group["rules"]]


def test_each_recorded_series_has_one_writer(tmp_path: Path) -> None:
    """The global server evaluates the rules of the series it does not federate and no
    other: a rule it evaluated into a federated series (an owner's GPU share, read from
    the federated allocations) would write that series beside the rack's value."""
    rules = tmp_path / "rules"
    alerts_build.write(rules, load(EXAMPLE_CONFIG))
    every = _records(rules / alerts_build.PROMETHEUS_RECORDING)
    at_global = _records(rules / alerts_build.GLOBAL_RECORDING)
    assert at_global == [name for name in every if not federated(name)]
    # the roll-ups over many nodes are among them, and the owners' shares are not
    assert "cluster:nvwatch_gpu_power_watts:sum" in at_global
    assert "user:nvwatch_gpu_allocated:sum" in at_global
    assert "owner:nvwatch_gpu_allocated:share" in every
    assert "owner:nvwatch_gpu_allocated:share" not in at_global
    (config,) = yaml.safe_load(GLOBAL.read_text())["rule_files"]
    assert Path(config).name == alerts_build.GLOBAL_RECORDING


def test_prometheus_accepts_the_file(tmp_path: Path) -> None:
    """promtool checks it with the generated recording file where the file names it."""
    rules = tmp_path / "rules"
    alerts_build.write(rules, load(None))
    text = GLOBAL.read_text().replace(
        "/etc/prometheus/nvwatch/nvwatch-global-recording.yaml",
        str(rules / alerts_build.GLOBAL_RECORDING),
    )
    config = tmp_path / "prometheus-global.yml"
    config.write_text(text)
    done = subprocess.run(
        [require_tool("promtool"), "check", "config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
