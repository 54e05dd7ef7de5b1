"""A query's series as one array: a row per series, a column per step, NaN where absent.

The analyses read these instead of Prometheus JSON: grouping, integrals and percentiles
become numpy reductions along one axis.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nvwatch.report.prom import RangeResult
from nvwatch.report.window import Window

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Frame:
    labels: list[dict[str, str]]
    values: Array  # shape (series, steps)

    @classmethod
    def empty(cls, steps: int) -> Frame:
        return cls([], np.full((0, steps), np.nan))

    @classmethod
    def from_result(cls, result: RangeResult, window: Window, single: bool = False) -> Frame:
        """Place each (time, value) at its step; `single`: one value per series, the
        largest of its points (a static query's per-day maxima)."""
        columns = 1 if single else window.steps
        values = np.full((len(result.series), columns), np.nan)
        first = window.start + window.step
        for row, (_labels, points) in enumerate(result.series):
            if not points:
                continue
            pairs = np.asarray(points, dtype=np.float64)  # parses the value strings too
            if single:
                values[row, 0] = (
                    np.nanmax(pairs[:, 1]) if np.any(~np.isnan(pairs[:, 1])) else np.nan
                )
                continue
            slots = np.rint((pairs[:, 0] - first) / window.step).astype(np.int64)
            inside = (slots >= 0) & (slots < columns)
            values[row, slots[inside]] = pairs[inside, 1]
        return cls([labels for labels, _ in result.series], values)

    def __len__(self) -> int:
        return len(self.labels)

    def keys(self, names: Sequence[str]) -> list[tuple[str, ...]]:
        return [tuple(labels.get(n, "") for n in names) for labels in self.labels]

    def by(self, names: Sequence[str]) -> dict[tuple[str, ...], Array]:
        """Rows keyed by the values of `names`; rows sharing a key are summed (NaN-aware)."""
        grouped: dict[tuple[str, ...], Array] = {}
        for key, row in zip(self.keys(names), self.values, strict=True):
            if key in grouped:
                grouped[key] = _nansum_pair(grouped[key], row)
            else:
                grouped[key] = row.copy()
        return grouped

    def select(self, keep: Iterable[bool]) -> Frame:
        mask = np.fromiter(keep, dtype=bool, count=len(self.labels))
        return Frame([lb for lb, k in zip(self.labels, mask, strict=True) if k], self.values[mask])

    def coverage(self) -> float:
        """Share of (series, step) cells with a value; NaN when there are no series."""
        return float(np.mean(~np.isnan(self.values))) if self.values.size else float("nan")


def _nansum_pair(a: Array, b: Array) -> Array:
    both_missing = np.isnan(a) & np.isnan(b)
    total: Array = np.nansum(np.stack([a, b]), axis=0)
    total[both_missing] = np.nan
    return total


def counter_events(values: Array, new_series_counts: Array | None = None) -> Array:
    """Events per step from a counter's per-step maxima (rows = series).

    Positive steps between consecutive present values are events; a drop is a reset
    (driver reload, reboot) after which the new value counts in full. `increase()` would
    miss a series' first count (an XID counter appears at 1 on the first XID), so where
    `new_series_counts[row]` is true the first present value counts as events too: the
    caller sets it for series that appear after their node was already reporting.
    """
    events = np.zeros_like(values)
    for row in range(values.shape[0]):
        present = np.flatnonzero(~np.isnan(values[row]))
        if present.size == 0:
            continue
        series = values[row, present]
        deltas = np.diff(series)
        deltas = np.where(deltas < 0, series[1:], deltas)
        events[row, present[1:]] = deltas
        if new_series_counts is not None and new_series_counts[row]:
            events[row, present[0]] = series[0]
    return events
