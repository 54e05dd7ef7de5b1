"""Run every source on an interval, isolate their failures, publish immutable snapshots.

Each source gets its own long-lived worker thread. The poll loop hands it a request and
waits at most the source's timeout; a source stuck inside a native call (an NVML ioctl
on a wedged GPU, a hung sysfs read) keeps its worker busy, is reported down, and is not
asked again until it returns, so one stuck source never stalls the loop or piles up
threads. Health is recorded here, by the wrapper, never by the source itself.

Building a Poller starts nothing. The per-source workers start on first use, by
`poll_once()` or `start()`, so a test or `nvwatch dump` can poll without the background
loop; `start()` starts the loop; `stop()` ends every thread either of them started.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from nvwatch.agent.sources import Source, SourceAbsent, SourceDegraded, SourceUnavailable
from nvwatch.agent.threads import start_thread

log = logging.getLogger(__name__)

# A source stays silent in the log while its failure is unchanged, except for a reminder
# at this interval, so a node without InfiniBand does not log every 5 s forever.
_REPEAT_LOG_SECONDS = 300.0


@dataclass(frozen=True)
class SourceStatus:
    """One source after one poll: up (with a sample), absent, or down (with the reason).

    Absent (this node has no such hardware) is up: the source worked and found nothing,
    so `up` is True, `error` None and no error is counted; `absent_reason` says why.
    """

    name: str
    up: bool
    duration_seconds: float
    errors_total: int
    error: str | None  # why the source is down, for operators; None when up
    prepared: object | None  # the source's sample after `prepare` (rendered families)
    absent: bool = False  # the source's hardware does not exist on this node
    absent_reason: str | None = None  # how the absence was established, for operators
    # values the source dropped as unparsable since start; None: it parses nothing
    parse_errors_total: int | None = None

    @property
    def state(self) -> str:
        """One word for the landing page and `nvwatch doctor`: up, absent or down."""
        return "down" if not self.up else "absent" if self.absent else "up"


@dataclass(frozen=True)
class Snapshot:
    sources: Mapping[str, SourceStatus]
    sequence: int
    completed_at: float  # unix time, exported as nvwatch_agent_last_poll_timestamp_seconds
    completed_monotonic: float  # for staleness checks immune to wall-clock steps


Prepare = Callable[[str, object], object]


@runtime_checkable
class CountsParseErrors(Protocol):
    """A source that drops values it cannot parse keeps a running count of them.

    Read by the poller, not carried in the sample: the count is the source's own, so it
    is still there (and still monotonic) on a poll that fails or times out.
    """

    parse_errors_total: int


def _identity(_name: str, sample: object) -> object:
    return sample


def _parse_errors(source: Source) -> int | None:
    return source.parse_errors_total if isinstance(source, CountsParseErrors) else None


class _SourceWorker:
    """One thread that runs one source's collect() on request, once `start()` is called."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._request: Future[object] | None = None
        self._wakeup = threading.Condition()
        self._stopping = False
        self._busy_since: float | None = None
        self._thread: threading.Thread | None = None

    def start(self, context: contextvars.Context) -> None:
        self._thread = start_thread(
            f"nvwatch-source-{self.source.name}",
            self._loop,
            daemon=True,  # a source stuck in C forever must not block process exit
            context=context,
        )

    @property
    def busy_since(self) -> float | None:
        return self._busy_since

    def submit(self) -> Future[object] | None:
        """Ask for one collect(); None while the previous one has not returned."""
        with self._wakeup:
            if self._request is not None or self._stopping:
                return None
            future: Future[object] = Future()
            self._request = future
            self._busy_since = time.monotonic()
            self._wakeup.notify()
            return future

    def _loop(self) -> None:
        while True:
            with self._wakeup:
                while self._request is None and not self._stopping:
                    self._wakeup.wait()
                if self._stopping:
                    return
                future = self._request
            assert future is not None
            try:
                future.set_result(self.source.collect())
            except BaseException as exc:  # the poller decides what any failure means
                future.set_exception(exc)
            finally:
                with self._wakeup:
                    self._request = None
                    self._busy_since = None

    def stop(self, timeout: float) -> None:
        with self._wakeup:
            self._stopping = True
            self._wakeup.notify()
        if self._thread is not None:
            self._thread.join(timeout)


