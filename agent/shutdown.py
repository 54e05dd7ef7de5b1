"""A bound on how long `nvwatch serve` takes to stop after SIGTERM, whatever a source does.

The orderly stop (close the listener, stop the poll loop, close the sources, remove a
simulated node's files) takes well under a second. A source stuck in a native call does
not delay it (its thread is a daemon, and the poller bounds every join); a source spinning
in Python code can, by keeping the interpreter busy: a kernel log that never ran dry once
made SIGTERM take 5 to 30 s. systemd (TimeoutStopSec, 90 s by default) and the kubelet
(terminationGracePeriodSeconds, 30 s) would kill the agent in the end, but a rolling
restart of a fleet should not wait on every stuck node. So the first stop signal starts
this deadline; past it the process logs one line and exits at once, skipping the rest of
the clean-up.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from nvwatch.agent.threads import start_thread

log = logging.getLogger(__name__)

# documented in docs/security.md ("Signals")
SHUTDOWN_LIMIT_S = 5.0
# a stop that was asked for: systemd and the kubelet count 0 as a clean stop
EXIT_STOPPED = 0


def shutdown_deadline(seconds: float = SHUTDOWN_LIMIT_S) -> threading.Thread:
    """Exit the process `seconds` from now unless it has ended by then."""
    started = time.monotonic()

    def expire() -> None:
        # wait() in slices: under a busy interpreter one long wait may overshoot
        while (left := seconds - (time.monotonic() - started)) > 0:
            time.sleep(min(left, 0.1))
        busy = sorted(
            t.name for t in threading.enumerate() if t.name.startswith("nvwatch-") and t.is_alive()
        )
        log.error(
            "shutdown did not finish within %gs of the stop signal (still running: %s); "
            "exiting now",
            seconds,
            ", ".join(busy) or "the main thread",
        )
        logging.shutdown()
        os._exit(EXIT_STOPPED)

    return start_thread("nvwatch-shutdown", expire, daemon=True)
