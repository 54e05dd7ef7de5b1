"""Sources: each reads one subsystem and returns plain dataclass samples.

A source knows nothing of Prometheus. The poller calls `collect()` on its own worker
thread, with a timeout, and records the source's health itself. A source ends a poll
without a sample in one of two ways, which mean different things to an operator:

- `SourceAbsent`: this node has no such hardware (no NVIDIA PCI function, no HCA). The
  source works and found nothing: no error is counted and nothing pages.
- `SourceUnavailable` (expected, with a reason for operators: driver not loaded, HCAs on
  PCI but no RDMA devices, devices gone) or any other exception (a bug, a broken
  device): the source is down, its errors are counted, and it pages.

- `SourceDegraded` (a `SourceUnavailable` carrying a partial sample): part of the source
  failed and the rest is good (one of two attribution resolvers). The source is down
  with the reason, its errors are counted, and the partial sample is still served.

When a source cannot tell (the PCI tree it would look at is unreadable), it is down:
silence about a broken GPU costs more than a question about a missing one. Partial
failures inside a source (one GPU lost, one port unreadable) are part of the sample,
not exceptions.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class SourceUnavailable(Exception):
    """The hardware is (or may be) there and cannot be read: the source is down and pages.

    The message says why, in one line, for operators.
    """


class SourceDegraded(SourceUnavailable):
    """Part of the source failed: down with the reason, yet `sample` (what the working
    part read) is still rendered, so one failing part never blanks the others."""

    def __init__(self, sample: object, reason: str) -> None:
        super().__init__(reason)
        self.sample = sample


class SourceAbsent(Exception):
    """This node has no such hardware: not a failure, the source has nothing to read.

    Deliberately not a SourceUnavailable: the two lead to opposite outcomes (no page,
    page), so each is caught by name. The message says how the absence was established.
    """


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
