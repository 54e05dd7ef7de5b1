"""What the straggler rules must reach on a corpus, and the evaluation as a table.

The goals: F1 of 0.93 or more overall (Minder, NSDI'25, reports 0.893 for its
machine-level detection), recall of 0.95 or more for slowdowns of 20 % or more (those
cost a job most), no alert at all on an episode that expects none (healthy jobs and the
legitimate imbalances), and half of the stragglers named within 5 minutes of when the
rules could first see them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nvwatch.alerts.stragglers.scoring import BANDS, LARGE_SLOWDOWN, Score, band_of

MIN_F1 = 0.93
MIN_RECALL_LARGE = 0.95
MAX_MEDIAN_DETECT_S = 300.0


@dataclass(frozen=True)
class Goal:
    name: str
    value: float | None
    met: bool


def goals(score: Score) -> list[Goal]:
    top = score.overall.summary()
    large = score.large.summary()
    f1, recall, detect = top["f1"], large["recall"], top["median_detect_seconds"]
    return [
        Goal(f"F1 >= {MIN_F1}", f1, f1 is not None and f1 >= MIN_F1),
        Goal(
            f"recall for slowdowns >= {LARGE_SLOWDOWN:.0%} >= {MIN_RECALL_LARGE}",
            recall,
            recall is None or recall >= MIN_RECALL_LARGE,
        ),
        Goal(
            "alerts on healthy and legitimately imbalanced episodes == 0",
            float(score.false_alerts_on_healthy),
            score.false_alerts_on_healthy == 0,
        ),
        Goal(
            f"median time to detect <= {MAX_MEDIAN_DETECT_S:.0f}s",
            detect,
            detect is not None and detect <= MAX_MEDIAN_DETECT_S,
        ),
    ]


def as_json(score: Score) -> dict[str, Any]:
    """The score's object, with each goal and whether it was met."""
    result = score.to_json()
    result["goals"] = [{"goal": g.name, "value": g.value, "met": g.met} for g in goals(score)]
    return result


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table_lines(title: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    """A Markdown table of Tally summaries (Tally.summary(), or their JSON)."""
    lines = [
        f"| {title} | precision | recall | F1 | found | missed | false alerts | median detect |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in rows.items():
        detect = s["median_detect_seconds"]
        lines.append(
            f"| {name} | {_cell(s['precision'], '.2f')} | {_cell(s['recall'], '.2f')} | "
            f"{_cell(s['f1'], '.2f')} | {s['true_positives']} | {s['misses']} | "
            f"{s['false_alerts']} | {'-' if detect is None else f'{detect:.0f}s'} |"
        )
    return lines


def band_order() -> list[str]:
    """Band names in order of magnitude."""
    return [band_of(low) for low, _ in BANDS] + [band_of(2 * BANDS[-1][1]), band_of(0.0)]


def result_lines(result: dict[str, Any]) -> list[str]:
    """An evaluation (as_json's object) as Markdown tables: overall, by cause, by
    magnitude, then the goals."""
    by_band = {band: result["by_band"][band] for band in band_order() if band in result["by_band"]}
    shown = "n/a"
    return [
        *table_lines("episodes", {"all": result["overall"]}),
        "",
        *table_lines("cause", dict(sorted(result["by_cause"].items()))),
        "",
        *table_lines("slowdown", by_band),
        "",
        f"Alerts on episodes that expect none: {result['false_alerts_on_healthy']}.",
        "",
        *(
            f"{'met   ' if g['met'] else 'MISSED'} {g['goal']}: "
            f"{shown if g['value'] is None else format(g['value'], '.3g')}"
            for g in result["goals"]
        ),
    ]


def report_lines(score: Score) -> list[str]:
    return result_lines(as_json(score))
