"""Whether a parsed request is served: rate limit, then basic auth within the bcrypt budget.

Runs on the loop thread; the bcrypt workers hand their results back through `finished`.
"""

from __future__ import annotations

import selectors
from collections import deque
from collections.abc import Callable, Iterator

from nvwatch.agent.server.auth import BasicAuth, BcryptPool, Pending
from nvwatch.agent.server.connection import Connection
from nvwatch.agent.server.limits import RateLimiter, ServerLimits
from nvwatch.agent.server.request import Request
from nvwatch.agent.server.responses import Response
from nvwatch.agent.server.routes import AUTH_BUSY, RATE_LIMITED, UNAUTHORIZED
from nvwatch.agent.webconfig import WebConfig

# decide()'s answer when a bcrypt worker is checking the request: wait for `finished`
CHECKING = None


class Admission:
    def __init__(
        self,
        web: WebConfig | None,
        pool: tuple[BasicAuth, BcryptPool] | None,
        limits: ServerLimits,
        wake: Callable[[], None],
    ) -> None:
        rate = web.rate_limit if web else None
        self._rate = RateLimiter(rate.interval_s, rate.burst) if rate else None
        self._auth: BasicAuth | None = pool[0] if pool else None
        self._pool: BcryptPool | None = pool[1] if pool else None
        self._per_client = limits.bcrypt_per_client
        self._wake = wake
        self._checking: dict[str, int] = {}  # client address -> its checks in the pool
        self._finished: deque[tuple[Connection, bool]] = deque()  # from the workers

    def decide(self, conn: Connection, request: Request) -> Response | bool | None:
        """False: answer 401; True: serve; a Response: answer it; CHECKING: wait."""
        if self._rate is not None and not self._rate.allow():
            return RATE_LIMITED
        if self._auth is None or self._pool is None:
            return True
        verdict = self._auth.check(request.header("Authorization"))
        if not isinstance(verdict, Pending):
            return self._trust(conn, verdict)
        held = self._checking.get(conn.peer, 0)
        if held >= self._per_client or not self._pool.submit(verdict, conn, self._done):
            return AUTH_BUSY
        self._checking[conn.peer] = held + 1
        return CHECKING

    def finished(self) -> Iterator[tuple[Connection, bool]]:
        """Connections whose check ended, and whether to serve them."""
        while self._finished:
            conn, ok = self._finished.popleft()
            held = self._checking.pop(conn.peer, 1)
            if held > 1:
                self._checking[conn.peer] = held - 1
            yield conn, self._trust(conn, ok)

    def _trust(self, conn: Connection, ok: bool) -> bool:
        # a connection that authenticated once is served first from then on (loop.py)
        conn.trusted = conn.trusted or ok
        return ok

    def _done(self, token: object, ok: bool) -> None:
        # on a bcrypt worker thread: hand the result to the loop thread
        assert isinstance(token, Connection)
        self._finished.append((token, ok))
        self._wake()


def answer(verdict: bool | Response, serve: Callable[[], Response]) -> Response:
    """The response for a decided request: served, 401, or the refusal given."""
    if isinstance(verdict, Response):
        return verdict
    return serve() if verdict else UNAUTHORIZED


def trusted_first(ready: list[tuple[selectors.SelectorKey, int]]) -> list[object]:
    """What the selector found ready, authorised scrapers' connections first.

    Under a flood of unauthenticated requests every wake-up finds dozens of connections
    ready; a scraper that already proved its credentials should not queue behind them.
    """
    if len(ready) < 2:
        return [key.data for key, _ in ready]
    # all of it: a level-triggered selector reports the unhandled rest again in the same
    # order, so handling only the first few would starve the others
    return sorted((key.data for key, _ in ready), key=_untrusted)


def _untrusted(data: object) -> bool:
    return not (isinstance(data, Connection) and data.trusted)
