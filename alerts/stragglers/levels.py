"""Recording rules in the order their inputs exist: a rule reading another rule's series
comes one level after it.

Prometheus evaluates a group's rules in order, so at each evaluation a rule already sees
what the rules before it recorded at that same instant. promtool's rule backfill
(`tsdb create-blocks-from rules`) evaluates every rule against the server's data alone;
evaluated level by level, each level backfilled into the server before the next is, the
rules see at each instant exactly what the live server would have shown them.
"""

from __future__ import annotations

from collections.abc import Sequence

from nvwatch.alerts.backfill import SERIES_NAME
from nvwatch.alerts.recording import RecordingRule


def references(expr: str, recorded: set[str]) -> set[str]:
    """The recorded series `expr` selects."""
    return {match.group() for match in SERIES_NAME.finditer(expr)} & recorded


def rule_levels(rules: Sequence[RecordingRule]) -> list[list[RecordingRule]]:
    """`rules` in levels: every rule of a level reads only series of earlier levels (or
    raw ones). ValueError on a cycle."""
    recorded = {rule.record for rule in rules}
    needs = {rule.record: references(rule.expr, recorded) - {rule.record} for rule in rules}
    done: set[str] = set()
    levels: list[list[RecordingRule]] = []
    remaining = list(rules)
    while remaining:
        ready = [rule for rule in remaining if needs[rule.record] <= done]
        if not ready:
            names = ", ".join(sorted(rule.record for rule in remaining))
            raise ValueError(f"recording rules read each other in a cycle: {names}")
        levels.append(ready)
        done |= {rule.record for rule in ready}
        remaining = [rule for rule in remaining if rule.record not in done]
    return levels
