"""`nvwatch alerts backfill-rules`: the recording rules as promtool backfills them.

Each rule must stand alone (promtool evaluates every rule against the server's data, so
a rule reading another rule's series would record nothing), be evaluated once per step
and rate over at least two steps; promtool evaluates the file on series sampled every
15 minutes, as `simulate history --step 15m` writes them, and finds what the live rules
record (values worked out by hand beside each). The README runs the whole flow against
a real Prometheus (tests/history/test_readme_backfill.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from nvwatch.alerts.backfill import backfill_rules, inline
from nvwatch.alerts.promql import metric_names
from nvwatch.alerts.recording import recorded_names
from nvwatch.alerts.recording_straggler import straggler_groups
from nvwatch.mixin.config import MixinConfig
from tests.conftest import require_tool

STEP_S = 900.0


def _rules(cfg: MixinConfig | None = None) -> list[dict[str, str]]:
    groups = backfill_rules(cfg or MixinConfig(), STEP_S)["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_every_rule_of_the_live_file_is_there_and_stands_alone() -> None:
    """... but the job stragglers', which judge a running job minute by minute."""
    cfg = MixinConfig()
    rules = _rules(cfg)
    live_only = {r.record for g in straggler_groups(cfg) for r in g.rules}
    assert live_only and {r["record"] for r in rules} == recorded_names(cfg) - live_only
    for rule in rules:
        assert not metric_names(rule["expr"]) & recorded_names(cfg), rule


def test_every_group_runs_once_per_step_and_rates_span_two_steps() -> None:
    groups = backfill_rules(MixinConfig(), STEP_S)["groups"]
    assert {g["interval"] for g in groups} == {"15m"}
    windows = {w for r in _rules() for w in re.findall(r"\[(\w+)\]", r["expr"])}
    # and the report's reads other than rates, one step less a millisecond: each sample
    # in one of them
    assert windows == {"30m", "14m59s999ms"}
    # a window already longer than two steps stays as it is
    long = _rules(MixinConfig().with_overrides(rate_window="1h"))
    assert {w for r in long for w in re.findall(r"\[(\w+)\]", r["expr"])} == {"1h", "14m59s999ms"}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("sum(a:b:c)", "sum((x))"),
        ('sum(a:b:c{user!=""})', "sum(((x) unless on (user) vector(0)))"),
        (
            'a:b:c{user!="", account != ""}',
            "(((x) unless on (user) vector(0)) unless on (account) vector(0))",
        ),
        ('label_replace(x, "a:b:c", "", "", "")', 'label_replace(x, "a:b:c", "", "", "")'),
        ("d:e:f + 1", "((x)) + 1"),  # nested: d:e:f records a:b:c
    ],
)
def test_inline(expr: str, expected: str) -> None:
    assert inline(expr, {"a:b:c": "x", "d:e:f": "a:b:c"}) == expected


@pytest.mark.parametrize("expr", ['a:b:c{user="x"}', "rate(a:b:c[5m])", "a:b:c{user=~'.+'}"])
def test_what_cannot_be_inlined_is_refused(expr: str) -> None:
    with pytest.raises(ValueError, match="cannot inline a:b:c"):
        inline(expr, {"a:b:c": "x"})


PROMTOOL_TEST = Path(__file__).with_name("backfill_promtool.yaml")


def test_promtool_evaluates_the_file_on_15_minute_samples(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    result = CliRunner().invoke(
        cli,
        [
            "alerts",
            "backfill-rules",
            "--step",
            "15m",
            "--out",
            str(tmp_path / "backfill-rules.yaml"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert yaml.safe_load((tmp_path / "backfill-rules.yaml").read_text())["groups"]
    (tmp_path / "test.yaml").write_text(PROMTOOL_TEST.read_text())
    for args in (["check", "rules", "backfill-rules.yaml"], ["test", "rules", "test.yaml"]):
        done = subprocess.run(
            [promtool, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
