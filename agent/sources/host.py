"""Host CPU, iowait, memory and load through psutil, for GPU-starvation correlation.

A GPU idling while the host spends its time in iowait points at the input pipeline, not
the GPU; these few host series sit beside the GPU series so one query can say so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class HostSample:
    cpu_utilization_ratio: float | None  # None on the first poll: no interval to measure yet
    cpu_iowait_ratio: float | None  # None where the OS has no iowait (non-Linux)
    memory_used_bytes: int
    memory_total_bytes: int
    load1: float


class HostSource:
    name = "host"

    def __init__(self, cpu_times: Callable[[], Any] | None = None) -> None:
        """`cpu_times`: cumulative CPU times with psutil.cpu_times()'s fields, read
        instead of psutil's (a simulated fleet node passes its own host's)."""
        self._previous: object | None = None
        self._cpu_times = cpu_times

    def collect(self) -> HostSample:
        # Ratios over the poll interval (the difference of two cumulative readings), not
        # psutil's "since last call" globals, so two HostSources never disturb each other.
        times = psutil.cpu_times() if self._cpu_times is None else self._cpu_times()
        previous, self._previous = self._previous, times
        utilization, iowait = _ratios(previous, times)
        memory = psutil.virtual_memory()
        return HostSample(
            cpu_utilization_ratio=utilization,
            cpu_iowait_ratio=iowait,
            memory_used_bytes=int(memory.total - memory.available),
            memory_total_bytes=int(memory.total),
            load1=float(psutil.getloadavg()[0]),
        )

    def close(self) -> None:
        self._previous = None


def _ratios(previous: object | None, current: object) -> tuple[float | None, float | None]:
    if previous is None:
        return None, None
    fields = current._fields  # type: ignore[attr-defined]
    deltas = {f: max(0.0, getattr(current, f) - getattr(previous, f)) for f in fields}
    # guest time is already counted in user on Linux; summing it would count it twice
    total = sum(v for f, v in deltas.items() if f not in ("guest", "guest_nice"))
    if total <= 0:
        return None, None
    idle = deltas.get("idle", 0.0) + deltas.get("iowait", 0.0)
    iowait = deltas["iowait"] / total if "iowait" in deltas else None
    return 1.0 - idle / total, iowait
