"""Sources: each reads one subsystem and returns plain dataclass samples.

A source knows nothing of Prometheus. The poller calls `collect()` on its own worker
thread, with a timeout, and records the source's health itself; a source signals failure
by raising `SourceUnavailable` (expected: no driver, no such subsystem) or any other
exception (a bug or a broken device). Partial failures inside a source (one GPU lost,
one port unreadable) are part of the sample, not exceptions.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class SourceUnavailable(Exception):
    """The subsystem is absent or cannot be reached; the message says why, for operators."""


@runtime_checkable
class Source(Protocol):
    """What the poller needs from a source."""

    #: short stable name used in `nvwatch_agent_*{source=...}` and `--sources`
    name: str

    def collect(self) -> object:
        """Read the subsystem once; return this source's sample dataclass."""
        ...

    def close(self) -> None:
        """Release handles and threads; called once at shutdown."""
        ...
