"""The recording rules, written for `promtool tsdb create-blocks-from rules` over a
backfilled history (`nvwatch simulate history`, or any scrape history imported late).

A backfilled history has none of the recorded series the dashboards' capacity panels
read, and promtool can make them, with three differences from the live rule file:

- promtool evaluates every rule against the server's data alone: a rule reading another
  rule's series (`cluster:...:sum` over `instance:...:sum`) would find nothing. Here such
  a series is replaced by the expression that records it, so each rule stands alone.
- Every group is evaluated once per history step: the history has one sample per step.
- Every rate window spans at least two steps: `rate(x[5m])` over samples 15 minutes
  apart finds one sample at most, and no rate.

The job straggler groups are left out: they judge a running job minute by minute (a
warm-up, 5-minute averages, an alert's `for:`), which a history sampled every step
cannot show, and their slowdown reads a recorded median over a range, which no inlined
expression can stand for.
"""

from __future__ import annotations

import re
from typing import Any

from nvwatch.alerts.recording import RecordingGroup, recording_groups
from nvwatch.alerts.recording_straggler import straggler_groups
from nvwatch.common.durations import parse_duration, prometheus_duration
from nvwatch.mixin.config import MixinConfig

# a recorded series' name (levels:metric:operations) outside strings; what follows it
SERIES_NAME = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[A-Za-z_:][A-Za-z0-9_:]*')
# `{a!="", b!=""}`: the only matchers on a recorded series that inlining can keep
_MATCHERS = re.compile(r'\s*\{((?:\s*[A-Za-z_]\w*\s*!=\s*""\s*,?)+)\s*\}')
_NOT_EMPTY = re.compile(r'([A-Za-z_]\w*)\s*!=\s*""')
# windows of at least this many steps
RATE_WINDOW_STEPS = 2


def backfill_config(cfg: MixinConfig, step_seconds: float) -> MixinConfig:
    """`cfg` evaluated once per step, with every rate window at least two steps long."""
    window = max(parse_duration(cfg.rate_window, "rate_window"), RATE_WINDOW_STEPS * step_seconds)
    report = max(parse_duration(cfg.report_interval, "report_interval"), step_seconds)
    return cfg.with_overrides(
        rate_window=prometheus_duration(window),
        evaluation_interval=prometheus_duration(step_seconds),
        report_interval=prometheus_duration(report),
    )


def inline(expr: str, recorded: dict[str, str]) -> str:
    """`expr` with every recorded series it selects replaced by its recording expression,
    until none is left. A selection `name{label!=""}` becomes
    `(expression) unless on (label) vector(0)`, which drops the same series (a missing
    label is the empty one); any other matcher, or a range, has no such form:
    ValueError (the test of the generated file says no rule of the mixin needs one)."""
    for _ in range(len(recorded) + 1):  # each pass removes one level of nesting
        replaced = _inline_once(expr, recorded)
        if replaced == expr:
            return expr
        expr = replaced
    raise ValueError(f"recording rules refer to each other in a cycle: {expr}")


def _inline_once(expr: str, recorded: dict[str, str]) -> str:
    out: list[str] = []
    last = 0
    for match in SERIES_NAME.finditer(expr):
        name = match.group()
        if name not in recorded or match.start() < last:
            continue
        end = match.end()
        rest = expr[end:]
        following = rest.lstrip()[:1]
        replacement = f"({recorded[name]})"
        if following == "{":
            block = _MATCHERS.match(rest)
            if block is None:
                raise ValueError(f"cannot inline {name} with these matchers in: {expr}")
            for label in _NOT_EMPTY.findall(block.group(1)):
                replacement = f"({replacement} unless on ({label}) vector(0))"
            end += block.end()
        elif following == "[":
            raise ValueError(f"cannot inline {name} under a range in: {expr}")
        out += [expr[last : match.start()], replacement]
        last = end
    return "".join(out) + expr[last:]


def backfilled_groups(cfg: MixinConfig) -> tuple[RecordingGroup, ...]:
    """The live file's groups but the job stragglers'."""
    live_only = {group.name for group in straggler_groups(cfg)}
    return tuple(group for group in recording_groups(cfg) if group.name not in live_only)


def backfill_rules(cfg: MixinConfig, step_seconds: float) -> dict[str, Any]:
    """The recording rule file for promtool: every group and rule of the live file but
    the job stragglers', each rule standing alone, every group's interval one step."""
    tuned = backfill_config(cfg, step_seconds)
    groups = backfilled_groups(tuned)
    recorded = {rule.record: rule.expr for group in groups for rule in group.rules}
    return {
        "groups": [
            {
                "name": group.name,
                "interval": group.interval_in(tuned),
                "rules": [
                    {"record": rule.record, "expr": inline(rule.expr, recorded)}
                    for rule in group.rules
                ],
            }
            for group in groups
        ]
    }
