"""The server's open connections: what the selector watches for each, the eviction
order, and how each is closed.

A connection is closed only once the client has acknowledged every byte of its reply,
or reset at the reply's write deadline. A send "completes" as soon as the kernel has the
bytes, and a /metrics body of 250 KB fits in a socket's send buffer: closing then would
leave an orphaned socket retrying those bytes for minutes, and keeping a keep-alive
connection until its idle timeout would let a client that never reads pin them for 90 s
(2,000 such clients held ~880 MiB of kernel memory). So the table watches the unread
bytes (SIOCOUTQ) of every connection that has some, once per tick of the loop.
"""

from __future__ import annotations

import contextlib
import math
import selectors
import time
from collections.abc import Iterator

from nvwatch.agent.server.connection import Connection, State
from nvwatch.agent.server.limits import HttpStats


class ConnectionTable:
    def __init__(self, selector: selectors.BaseSelector, stats: HttpStats) -> None:
        self._selector = selector
        self._stats = stats
        self._conns: dict[Connection, None] = {}
        # those waiting for a request head, in the order they started waiting: the first
        # is the one to evict at the connection limit
        self._waiting: dict[Connection, None] = {}
        # those whose last reply the client has not yet acknowledged in full
        self._unacked: dict[Connection, None] = {}

    def __len__(self) -> int:
        return len(self._conns)

    def __contains__(self, conn: object) -> bool:
        return conn in self._conns

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._conns))  # a copy: closing while iterating is the rule

    def add(self, conn: Connection) -> None:
        self._conns[conn] = None
        self._waiting[conn] = None
        self._stats.connections_open = len(self._conns)
        self.watch(conn)

    # --- the eviction order -------------------------------------------------------------

    def served(self, conn: Connection) -> None:
        """conn has a complete request: it no longer waits for one."""
        self._waiting.pop(conn, None)

    def wait_again(self, conn: Connection) -> None:
        """conn is idle after a reply: to the back of the eviction order, and held to its
        write deadline until the client has read the reply."""
        self._waiting.pop(conn, None)
        self._waiting[conn] = None
        if conn.unacknowledged():
            self._unacked[conn] = None

    def evict(self) -> bool:
        """Close the connection that has waited longest for a request, to make room.

        A slowloris connection never completes its request, so it ages to the front; a
        scraper's keep-alive connection goes to the back after every response.
        """
        for conn in self._waiting:
            self._stats.refuse("evicted")
            # now, not once the client reads: the point is to free the place
            self._release(conn, abort=conn.unacknowledged() > 0)
            return True
        return False

    # --- the selector -------------------------------------------------------------------

    def watch(self, conn: Connection, events: int | None = None) -> None:
        wanted = conn.wanted_events() if events is None else events
        if wanted == conn.events:
            return
        if not conn.events:
            self._selector.register(conn.sock, wanted, conn)
        elif not wanted:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, wanted, conn)
        conn.events = wanted

    def unwatch(self, conn: Connection) -> None:
        self.watch(conn, 0)

    # --- closing ------------------------------------------------------------------------

    def expired(self, now: float) -> list[Connection]:
        return [conn for conn in self._conns if conn.deadline <= now]

    def sweep_unacknowledged(self, now: float) -> None:
        """Close what the client has now read; reset what it has not read in time."""
        for conn in list(self._unacked):
            if not conn.unacknowledged():
                del self._unacked[conn]
                if conn.state is State.FLUSH:
                    self._release(conn, abort=False)
            elif now >= conn.write_deadline:
                self._stats.refuse("write_timeout")
                self.abort(conn)

    def close(self, conn: Connection) -> None:
        """Close, once the client has acknowledged what was sent (or at the deadline)."""
        if conn not in self._conns or conn.state is State.FLUSH:
            return
        if not conn.unacknowledged():
            self._release(conn, abort=False)
        elif time.monotonic() >= conn.write_deadline:
            self.abort(conn)  # a handshake or 408 the client never read
        else:
            self.unwatch(conn)
            conn.state = State.FLUSH
            conn.deadline, conn.timeout_reason = math.inf, None
            self._waiting.pop(conn, None)
            self._unacked[conn] = None

    def abort(self, conn: Connection) -> None:
        """Close at once with a reset, dropping whatever the kernel still holds."""
        self._release(conn, abort=True)

    def close_all(self) -> None:
        """Fail every connection at once, as a killed process would; a reset only where
        the kernel still holds bytes it would keep retrying after we are gone."""
        for conn in list(self._conns):
            self._release(conn, abort=conn.unacknowledged() > 0)

    def _release(self, conn: Connection, *, abort: bool) -> None:
        if self._conns.pop(conn, False) is False:
            return
        self._waiting.pop(conn, None)
        self._unacked.pop(conn, None)
        if conn.events:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(conn.sock)
            conn.events = 0
        if abort:
            conn.abort()
        else:
            conn.close()
        self._stats.connections_open = len(self._conns)
