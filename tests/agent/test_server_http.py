"""The HTTP layer under attack: request smuggling, HTTP/0.9, malformed and oversized heads.

Each test sends raw bytes, as an attacker would, and reads until the server closes: a
server that keeps a connection open it should have closed fails by TimeoutError.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.agent.server_helpers import Served, exchange, read_until_closed, serving, statuses

GET = b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n"


@pytest.fixture
def served() -> Iterator[Served]:
    with serving() as running:
        yield running


def _smuggling_post(framing: bytes, body: bytes) -> bytes:
    return b"POST /metrics HTTP/1.1\r\nHost: node\r\n" + framing + b"\r\n" + body


SMUGGLED = b"GET /nothere HTTP/1.1\r\nHost: node\r\n\r\n"


@pytest.mark.parametrize(
    "request_bytes",
    [
        _smuggling_post(b"Content-Length: %d\r\n" % len(SMUGGLED), SMUGGLED),
        _smuggling_post(
            b"Transfer-Encoding: chunked\r\n",
            b"%x\r\n" % len(SMUGGLED) + SMUGGLED + b"\r\n0\r\n\r\n",
        ),
        # a GET may carry a body too; it is answered, and the body never parsed
        b"GET /metrics HTTP/1.1\r\nHost: node\r\nContent-Length: %d\r\n\r\n" % len(SMUGGLED)
        + SMUGGLED,
    ],
    ids=["post-content-length", "post-chunked", "get-with-body"],
)
def test_a_body_is_never_read_as_the_next_request(served: Served, request_bytes: bytes) -> None:
    # before: 405 then 404 on one connection: the POST's body was parsed as a request
    replies = statuses(exchange(served.port, request_bytes))
    assert len(replies) == 1 and replies[0] in (200, 405)
    assert b"/nothere" not in request_bytes[:20]


def test_http09_request_is_answered_400_and_closed_at_once(served: Served) -> None:
    # before: no reply, and the connection held for the 10 s receive timeout
    started = time.monotonic()
    raw = exchange(served.port, b"GET /metrics\r\n", timeout=3)
    assert statuses(raw) == [400]
    assert time.monotonic() - started < 2
    assert served.refused()["malformed"] == 1


def test_tls_client_hello_on_the_plain_port_is_refused_at_once(served: Served) -> None:
    hello = bytes.fromhex("16030100f4010000f00303") + b"\x00" * 40  # a ClientHello's start
    assert statuses(exchange(served.port, hello, timeout=3)) == [400]


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET /metrics HTTP/1.1\r\nHost : node\r\n\r\n", 400),  # space before the colon
        (b"GET /metrics HTTP/1.1\r\nHost: node\r\n folded\r\n\r\n", 400),  # obs-fold
        (
            b"GET /metrics HTTP/1.1\r\nHost: node\r\nContent-Length: 1\r\n"
            b"Content-Length: 2\r\n\r\n",
            400,
        ),
        (b"GET /metrics HTTP/1.1\r\nHost: node\r\nContent-Length: -1\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host
        (b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: node\r\nX: a\rb\r\n\r\n", 400),  # bare CR
        (b"GET  /metrics HTTP/1.1\r\nHost: node\r\n\r\n", 400),
        (b"GET metrics HTTP/1.1\r\nHost: node\r\n\r\n", 400),
        (b"GET /metrics HTTP/2.0\r\nHost: node\r\n\r\n", 505),
        (b"GET /metrics FTP/1.1\r\nHost: node\r\n\r\n", 400),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: node\r\n\r\n", 414),
        (b"GET /metrics HTTP/1.1\r\nHost: node\r\nX: " + b"a" * 17000 + b"\r\n\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\nHost: node\r\n" + b"X: a\r\n" * 101 + b"\r\n", 431),
    ],
)
def test_malformed_and_oversized_heads_are_refused_and_closed(
    served: Served, head: bytes, status: int
) -> None:
    # pipelined behind it: a valid request that must not be answered
    assert statuses(exchange(served.port, head + GET)) == [status]


def test_every_error_reply_closes_the_connection(served: Served) -> None:
    raw = exchange(served.port, b"GET /nope HTTP/1.1\r\nHost: node\r\n\r\n" + GET)
    assert statuses(raw) == [404]
    assert b"Connection: close" in raw


def test_pipelined_requests_are_answered_in_order_on_one_connection(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock:
        sock.sendall(GET + b"HEAD /healthz HTTP/1.1\r\nHost: node\r\n\r\n" + GET)
        time.sleep(0.3)
        sock.shutdown(socket.SHUT_WR)  # a half-closed client still gets its answers
        assert statuses(read_until_closed(sock, 5)) == [200, 200, 200]


@pytest.mark.parametrize(
    ("request_bytes", "kept"),
    [
        (b"GET /healthz HTTP/1.0\r\n\r\n", False),
        (b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", True),
        (b"GET /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n", False),
        (b"GET http://node/healthz?x=1 HTTP/1.1\r\nHost: node\r\n\r\n", True),  # absolute-form
        (b"\r\nGET /healthz HTTP/1.1\r\nHost: node\r\n\r\n", True),  # a stray CRLF first
        (b"GET /healthz HTTP/1.1\nHost: node\n\n", True),  # bare LF line ends
    ],
)
def test_keep_alive_follows_the_request(served: Served, request_bytes: bytes, kept: bool) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock:
        sock.sendall(request_bytes)
        reply = sock.recv(65536)
        assert statuses(reply) == [200]
        assert (b"Connection: keep-alive" in reply) == kept
        if kept:
            sock.sendall(GET)
            assert statuses(sock.recv(65536)) == [200]
        else:
            assert read_until_closed(sock, 5) == b""
