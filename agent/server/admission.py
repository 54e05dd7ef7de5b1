"""Whether a parsed request is served: rate limit, then basic auth within the bcrypt budget.

Runs on the loop thread; the bcrypt workers only hand their results back (`finished`).

The bcrypt budget is small on purpose (ServerLimits: one worker, four waiting places), so
who gets a place matters as much as how many there are. Each check is ranked by its
client, which is its verified client certificate when it has one, else its address:

- KNOWN: its credentials passed before in this process, or the server's client CA
  verified its certificate (mutual TLS: the CA vouches for it);
- NEW: nothing is known of it;
- SUSPECT: a check of its credentials failed in the last `bcrypt_suspect_s` and none
  passed since, known or not.

A client ranked NEW that does what no scraper does ranks SUSPECT at once, before any
bcrypt: Prometheus sends one request at a time to a target and the next one a scrape
interval later, so a client that asks for a second check while one of its checks waits
or runs, or that is back within `BACK_TOO_SOON_S` of a request answered 429, is not a
scraper (its waiting check drops to SUSPECT too). Without that, every address of a
flood had one first check ranked NEW, like a new scraper's, and 19 addresses kept new
scrapers out for 19 bcrypt durations.

A free worker takes the best waiting check, oldest first within a rank. Suspects
together may hold only `bcrypt_suspect_queue` of the waiting places, so a few addresses
flooding wrong passwords leave room for everyone else; a check that finds the queue full
evicts the newest waiting check of a worse rank (answered 429 `auth_busy`), else it is
answered 429 itself; and one client has at most `bcrypt_per_client` checks waiting or
running. What a client was is remembered in two LRU tables of bounded size.
"""

from __future__ import annotations

import contextlib
import hashlib
import selectors
import ssl
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from nvwatch.agent.server.auth import BasicAuth, BcryptPool, Pending
from nvwatch.agent.server.connection import Connection
from nvwatch.agent.server.deferred import Deferred
from nvwatch.agent.server.limits import RateLimiter, ServerLimits
from nvwatch.agent.server.request import Request
from nvwatch.agent.server.responses import Response
from nvwatch.agent.server.routes import AUTH_BUSY, RATE_LIMITED, UNAUTHORIZED
from nvwatch.agent.webconfig import WebConfig

# decide()'s answer when a bcrypt worker is checking the request: wait for `finished`
CHECKING = None

# ranks of a waiting check, best first
KNOWN, NEW, SUSPECT = 0, 1, 2
RANKS = (KNOWN, NEW, SUSPECT)

# clients remembered as known, as suspects and as turned away: an entry costs ~250 bytes,
# so the three tables stay under 2.5 MB whatever the number of addresses that reach the port
KNOWN_CLIENTS = 1024
SUSPECT_CLIENTS = 4096
# clients answered 429 lately, remembered to see which come back too soon
TURNED_AWAY_CLIENTS = 4096
# A new client back this soon after the start of a request answered 429 (Retry-After: 1)
# is not a scraper: Prometheus scrapes a target once per interval, 1 s at the shortest.
# Half of that, so a scraper on a 1 s interval whose scrape waited is not taken for one.
BACK_TOO_SOON_S = 0.5

T = TypeVar("T")


class WaitingLine(Generic[T]):
    """Checks waiting for a bcrypt worker: at most `size`, of which at most `suspects` of
    rank SUSPECT; taken best rank first, oldest first within a rank."""

    def __init__(self, size: int, suspects: int) -> None:
        self._size = size
        self._suspects = suspects
        self._ranks: tuple[deque[T], ...] = tuple(deque() for _ in RANKS)

    def __len__(self) -> int:
        return sum(len(waiting) for waiting in self._ranks)

    def waiting(self, rank: int) -> int:
        return len(self._ranks[rank])

    def add(self, item: T, rank: int) -> tuple[bool, T | None]:
        """(whether `item` got a place, the item it evicted to get it, if any)."""
        if rank == SUSPECT and len(self._ranks[SUSPECT]) >= self._suspects:
            return False, None
        if len(self) < self._size:
            self._ranks[rank].append(item)
            return True, None
        worst = max(r for r in RANKS if self._ranks[r])
        if worst <= rank:
            return False, None
        # the newest of the worst: those that waited longest keep their turn
        evicted = self._ranks[worst].pop()
        self._ranks[rank].append(item)
        return True, evicted

    def demote(self, match: Callable[[T], bool]) -> list[T]:
        """Move the waiting items `match` picks to SUSPECT, behind the suspects waiting;
        those the suspects' share has no room for are returned: they lost their place."""
        lost: list[T] = []
        for waiting in self._ranks[:SUSPECT]:
            for item in [item for item in waiting if match(item)]:
                waiting.remove(item)
                if len(self._ranks[SUSPECT]) < self._suspects:
                    self._ranks[SUSPECT].append(item)
                else:
                    lost.append(item)
        return lost

    def take(self) -> T | None:
        for waiting in self._ranks:
            if waiting:
                return waiting.popleft()
        return None