class Poller:
    def __init__(
        self,
        sources: Sequence[Source],
        *,
        interval: float,
        timeout: float,
        prepare: Prepare = _identity,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        stuck_after: float | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate source names: {names}")
        self.interval = interval
        self.timeout = timeout
        # as long as /healthz lets the whole loop fall behind: a source that has not
        # answered for that long leaves its series as old as a stopped loop would
        self.stuck_after = stuck_after if stuck_after is not None else 3 * interval + timeout
        # sources seen stuck, until one of their polls is answered in time (so a source
        # that alternates between stuck and late does not flap /healthz): name -> seconds
        self._stuck_seen: dict[str, float] = {}
        self._prepare = prepare
        self._on_snapshot = on_snapshot
        # Threads run in a copy of the creator's context, captured here because they start
        # later and elsewhere: a simulated fleet binds each node's simulated NVML through a
        # context variable while it builds that node's agent, and this carries it along.
        self._context = contextvars.copy_context()
        self._workers = [_SourceWorker(s) for s in sources]
        self._workers_started = False
        self._start_lock = threading.Lock()
        self._errors = dict.fromkeys(names, 0)
        self._last_logged: dict[str, tuple[tuple[str, str | None], float]] = {}
        self._sequence = 0
        self._latest: Snapshot | None = None
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._on_death: Callable[[BaseException], None] | None = None

    @property
    def latest(self) -> Snapshot | None:
        return self._latest

    def stuck(self) -> dict[str, float]:
        """Sources stuck in one poll for longer than `stuck_after`: name -> seconds it has
        been running (or had run, for a source not yet answering a poll in time again)."""
        now = time.monotonic()
        stuck = dict(self._stuck_seen)
        for worker in self._workers:
            since = worker.busy_since
            if since is not None and now - since > self.stuck_after:
                stuck[worker.source.name] = now - since
        return stuck

    def poll_once(self) -> Snapshot:
        """Run every source once, concurrently, each bounded by the timeout."""
        self._start_workers()
        started = time.monotonic()
        deadline = started + self.timeout
        submitted = {w.source.name: (w, w.submit()) for w in self._workers}
        statuses: dict[str, SourceStatus] = {}
        for name, (worker, future) in submitted.items():
            statuses[name] = self._finish(name, worker, future, started, deadline)
        self._sequence += 1
        snapshot = Snapshot(
            sources=MappingProxyType(statuses),
            sequence=self._sequence,
            completed_at=time.time(),
            completed_monotonic=time.monotonic(),
        )
        self._latest = snapshot
        if self._on_snapshot is not None:
            self._on_snapshot(snapshot)
        return snapshot

    def _finish(
        self,
        name: str,
        worker: _SourceWorker,
        future: Future[object] | None,
        started: float,
        deadline: float,
    ) -> SourceStatus:
        error: str | None = None
        absent: str | None = None
        prepared: object | None = None
        if future is None:
            since = worker.busy_since
            stuck = time.monotonic() - since if since is not None else 0.0
            error = f"still running the previous poll after {stuck:.1f}s"
            if stuck > self.stuck_after:
                self._stuck_seen[name] = stuck
        else:
            try:
                sample = future.result(timeout=max(0.0, deadline - time.monotonic()))
                prepared = self._prepare(name, sample)
            except FutureTimeout:
                error = f"timed out after {self.timeout:g}s"
            except SourceAbsent as exc:
                absent = str(exc) or "no such hardware on this node"
            except SourceDegraded as exc:
                error = str(exc)
                prepared = self._degraded(name, exc)
            except SourceUnavailable as exc:
                error = str(exc)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            if future.done():  # answered in time, up or not: no longer stuck
                self._stuck_seen.pop(name, None)
        duration = time.monotonic() - started
        if error is not None:
            self._errors[name] += 1
        self._log_change(name, error, absent)
        return SourceStatus(
            name=name,
            up=error is None,
            duration_seconds=duration,
            errors_total=self._errors[name],
            error=error,
            prepared=prepared,
            absent=absent is not None,
            absent_reason=absent,
            parse_errors_total=_parse_errors(worker.source),
        )

    def _degraded(self, name: str, degraded: SourceDegraded) -> object | None:
        """The partial sample of a degraded source, rendered; None if that fails too."""
        try:
            return self._prepare(name, degraded.sample)
        except Exception:
            log.exception("rendering the partial sample of source %s failed", name)
            return None

    def _log_change(self, name: str, error: str | None, absent: str | None) -> None:
        """Log a change of state; a down source is also reminded of every few minutes.

        Absent is logged once, at info: nothing is wrong, and a reminder every five
        minutes for hardware a node will never have would only train people to ignore
        the log.
        """
        now = time.monotonic()
        if error is not None:
            state: tuple[str, str | None] = ("down", error)
        else:
            state = ("absent", absent) if absent is not None else ("up", None)
        # a source starts as "up" here, so a healthy start logs nothing per source
        last_state, last_time = self._last_logged.get(name, (("up", None), -_REPEAT_LOG_SECONDS))
        if state == last_state and (error is None or now - last_time < _REPEAT_LOG_SECONDS):
            return
        self._last_logged[name] = (state, now)
        if error is not None:
            log.warning("source %s is down: %s", name, error)
        elif absent is not None:
            log.info("source %s is absent: %s", name, absent)
        else:
            log.info("source %s is up", name)

    # --- background loop ----------------------------------------------------------------

    def _start_workers(self) -> None:
        with self._start_lock:
            if self._workers_started or self._stop.is_set():
                return
            self._workers_started = True
            for worker in self._workers:
                worker.start(self._context)

    def start(self, on_death: Callable[[BaseException], None] | None = None) -> None:
        """Poll every `interval` seconds on a background thread until `stop()`.

        Should the loop end any other way (a BaseException, a bug in its own timing),
        `failure` holds why and `on_death(exc)` is called on the dying thread: an agent
        without its poll loop serves stale data behind a 503 forever, so `serve` exits
        and lets its supervisor restart it.
        """
        self._start_workers()
        self._on_death = on_death
        self._thread = start_thread(
            "nvwatch-poller", self._loop, daemon=True, context=self._context
        )

    @property
    def failure(self) -> BaseException | None:
        """Why the poll loop ended before `stop()`; None while it runs or after a stop."""
        return self._failure

    def _loop(self) -> None:
        try:
            self._tick_until_stopped()
        except BaseException as exc:  # any end but stop() is a death, whatever raised
            self._failure = exc
            if self._on_death is not None:
                self._on_death(exc)

    def _tick_until_stopped(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            if not self._paused.is_set():
                try:
                    self.poll_once()
                except Exception:  # publishing failed; keep polling, the next may succeed
                    log.exception("poll cycle failed")
            # fixed-rate ticks; after an overrun, skip the missed ones instead of bursting
            next_tick += self.interval
            now = time.monotonic()
            if next_tick < now:
                next_tick = now + self.interval - ((now - next_tick) % self.interval)
            self._stop.wait(next_tick - now)

    def pause(self) -> None:
        """Stop polling without stopping the thread (tests, maintenance)."""
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop polling and close the sources, all within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        for worker in self._workers:
            worker.stop(max(0.0, deadline - time.monotonic()))
        # close() of a source whose worker is stuck in a native call may block as well:
        # bound it, so SIGTERM still ends the agent promptly.
        # in the poller's context, so a fleet node's nvmlShutdown reaches its own library
        closer = start_thread(
            "nvwatch-close", self._close_sources, daemon=True, context=self._context
        )
        closer.join(max(0.0, deadline - time.monotonic()))

    def _close_sources(self) -> None:
        for worker in self._workers:
            try:
                worker.source.close()
            except Exception:
                log.exception("closing source %s failed", worker.source.name)
