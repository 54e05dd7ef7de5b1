"""Static readings: values fixed while the driver is loaded, kept between slow re-reads.

Limits, thresholds, maxima, the supported clock-event mask (reads.py), identity
(source.py) and NVLink far ends (nvlink.py) change only with a driver reload, a board
swap, recabling or an administrator's setting: reading them every poll would cost NVML
calls (ioctls) for nothing, so they are read until answered and again every
STATIC_REFRESH_S. The enforced power limit is not static (power capping moves it).
"""

from __future__ import annotations

from collections.abc import Callable

#: How long a static reading (limits, thresholds, maxima) is kept before it is read
#: again: they change only with a driver reload or an administrator's setting, so a
#: slow refresh costs next to nothing and still catches e.g. a new default limit.
STATIC_REFRESH_S = 600.0


class Kept:
    """Static readings (limits, thresholds, maxima): read until answered, then kept and
    read again every STATIC_REFRESH_S, so they cost no NVML call on most polls. A refresh
    that fails keeps the last answer (a series must not vanish for a missed re-read)."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[float, float]] = {}  # key -> (value, read at)
        self.now = 0.0  # the poll's clock, set by the source before each poll

    def get(self, key: str, read: Callable[[], float | None]) -> float | None:
        kept = self._values.get(key)
        if kept is not None and self.now - kept[1] < STATIC_REFRESH_S:
            return kept[0]
        value = read()
        if value is None:
            if kept is None:
                return None
            value = kept[0]
        self._values[key] = (value, self.now)
        return value
