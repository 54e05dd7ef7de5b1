"""NaN-aware reductions that stay quiet on empty input (numpy warns on all-NaN slices)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable

import numpy as np

from nvwatch.report.frame import Array


def _values(values: Array | Iterable[float]) -> Array:
    array = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    present: Array = array[~np.isnan(array)]
    return present


def mean(values: Array | Iterable[float]) -> float:
    present = _values(values)
    return float(present.mean()) if present.size else float("nan")


def peak(values: Array | Iterable[float]) -> float:
    present = _values(values)
    return float(present.max()) if present.size else float("nan")


def lowest(values: Array | Iterable[float]) -> float:
    present = _values(values)
    return float(present.min()) if present.size else float("nan")


def percentile(values: Array | Iterable[float], q: float) -> float:
    present = _values(values)
    return float(np.percentile(present, q)) if present.size else float("nan")


def row_means(values: Array) -> Array:
    """Mean of each row, NaN for a row without values."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result: Array = np.nanmean(values, axis=1) if values.size else np.zeros(0)
    return result


def column_sums(rows: list[Array], steps: int) -> Array:
    """Sum of rows per step; NaN only where every row is NaN."""
    if not rows:
        return np.full(steps, np.nan)
    stacked = np.stack(rows)
    total: Array = np.nansum(stacked, axis=0)
    total[np.all(np.isnan(stacked), axis=0)] = np.nan
    return total


def column_max(rows: list[Array], steps: int) -> Array:
    """Largest of rows per step; NaN only where every row is NaN."""
    if not rows:
        return np.full(steps, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result: Array = np.nanmax(np.stack(rows), axis=0)
    return result
