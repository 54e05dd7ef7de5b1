"""Injectable time for the simulators: tests drive a ManualClock, the agent uses real time."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def __call__(self) -> float:
        """Seconds on a monotonic scale."""
        ...


class ManualClock:
    """A clock that moves only when told to; deterministic tests advance it by hand."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not run backwards")
        with self._lock:
            self._now += seconds


def real_clock() -> float:
    return time.monotonic()


class ScaledClock:
    """Real time run `scale` times faster from the moment it is made (`simulate exec
    --time-scale`): a fault 30 simulated seconds in shows after 30/scale real ones."""

    def __init__(self, scale: float) -> None:
        if scale <= 0:
            raise ValueError("time scale must be greater than zero")
        self.scale = scale
        self._origin = time.monotonic()

    def __call__(self) -> float:
        return self._origin + (time.monotonic() - self._origin) * self.scale
