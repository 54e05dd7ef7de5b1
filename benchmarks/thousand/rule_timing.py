"""Reading each rule group's evaluation time from the engine, group by group at its own
interval: the mixin's groups run every minute, the report's every `report_interval`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from benchmarks.scale import measure as m
from nvwatch.alerts import chains
from nvwatch.common.durations import parse_duration

# the engine figures' `rules_read` for groups read by `settled_readings` (a run before
# them read the groups in the engine's first minutes only)
SETTLED = "settled"
SLACK_S = 90.0  # past an interval, how long a group may be late
POLL_S = 2.0
# the clock the waits read, and how they wait (a test runs them on its own clock)
now = time.monotonic
pause = time.sleep


def _groups(rule_files: list[Path]) -> Iterator[tuple[dict[str, Any], float]]:
    """Every group of the rule files, with its evaluation interval (the global minute
    where it names none)."""
    for path in rule_files:
        for group in yaml.safe_load(path.read_text())["groups"]:
            yield group, parse_duration(group.get("interval", "1m"))


def rule_groups(rule_files: list[Path]) -> dict[str, float]:
    """Every group's name, with its evaluation interval."""
    return {group["name"]: seconds for group, seconds in _groups(rule_files)}


def recorded_intervals(rule_files: list[Path]) -> dict[str, float]:
    """Each recorded series' name, with the interval its group records it at."""
    return {
        rule["record"]: seconds
        for group, seconds in _groups(rule_files)
        for rule in group["rules"]
        if "record" in rule
    }


def chain_depths(rule_files: list[Path]) -> dict[str, int]:
    """Each group's chain under vmalert (nvwatch.alerts.chains): a group's series of
    depth n are recorded from its n-th evaluation on."""
    return chains.chain_depths([group for group, _ in _groups(rule_files)])


def chained_through(url: str, iterations: str, depths: dict[str, int],
                    interval_s: float) -> float:  # fmt: skip
    """Seconds until the engine's `iterations` counter (vmalert's counts an evaluation
    as it ends) reads, for each group, as many evaluations as its chain is deep
    (`chain_depths`), the groups evaluated every `interval_s`; an error past that many
    intervals and some slack."""
    began = now()
    deadline = began + interval_s * max(depths.values(), default=0) + SLACK_S
    while True:
        done = _iterations(url, iterations, list(depths))
        short = {g: f"{done[g]:g} of {d}" for g, d in depths.items() if done[g] < d}
        if not short:
            return now() - began
        if now() > deadline:
            raise RuntimeError(f"{url}: rule groups not evaluated as often as they chain: {short}")
        pause(POLL_S)


def _most_frequent(groups: dict[str, float]) -> tuple[float, list[str]]:
    """The shortest interval of `groups`, and the groups evaluated at it."""
    shortest = min(groups.values())
    return shortest, [g for g, seconds in groups.items() if seconds == shortest]


def rule_readings(
    url: str,
    iterations: str,
    read: Callable[[], dict[str, float]],
    groups: dict[str, float],
    count: int,
) -> list[dict[str, float]]:
    """`count` readings of every group's evaluation time, one after each evaluation of
    the groups of the shortest interval (the engine's own `iterations` counter, by
    group), then one more once every group has been evaluated; a reading holds only
    the groups with an evaluation ended by then (a group not yet run reads 0)."""
    shortest, frequent = _most_frequent(groups)
    deadline = now() + shortest * (count + 1) + max(groups.values()) + SLACK_S
    readings = []
    for done in range(1, count + 2):
        wanted, times = (frequent, done) if done <= count else (list(groups), 1)
        while not _evaluated(url, iterations, wanted, times, read if done > count else None):
            if now() > deadline:
                raise RuntimeError(f"{url}: rule groups not evaluated {done} times in time")
            pause(POLL_S)
        evaluated = _iterations(url, iterations, list(groups))
        # a duration of 0: the group's first evaluation has begun, not ended
        readings.append({g: s for g, s in read().items() if evaluated.get(g, 0.0) >= 1 and s > 0})
    return readings


def settled_readings(
    url: str,
    iterations: str,
    read: Callable[[], dict[str, float]],
    groups: dict[str, float],
    count: int,
    settle: Callable[[], None] | None = None,
) -> list[dict[str, float]]:
    """`count` readings of the groups of the shortest interval once the engine's other
    work is done (imports, merges, the panels, the report): each after one more of
    their evaluations, every one begun after this call, so that none shares the cores
    with that work. The evaluation running at the call is let end first (Prometheus
    counts an evaluation as it begins, vmalert as it ends: either way, those after the
    next count began after the call); `settle` is called then, for a reading of means
    (vmalert's) to start its window there."""
    shortest, frequent = _most_frequent(groups)
    base = _iterations(url, iterations, frequent)
    deadline = now() + shortest * (count + 2) + SLACK_S
    readings = []
    for done in range(1, count + 2):
        while any(n < base[g] + done for g, n in _iterations(url, iterations, frequent).items()):
            if now() > deadline:
                raise RuntimeError(f"{url}: rule groups not evaluated {done} more times in time")
            pause(POLL_S)
        if done == 1:
            if settle is not None:
                settle()
            continue
        readings.append({g: s for g, s in read().items() if g in frequent and s > 0})
    return readings


def with_slower(settled: list[dict[str, float]],
                first: list[dict[str, float]]) -> list[dict[str, float]]:  # fmt: skip
    """The settled readings of the groups of the shortest interval, and the readings at
    the engine's start of the slower groups (the report's, every few minutes: a settled
    reading of them would cost two of their intervals)."""
    frequent = {g for reading in settled for g in reading}
    slower = [{g: s for g, s in reading.items() if g not in frequent} for reading in first]
    return [*settled, *slower]


def _evaluated(
    url: str,
    iterations: str,
    groups: list[str],
    times: int,
    read: Callable[[], dict[str, float]] | None,
) -> bool:
    """Whether each of `groups` began `times` evaluations and, with `read`, has a
    duration: Prometheus counts an iteration as it begins, and a long group's first
    duration is there only once that evaluation has ended."""
    if min(_iterations(url, iterations, groups).values()) < times:
        return False
    if read is None:
        return True
    durations = read()
    return all(durations.get(g, 0.0) > 0 for g in groups)


def _iterations(url: str, family: str, groups: list[str]) -> dict[str, float]:
    counts: dict[str, float] = {}
    for labels, value in m.scrape_metrics(url).get(family, []):
        group = labels.get("rule_group", labels.get("group", "")).rsplit(";", 1)[-1]
        counts[group] = counts.get(group, 0.0) + value
    return {g: counts.get(g, 0.0) for g in groups}
