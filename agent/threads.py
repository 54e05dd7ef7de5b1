"""The one way the agent starts a thread, and the list of every thread it runs.

Every thread starts through `start_thread`, which runs its target in a copy of a
`contextvars` context: the caller's current one, or one its owner captured earlier. The
simulated fleet runs many agents in one process and binds each node's simulated NVML
through a context variable (`nvwatch.sim` `bind()`); a thread that lost that context would
poll another node's GPUs, or the real driver. On a real node the copy costs nothing and
changes nothing.

Threads the agent runs (name, who starts it, why it exists):

- ``nvwatch-poller``: `Poller.start` (agent/poller.py). The fixed-rate poll loop, so
  scrapes are served from a cache and never wait on hardware.
- ``nvwatch-source-<name>``, one per source: `Poller`, on the first `poll_once()` or
  `start()`. A source stuck in a native call (an NVML ioctl on a wedged GPU, a hung sysfs
  read) keeps only its own worker busy; the loop reports it down and goes on.
- ``nvwatch-close``: `Poller.stop`. Closes the sources, bounded by the shutdown deadline,
  because close() of a source stuck in C may block as well.
- ``nvwatch-xid``: `XidListener.start` (agent/sources/nvml/xid.py), on the NVML source's
  first successful initialisation. NVML reports XID errors only as events, so one thread
  blocks in nvmlEventSetWait and counts them, and re-reads the kernel log's Xid lines
  after each wait (agent/sources/nvml/kmsg.py).
- ``nvwatch-attribution``: `AttributionRefresher.start`
  (agent/sources/attribution/refresher.py), on the attribution source's first poll, only
  with --attribution. Reads /proc, the job-mapping directory and the kubelet on its own
  cadence, so no poll or scrape ever waits on them; polls read its cache.
- ``nvwatch-scheduler``: `SchedulerSource.start` (agent/sources/scheduler/source.py), on
  the scheduler source's first poll, only with --sources scheduler. Runs squeue, sinfo
  and sshare every --scheduler-interval, each with its deadline, so no poll or scrape
  waits on the Slurm controller; polls read what it kept.
- ``nvwatch-http``: `MetricsServer.start` (agent/server/). The HTTP event loop: accepts,
  reads, answers and times out every connection without blocking on any, so an idle or
  slow client costs a socket, not a thread (agent/server/loop.py).
- ``nvwatch-http-auth``, `ServerLimits.bcrypt_workers` of them (1): `MetricsServer.start`,
  only with basic_auth_users. bcrypt checks of credentials not seen before, off the loop
  thread and bounded in number (agent/server/auth.py).
- ``nvwatch-bmc``, `DEFAULT_WORKERS` of them at most (64): `thread_pool` in `ProbeService`
  (agent/server/probe.py), only with --bmc-config or a simulated node's BMC. One BMC read
  each, so a BMC that does not answer holds one worker until its module's timeout, never
  the HTTP loop or another target's read.
- ``nvwatch-sim``: `SimulatedNode.start` (sim/node/node.py), only with `--simulate`
  and the infiniband source. Rewrites the simulated sysfs tree once per poll interval,
  half an interval out of phase with the polls, as the kernel's counters would move.
- ``nvwatch-fleet-tick``: `Fleet.start` (sim/fleet/fleet.py), only in a simulated
  fleet. Steps the fleet's shared simulated clock and ticks every node once per interval.
- ``nvwatch-report``, `PARALLEL_QUERIES` of them: `thread_pool` in `fetch_all`
  (report/fetch.py), only under `nvwatch report`. Range queries to Prometheus run a
  few at a time, so a 30-day report of a large fleet is not one slow query after another.
- ``nvwatch-shutdown``: `shutdown_deadline` (agent/shutdown.py), when `nvwatch serve`
  receives its first SIGTERM or SIGINT. Ends the process if the orderly stop has not
  within `SHUTDOWN_LIMIT_S`, whatever a source is doing.
- ``nvwatch-fleet-stop``: `Fleet.stop`, a few at shutdown of a simulated fleet, so 128
  agents stop in about the time one does.

All are daemon threads: each owner joins its threads on stop within a deadline, and a
thread stuck in a native call must not keep the process alive after that.

No thread may die while the process looks alive: a server thread gone with its port
closed, or an XID listener gone silent, leaves a process that systemd and the kubelet
consider healthy. Each loop handles the failures it expects (a connection's bug closes
that connection; a source's error marks it down); anything that still escapes a thread's
target is logged with its traceback and handed to the death handler of the context the
thread started in (`thread_deaths`), which `nvwatch serve` turns into exit code 1 so a
supervisor restarts the agent.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

# Called with the thread's name and what killed it; None: only the log line.
DeathHandler = Callable[[str, BaseException], None]
_death_handler: contextvars.ContextVar[DeathHandler | None] = contextvars.ContextVar(
    "nvwatch_thread_death_handler", default=None
)


@contextlib.contextmanager
def thread_deaths(handler: DeathHandler) -> Iterator[None]:
    """Within this block, threads started from this context report their death to
    `handler` (threads started from copies made inside it too: the poller's sources)."""
    token = _death_handler.set(handler)
    try:
        yield
    finally:
        _death_handler.reset(token)


class ThreadDeaths:
    """A death handler for a process that must not outlive its threads: the first death
    sets `stop`, and the exit code becomes 1 so a supervisor starts a fresh agent."""

    EXIT_CODE = 1  # like any crash; 2 stays "bad input"

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self.first: tuple[str, BaseException] | None = None

    def died(self, name: str, exc: BaseException) -> None:
        if self.first is None:
            self.first = (name, exc)
        self._stop.set()

    def exit_code(self, code: int) -> int:
        """`code`, or 1 with one line on why after a thread's death."""
        if self.first is None:
            return code
        name, exc = self.first
        log.error(
            "thread %s died: %s: %s; exiting %d so a supervisor restarts the agent",
            name,
            type(exc).__name__,
            " ".join(str(exc).split())[:200] or "(no message)",
            self.EXIT_CODE,
        )
        return max(code, self.EXIT_CODE)


def _supervised(name: str, target: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        try:
            target()
        except BaseException as exc:  # a thread's end by any exception is a death
            log.critical("thread %s died: %s: %s", name, type(exc).__name__, exc, exc_info=exc)
            handler = _death_handler.get()
            if handler is not None:
                handler(name, exc)

    return run


def start_thread(
    name: str,
    target: Callable[[], object],
    *,
    daemon: bool,
    context: contextvars.Context | None = None,
) -> threading.Thread:
    """Start `target()` on a new thread called `name`; return the running thread.

    The thread runs in a copy of `context`, or of the caller's current context when none
    is given. Pass a context captured earlier when the thread is started later, from
    elsewhere, than its owner was built (the poller is built inside a fleet node's context
    and started outside it). A copy, because one context cannot be entered by two threads.
    """
    run_in = contextvars.copy_context() if context is None else context.copy()
    supervised = _supervised(name, target)
    thread = threading.Thread(target=run_in.run, args=(supervised,), name=name, daemon=daemon)
    thread.start()
    return thread


def thread_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """A pool of `workers` threads called `name`_<n>, each running in a copy of the
    caller's context (as `start_thread` does), for work that is a batch of calls."""
    context = contextvars.copy_context()

    def enter_context() -> None:
        # each worker runs its tasks inside its own copy of the starter's context
        for variable, value in context.items():
            variable.set(value)

    return ThreadPoolExecutor(workers, thread_name_prefix=name, initializer=enter_context)


# A poll holds the GIL for tens of ms of pure-Python work, and every sysfs read gives it
# up and must win it back: at CPython's 5 ms hand-over that wait, a few hundred times per
# poll, pushed a simulated fleet's InfiniBand polls past their timeout whenever another
# thread ran Python, and a concurrent scrape's p99 to 9.8 ms (1 ms: 4.4 ms, wrk, DGX H100).
AGENT_SWITCH_INTERVAL_S = 0.001


@contextlib.contextmanager
def agent_switch_interval() -> Iterator[None]:
    """Hand the GIL over every `AGENT_SWITCH_INTERVAL_S` while agents run in this
    process; the previous interval is restored on the way out."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(AGENT_SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)
