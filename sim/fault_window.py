"""What the simulated parts' faults share: a named window on a clock that can be ended."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class FaultWindow(Protocol):
    name: str
    since: float
    until: float


def end_faults(faults: Iterable[FaultWindow], name: str | None, now: float) -> list[str]:
    """End the faults named `name` (None: all) that have not ended at `now`; one not begun
    never will. The names of those ended, in order."""
    ended = []
    for fault in faults:
        if fault.until > now and name in (None, fault.name):
            fault.until = max(now, fault.since)
            ended.append(fault.name)
    return ended
