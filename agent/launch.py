"""The `nvwatch` command's entry point: stop signals are caught before anything is imported.

Importing the command line and starting a command take most of a second (click,
prometheus_client, the sources, a simulated node). A SIGTERM in that window used to get
the default action: the process died with 143, leaving a simulated node's kernel log
behind, and a SIGHUP killed it (129), where a running agent logs it and goes on. So the
first thing the entry point does is record those signals; each command then takes them
over (`take_over`): `serve` installs its own handlers and replays what came early, so a
signal in the first second is handled as one a minute later; every other command gets
the default actions back, and a signal that came early is delivered again then.

This module imports nothing of nvwatch's before it has installed the recorders.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

EARLY_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_pending: list[int] = []


def _record(signum: int, _frame: FrameType | None) -> None:
    _pending.append(signum)


def catch_early() -> None:
    """Record the stop and hang-up signals until a command takes them over; only the main
    thread may install handlers (a test runner calling the CLI elsewhere keeps its own)."""
    if threading.current_thread() is threading.main_thread():
        for signum in EARLY_SIGNALS:
            signal.signal(signum, _record)


def recording() -> bool:
    """Whether the early recorders are still the handlers (the entry point was used)."""
    return signal.getsignal(signal.SIGTERM) is _record


def take_over(handler: Callable[[int, FrameType | None], object]) -> None:
    """Hand the signals that came early to `handler`, in order (serve's own handlers)."""
    while _pending:
        handler(_pending.pop(0), None)


def restore_defaults() -> None:
    """Give a command other than `serve` the default actions back, then deliver again the
    signals that came early (a SIGINT becomes KeyboardInterrupt, exit 130, as always)."""
    if not recording():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    while _pending:
        signal.raise_signal(_pending.pop(0))


def main() -> None:
    catch_early()
    from nvwatch.agent.cli import main as cli_main

    cli_main()
