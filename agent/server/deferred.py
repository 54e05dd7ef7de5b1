"""Responses a worker thread is still producing (a BMC read for /probe), handed back to the
loop when done, or answered by the loop itself once late.

The loop never waits on a worker: the connection sleeps unwatched, the worker's future
wakes the loop when it completes, and the loop's deadline sweep gives the late answer the
worker would have given, so a stuck read costs its client a bounded wait and no other
client anything.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

from nvwatch.agent.server.connection import Connection, State
from nvwatch.agent.server.request import Request
from nvwatch.agent.server.responses import Response, refusal

log = logging.getLogger(__name__)

INTERNAL_ERROR = refusal(500, "internal error", "internal_error")


@dataclass(frozen=True, eq=False)
class Deferred:
    """A response still being produced, and what to answer if it is not ready in time."""

    future: Future[Response]
    within_s: float  # from the moment the request was taken
    late: Response


class DeferredReplies:
    """The connections waiting on a worker's response, and the responses that came back.

    `wait` runs on the loop thread; a future's completion may run on any thread and only
    appends to a deque (thread-safe) and wakes the loop.
    """

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._done: deque[tuple[Connection, Deferred]] = deque()

    def wait(self, conn: Connection, request: Request, deferred: Deferred) -> None:
        conn.state, conn.request, conn.deferred = State.WORKER, request, deferred
        conn.deadline, conn.timeout_reason = time.monotonic() + deferred.within_s, None
        deferred.future.add_done_callback(lambda _: self._completed(conn, deferred))

    def _completed(self, conn: Connection, deferred: Deferred) -> None:
        self._done.append((conn, deferred))
        self._wake()

    def finished(self) -> Iterator[tuple[Connection, Response]]:
        """The waiting connections whose worker has answered, with the answer."""
        while self._done:
            conn, deferred = self._done.popleft()
            if conn.deferred is deferred:  # not answered late already, nor closed
                conn.deferred = None
                yield conn, _result(deferred.future)

    @staticmethod
    def late(conn: Connection) -> Response:
        """The answer for a connection whose worker missed its deadline."""
        deferred, conn.deferred = conn.deferred, None
        return deferred.late if deferred is not None else INTERNAL_ERROR


def _result(future: Future[Response]) -> Response:
    exc = future.exception()
    if exc is None:
        return future.result()
    # a bug in the worker: the client gets a 500 and the loop goes on (as a bug met serving
    # one connection does)
    log.error("a worker's response failed: %s", exc, exc_info=exc)
    return INTERNAL_ERROR
