"""Scoring the straggler alert against a corpus's truth.

The alert's expression is evaluated at the rules' evaluation interval over each episode
(a query_range). A series fires, as Prometheus' `for:` makes it, once it has been
returned at every evaluation for `for_s`: from its first evaluation of an unbroken run,
`for_s` later. A fired series is a true positive when its episode expects an alert and
it names the culprit (instance and gpu, or instance and device/port, or the instance
alone for a host) with the expected cause; any other fired series is a false alert, and
an episode that expects an alert and gets no true positive is a miss. Time to detect is
from the moment the rules could first see the straggler, its onset or the end of the
job's warm-up (`warmup_s` after the episode starts, during which the rules judge no job
by design), whichever is later, to the first true positive's firing.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# magnitude bands (slowdown=) the tables are split by, lower bound included
BANDS = ((0.05, 0.10), (0.10, 0.20), (0.20, 0.40), (0.40, 0.60))


@dataclass(frozen=True)
class Evaluated:
    """One series of the alert's expression: its labels and the evaluation times it was
    returned at, ascending."""

    labels: Mapping[str, str]
    times: Sequence[float]


def fired_at(times: Sequence[float], interval: float, for_s: float) -> float | None:
    """When a series returned at `times` first fires under `for:` (None: never)."""
    run_start: float | None = None
    previous: float | None = None
    for t in times:
        # a missed evaluation breaks the run (half an interval's slack for float steps)
        if previous is None or t - previous > 1.5 * interval:
            run_start = t
        previous = t
        assert run_start is not None
        if t - run_start >= for_s:
            return t
    return None


def names_culprit(labels: Mapping[str, str], episode: Mapping[str, Any]) -> bool:
    culprit = episode.get("culprit")
    if not episode.get("alert_expected") or not culprit:
        return False
    if labels.get("job_id") != episode["job_id"] or labels.get("cause") != episode["cause"]:
        return False
    if labels.get("instance") != culprit["instance"]:
        return False
    if culprit.get("gpu") is not None:
        return bool(labels.get("gpu") == culprit["gpu"])
    if culprit.get("device") is not None:
        return bool(
            labels.get("device") == culprit["device"] and labels.get("port") == culprit["port"]
        )
    return not labels.get("gpu") and not labels.get("device")


# the slowdowns that cost a job most: their recall has a goal of its own
LARGE_SLOWDOWN = 0.20


def band_of(magnitude: float) -> str:
    for low, high in BANDS:
        if low <= magnitude < high or (high == BANDS[-1][1] and magnitude == high):
            return f"{round(low * 100)}-{round(high * 100)}%"
    if magnitude > BANDS[-1][1]:  # a port trained down: a fixed share of its rate
        return f"over {round(BANDS[-1][1] * 100)}%"
    return "other"


@dataclass
class Tally:
    true_positives: int = 0
    false_alerts: int = 0
    misses: int = 0
    detect_seconds: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        tp, fp, fn = self.true_positives, self.false_alerts, self.misses
        precision = tp / (tp + fp) if tp + fp else None
        recall = tp / (tp + fn) if tp + fn else None
        f1 = None
        if precision is not None and recall is not None and precision + recall > 0:
            f1 = 2 * precision * recall / (precision + recall)
        median = statistics.median(self.detect_seconds) if self.detect_seconds else None
        return {
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "true_positives": tp,
            "false_alerts": fp,
            "misses": fn,
            "median_detect_seconds": median,
        }


@dataclass
class Score:
    overall: Tally = field(default_factory=Tally)
    by_cause: dict[str, Tally] = field(default_factory=dict)
    by_band: dict[str, Tally] = field(default_factory=dict)
    large: Tally = field(default_factory=Tally)  # slowdowns of LARGE_SLOWDOWN or more
    false_alerts_on_healthy: int = 0  # fired on an episode that expects none

    def to_json(self) -> dict[str, Any]:
        top = self.overall.summary()
        return {
            "precision": top["precision"],
            "recall": top["recall"],
            "f1": top["f1"],
            "false_alerts_on_healthy": self.false_alerts_on_healthy,
            "median_detect_seconds": top["median_detect_seconds"],
            "overall": top,
            "by_cause": {k: v.summary() for k, v in sorted(self.by_cause.items())},
            "by_band": {k: v.summary() for k, v in sorted(self.by_band.items())},
        }


def score(
    episodes: Sequence[Mapping[str, Any]],
    evaluated: Mapping[str, Sequence[Evaluated]],
    *,
    interval: float,
    for_s: float,
    warmup_s: float = 0.0,
) -> Score:
    """`evaluated`: per episode job_id, the alert expression's series over the episode."""
    result = Score()
    for episode in episodes:
        fired = [
            (when, series.labels)
            for series in evaluated.get(episode["job_id"], ())
            if (when := fired_at(series.times, interval, for_s)) is not None
        ]
        tallies = [result.overall]
        if episode.get("alert_expected"):
            tallies.append(result.by_cause.setdefault(episode["cause"], Tally()))
            tallies.append(result.by_band.setdefault(band_of(episode["magnitude"]), Tally()))
            if episode["magnitude"] >= LARGE_SLOWDOWN:
                tallies.append(result.large)
        hits = sorted(when for when, labels in fired if names_culprit(labels, episode))
        false = sum(1 for _, labels in fired if not names_culprit(labels, episode))
        if not episode.get("alert_expected"):
            result.false_alerts_on_healthy += false
        for tally in tallies:
            tally.false_alerts += false
            if hits:
                tally.true_positives += 1
                visible = max(float(episode["onset"]), float(episode["start"]) + warmup_s)
                tally.detect_seconds.append(hits[0] - visible)
            elif episode.get("alert_expected"):
                tally.misses += 1
    return result
