"""Fuzz what the HTTP server parses from a client: request heads, Accept, Accept-Encoding
and Authorization. Any bytes must give a request, "incomplete", or HttpError (which the
server answers with its status and closes); nothing else may escape to the loop thread.
"""

from __future__ import annotations

import bcrypt
from hypothesis import given
from hypothesis import strategies as st

from nvwatch.agent.server.auth import BasicAuth, Pending, basic_credentials
from nvwatch.agent.server.limits import ServerLimits
from nvwatch.agent.server.negotiation import gzip_accepted, wants_openmetrics
from nvwatch.agent.server.request import HttpError, take_request

from .strategies import FUZZ, near

LIMITS = ServerLimits()
HEADS = [
    "GET /metrics HTTP/1.1\r\nHost: node\r\nAccept-Encoding: gzip\r\n\r\n",
    "GET /metrics HTTP/1.0\r\n\r\n",
    "POST /metrics HTTP/1.1\r\nHost: n\r\nContent-Length: 5\r\n\r\nhello",
    "GET http://n/healthz?x=1 HTTP/1.1\r\nHost: n\r\nConnection: close, keep-alive\r\n\r\n",
    "GET / HTTP/1.1\nHost: n\nTransfer-Encoding: chunked\n\n",
]
ACCEPTS = [
    "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "text/plain;q=0.5, */*",
    "gzip;q=0, identity",
    "x-gzip, deflate;q=0.5",
]


def _parse_all(data: bytes) -> None:
    buffer = bytearray(data)
    for _ in range(len(data) + 1):
        try:
            request = take_request(buffer, LIMITS)
        except HttpError as exc:
            assert exc.status in (400, 414, 431, 505) and exc.reason in ("malformed", "too_large")
            return
        if request is None:
            return
        assert request.method and request.path.startswith(("/", "*"))
        assert isinstance(request.keep_alive, bool) and isinstance(request.has_body, bool)


@FUZZ
@given(st.binary(max_size=300))
def test_request_heads_from_any_bytes(data: bytes) -> None:
    _parse_all(data)


@FUZZ
@given(near(HEADS))
def test_request_heads_near_real_ones(text: str) -> None:
    _parse_all(text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(near(ACCEPTS))
def test_accept_and_accept_encoding(header: str) -> None:
    assert isinstance(wants_openmetrics(header), bool)
    assert isinstance(gzip_accepted(header), bool)


# a password no fuzzed header carries: every check must end in a plain False
AUTH = BasicAuth({"prometheus": bcrypt.hashpw(b"not-fuzzed\x00", bcrypt.gensalt(rounds=4))})


@FUZZ
@given(near(["Basic cHJvbWV0aGV1czpzM2NyZXQ=", "basic Og==", "Bearer x"]))
def test_authorization_headers(header: str) -> None:
    credentials = basic_credentials(header)
    assert credentials is None or all(isinstance(part, bytes) for part in credentials)
    verdict = AUTH.check(header)
    assert verdict is False or isinstance(verdict, Pending)
    if isinstance(verdict, Pending):
        assert AUTH.verify(verdict) is False
