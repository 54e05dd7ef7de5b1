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


class SteppedClock:
    """Simulated seconds that move only on `step()`, `scale` times as fast as real time.

    A simulated fleet's one ticker steps it once per interval: between steps every NVML
    call of every node reads the same settled time, so a poll's hundreds of calls do not
    each integrate the physics again. With `running=False` simulated time holds still
    until `run()`: a test starts the fleet and its Prometheus first, so the faults begin
    under a scraping Prometheus.
    """

    def __init__(self, scale: float = 1.0, *, running: bool = True) -> None:
        if scale <= 0:
            raise ValueError("time scale must be positive")
        self.scale = scale
        self._now = time.monotonic()
        self._base = self._now
        self._since: float | None = time.monotonic() if running else None
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def run(self) -> None:
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()

    def step(self) -> float:
        with self._lock:
            if self._since is not None:
                self._now = self._base + (time.monotonic() - self._since) * self.scale
            return self._now

    def set_scale(self, scale: float) -> None:
        """From now on run `scale` times as fast as real time; the time already run stays.

        A preview runs a fault's slow minutes at 10x, then real time, so the rates a
        picture shows are what hardware can do (a counter's rate at 10x is ten times it).
        """
        if scale <= 0:
            raise ValueError("time scale must be positive")
        with self._lock:
            if self._since is not None:
                now = time.monotonic()
                self._now = self._base + (now - self._since) * self.scale
                self._base, self._since = self._now, now
            self.scale = scale
