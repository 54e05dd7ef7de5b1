"""Connections that never finish: slowloris, the request deadline, the connection limit.

Bounded: 300 slowloris connections here (1,000 are in benchmarks/slowloris.py), deadlines
shortened through ServerLimits.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import psutil

from nvwatch.agent.server import ServerLimits
from tests.agent.server_helpers import Served, exchange, read_until_closed, serving, statuses
from tests.agent.server_helpers import wait_for as wait_until

PARTIAL = b"GET /metrics HTTP/1.1\r\nHost: node\r\nX-Slow: "  # a head that never ends
GET = b"GET /metrics HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n"


@contextlib.contextmanager
def slowloris(port: int, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections, each holding a request head open."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(PARTIAL)
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def _scrape_seconds(port: int) -> float:
    started = time.perf_counter()
    assert statuses(exchange(port, GET)) == [200]
    return time.perf_counter() - started


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def test_300_slowloris_connections_cost_no_thread_and_no_lasting_memory() -> None:
    # before: a thread per connection (1,008 threads for 1,000) and +25 MB RSS that did
    # not come back after they closed
    with serving() as served:
        for _ in range(3):
            _scrape_seconds(served.port)  # warm: the first scrape pays one-off costs
        threads, rss = threading.active_count(), _rss()
        with slowloris(served.port, 300) as held:
            assert wait_until(lambda: served.server.http_state().connections_open >= 300)
            during = sorted(_scrape_seconds(served.port) for _ in range(20))
            # none more: a thread left by an earlier test of this worker may end meanwhile
            assert threading.active_count() <= threads
            held[0].sendall(b"1\r\nConnection: close\r\n\r\n")  # one that finishes is served
            assert statuses(read_until_closed(held[0], 5)) == [200]
        assert wait_until(lambda: served.server.http_state().connections_open == 0)
        grown = (_rss() - rss) / 2**20
    print(f"fresh scrape with 300 slowloris open: median {during[10] * 1e3:.1f} ms, "
          f"p90 {during[17] * 1e3:.1f} ms; RSS after they closed {grown:+.1f} MB")  # fmt: skip
    assert during[17] <= 0.050
    assert grown <= 5


def test_a_request_head_must_arrive_within_the_deadline() -> None:
    # before: a 10 s timeout per receive, so a byte every few seconds held a thread forever
    with (
        serving(limits=ServerLimits(header_timeout_s=0.5)) as served,
        socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock,
    ):
        sock.sendall(PARTIAL)
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 5 and not closed:
            try:
                sock.sendall(b"x")  # trickle: every byte on time, the head never done
                time.sleep(0.1)
            except OSError:
                closed = True
        raw = b"" if closed else read_until_closed(sock, 5)
        assert closed or statuses(raw) == [408]
        assert time.monotonic() - started < 3
        assert served.refused()["header_timeout"] == 1


def test_an_idle_keep_alive_connection_is_closed_quietly() -> None:
    with (
        serving(limits=ServerLimits(idle_timeout_s=0.3)) as served,
        socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock,
    ):
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n")
        assert statuses(sock.recv(65536)) == [200]
        assert read_until_closed(sock, 5) == b""
        assert served.refused()["header_timeout"] == 0


def test_at_the_connection_limit_the_longest_waiting_is_evicted() -> None:
    with serving(limits=ServerLimits(max_connections=20)) as served:
        assert served.server.http_state().connections_limit == 20
        with slowloris(served.port, 20) as held:
            assert wait_until(lambda: served.server.http_state().connections_open == 20)
            assert statuses(exchange(served.port, GET)) == [200]
            assert read_until_closed(held[0], 5) == b""  # the oldest went first
            assert served.refused()["evicted"] == 1


def _stuck_writer(port: int) -> socket.socket:
    """A client that pipelines requests and never reads: its connection stays busy."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n" * 2000)
    return sock


def _responses_pending(served: Served) -> bool:
    return served.server.http_state().connections_open == 3


def test_beyond_the_limit_with_nothing_to_evict_a_client_gets_503() -> None:
    limits = ServerLimits(max_connections=3, write_timeout_s=60)
    with serving(limits=limits) as served:
        writers = [_stuck_writer(served.port) for _ in range(3)]
        try:
            assert wait_until(lambda: _responses_pending(served))
            time.sleep(0.5)  # until each has filled its socket buffers
            raw = exchange(served.port, GET)
            assert statuses(raw) == [503] and b"too many connections" in raw
            assert served.refused()["connection_limit"] >= 1
        finally:
            for sock in writers:
                sock.close()