class RecentClients:
    """Clients with the time each was last noted, at most `size` (least recent dropped)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._at: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._at)

    def note(self, client: str, now: float) -> None:
        self._at[client] = now
        self._at.move_to_end(client)
        if len(self._at) > self._size:
            self._at.popitem(last=False)

    def forget(self, client: str) -> None:
        self._at.pop(client, None)

    def within(self, client: str, now: float, window_s: float) -> bool:
        at = self._at.get(client)
        return at is not None and now - at < window_s


@dataclass(frozen=True, eq=False)
class _Check:
    conn: Connection
    client: str
    pending: Pending
    at: float  # when its request was decided: a 429 counts from there


def client_of(conn: Connection) -> str:
    """Who a connection's client is, for ranking and per-client places: the SHA-256 of its
    client certificate if the server's client CA verified one, else its address."""
    sock = conn.sock
    if isinstance(sock, ssl.SSLSocket):
        with contextlib.suppress(OSError, ValueError):
            der = sock.getpeercert(binary_form=True)
            # the dict form is empty unless the certificate was verified
            if der and sock.getpeercert():
                return "cert " + hashlib.sha256(der).hexdigest()
    return conn.peer


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
        self._suspect_s = limits.bcrypt_suspect_s
        self._wake = wake
        self._line: WaitingLine[_Check] = WaitingLine(
            limits.bcrypt_queue, limits.bcrypt_suspect_queue
        )
        self._running = 0  # checks handed to the workers, not yet finished
        self._held: dict[str, int] = {}  # client -> its checks waiting or running
        self._known = RecentClients(KNOWN_CLIENTS)
        self._suspects = RecentClients(SUSPECT_CLIENTS)
        self._turned_away = RecentClients(TURNED_AWAY_CLIENTS)
        self._evicted: deque[Connection] = deque()  # to answer 429 in `finished`
        self._finished: deque[tuple[_Check, bool]] = deque()  # from the workers

    def decide(self, conn: Connection, request: Request) -> Response | bool | None:
        """False: answer 401; True: serve; a Response: answer it; CHECKING: wait."""
        if self._rate is not None and not self._rate.allow():
            return RATE_LIMITED
        if self._auth is None or self._pool is None:
            return True
        header = request.header("Authorization")
        verdict = self._auth.check(header)
        if isinstance(verdict, Pending):
            return self._wait(conn, verdict)
        # a missing header is how browsers ask for the password prompt: no failure
        if header is not None and not (verdict and conn.trusted):
            self._note(client_of(conn), verdict, time.monotonic())
        return self._trust(conn, verdict)

    def rank(self, client: str, now: float) -> int:
        """KNOWN, NEW or SUSPECT: what a check for `client` (client_of) waits as."""
        if self._suspects.within(client, now, self._suspect_s):
            return SUSPECT
        if client.startswith("cert ") or self._known.within(client, now, float("inf")):
            return KNOWN
        return NEW

    def finished(self) -> Iterator[tuple[Connection, bool | Response]]:
        """Connections whose check ended, and their verdict: serve, 401 or 429 (evicted)."""
        if not self._finished and not self._evicted:
            return  # every loop iteration asks
        done: deque[tuple[_Check, bool]] = deque()
        while self._finished:
            done.append(self._finished.popleft())
        if done:
            now = time.monotonic()
            for check, ok in done:
                self._running -= 1
                self._release(check.client)
                self._note(check.client, ok, now)
            self._start_checks()
        # answering one may admit requests pipelined behind it, which may evict others
        while self._evicted or done:
            if self._evicted:
                yield self._evicted.popleft(), AUTH_BUSY
            else:
                check, ok = done.popleft()
                yield check.conn, self._trust(check.conn, ok)

    def _wait(self, conn: Connection, pending: Pending) -> Response | None:
        client, now = client_of(conn), time.monotonic()
        rank = self.rank(client, now)
        if rank == NEW and self._unlike_a_scraper(client, now):
            self._unmask(client, now)
            rank = SUSPECT
        held = self._held.get(client, 0)
        if held >= self._per_client:
            return self._turn_away(client, now)
        check = _Check(conn, client, pending, now)
        placed, evicted = self._line.add(check, rank)
        if not placed:
            return self._turn_away(client, now)
        self._held[client] = held + 1
        if evicted is not None:
            self._evict(evicted)
        self._start_checks()
        return CHECKING

    def _unlike_a_scraper(self, client: str, now: float) -> bool:
        """A second check asked for while one waits or runs, or one asked for too soon
        after a 429: Prometheus does neither (one scrape at a time, one per interval)."""
        return client in self._held or self._turned_away.within(client, now, BACK_TOO_SOON_S)

    def _unmask(self, client: str, now: float) -> None:
        """`client` is a suspect from now on, and so is its check still waiting."""
        self._suspects.note(client, now)
        for lost in self._line.demote(lambda check: check.client == client):
            self._evict(lost)

    def _turn_away(self, client: str, now: float) -> Response:
        self._turned_away.note(client, now)
        return AUTH_BUSY

    def _evict(self, check: _Check) -> None:
        """A waiting check loses its place: its request is answered 429 (in `finished`)."""
        self._release(check.client)
        self._turned_away.note(check.client, check.at)
        self._evicted.append(check.conn)

    def _start_checks(self) -> None:
        pool = self._pool
        while pool is not None and self._running < pool.workers:
            check = self._line.take()
            if check is None:
                return
            self._running += 1
            pool.submit(check.pending, check, self._done)

    def _release(self, client: str) -> None:
        held = self._held.pop(client, 1)
        if held > 1:
            self._held[client] = held - 1

    def _note(self, client: str, ok: bool, now: float) -> None:
        if ok:
            self._known.note(client, now)
            self._suspects.forget(client)
        else:
            self._suspects.note(client, now)

    def _trust(self, conn: Connection, ok: bool) -> bool:
        # a connection that authenticated once is served first from then on (loop.py)
        conn.trusted = conn.trusted or ok
        return ok

    def _done(self, token: object, ok: bool) -> None:
        # on a bcrypt worker thread: hand the result to the loop thread
        assert isinstance(token, _Check)
        self._finished.append((token, ok))
        self._wake()


def answer(
    verdict: bool | Response, serve: Callable[[], Response | Deferred]
) -> Response | Deferred:
    """The response for a decided request: served (maybe by a worker, later), 401, or the
    refusal given."""
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
