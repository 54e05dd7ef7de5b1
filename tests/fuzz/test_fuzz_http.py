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
            assert exc.status in (400, 413, 414, 431, 505)
            assert exc.reason in ("malformed", "too_large")
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


# every header the server reads, and names it does not; values that are numbers of any
# size (a 5,000-digit Content-Length once killed the server thread), padded with zeros,
# lists, and arbitrary text
HEADER_NAMES = [
    "Host", "Content-Length", "Transfer-Encoding", "Connection", "Authorization",
    "Accept", "Accept-Encoding", "X-Other",
]  # fmt: skip
NUMBERS = st.builds(
    lambda zeros, digits: "0" * zeros + digits,
    st.integers(0, 5000),
    st.one_of(
        st.integers(0, 10**20).map(str),
        st.text(alphabet="0123456789", min_size=1, max_size=40),
        # built, not drawn digit by digit: hypothesis's own repr of such an int fails
        st.tuples(st.sampled_from("123456789"), st.integers(19, 6000)).map(lambda p: p[0] * p[1]),
    ),
)
VALUES = st.one_of(
    NUMBERS,
    st.lists(NUMBERS, min_size=1, max_size=3).map(", ".join),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=40),
)


@FUZZ
@given(
    st.lists(st.tuples(st.sampled_from(HEADER_NAMES), VALUES), max_size=6),
    st.sampled_from(["GET", "HEAD", "POST"]),
)
def test_every_header_with_any_value(headers: list[tuple[str, str]], method: str) -> None:
    head = f"{method} /metrics HTTP/1.1\r\nHost: n\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers if name != "Host"
    )
    data = (head + "\r\n").encode("latin-1")
    limits = ServerLimits(max_head_bytes=64 * 1024, max_request_line=64 * 1024)
    lengths = [value for name, value in headers if name == "Content-Length"]
    try:
        request = take_request(bytearray(data), limits)
    except HttpError as exc:
        assert exc.status in (400, 413, 431)
        if exc.status == 413:
            assert any(len(v.strip().lstrip("0")) > 18 for x in lengths for v in x.split(","))
        return
    assert request is not None
    for value in lengths:
        for part in value.split(","):
            assert len(part.strip().lstrip("0")) <= 18
