"""HTTP/1.x request heads, parsed from a connection's buffer with hard limits.

The agent never reads a request body: GET and HEAD need none, and a request that carries
one (Content-Length above zero or any Transfer-Encoding) is answered and its connection
closed, so a body can never be read as the next request (request smuggling, desync).
Everything a lenient parser would guess at (HTTP/0.9, folded headers, a space before the
colon, two different Content-Lengths, a bare CR) is refused with 400, as Go's server does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from nvwatch.agent.server.limits import ServerLimits

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TOKEN_BYTES = frozenset(
    b"!#$%&'*+-.^_`|~0123456789" + bytes(range(65, 91)) + bytes(range(97, 123))
)
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)")
# request targets are ASCII without spaces or controls; clients percent-encode the rest
_TARGET = re.compile(rb"[!-~]+")
_VALUE_FORBIDDEN = re.compile(rb"[\x00\r\n]")
_DIGITS = re.compile(r"[0-9]+")
# A Content-Length is judged by its digits before int() sees it: Python refuses to
# convert more than 4,300 digits with a ValueError, and the agent never reads a body, so
# any length needing more digits than this is refused whatever its value. Leading zeros
# are stripped first ("0000...05" is 5), so they cannot pad past the check either.
MAX_LENGTH_DIGITS = 18


class HttpError(Exception):
    """A request head to refuse: the status to answer and the refusal reason to count."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    version: tuple[int, int]
    # lower-cased name -> every value sent under it, in order
    headers: Mapping[str, tuple[str, ...]]
    keep_alive: bool
    has_body: bool

    def header(self, name: str) -> str | None:
        """A header's value; one sent on several lines means its values joined by commas."""
        values = self.headers.get(name.lower())
        return ", ".join(values) if values else None

    @property
    def path(self) -> str:
        target = self.target
        if target.startswith(("http://", "https://")):
            # absolute-form (RFC 9112 3.2.2), as a proxy would send it
            rest = target.split("//", 1)[1]
            target = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
        return target.split("?", 1)[0]


def take_request(buffer: bytearray, limits: ServerLimits) -> Request | None:
    """Remove one request head from the front of `buffer` and return it.

    None while the head is incomplete; HttpError as soon as what arrived can no longer
    become a valid head, so a client speaking HTTP/0.9, TLS or garbage is answered at once
    instead of being held until the request deadline.
    """
    _skip_blank_lines(buffer)
    line_end = buffer.find(b"\n")
    if line_end < 0:
        if buffer and buffer[0] not in _TOKEN_BYTES:
            raise HttpError(400, "malformed", "not an HTTP request")
        if len(buffer) > limits.max_request_line:
            raise HttpError(414, "too_large", "request line too long")
        return None
    if line_end > limits.max_request_line:
        raise HttpError(414, "too_large", "request line too long")
    method, target, version = _request_line(bytes(buffer[:line_end]).rstrip(b"\r"))
    end, consumed = _head_end(buffer)
    if end < 0 or end > limits.max_head_bytes:
        if end < 0 and len(buffer) <= limits.max_head_bytes:
            return None
        raise HttpError(431, "too_large", "request header fields too large")
    lines = bytes(buffer[:end]).split(b"\n")[1:]
    del buffer[:consumed]
    headers = _headers(lines, limits.max_headers)
    return _request(method, target, version, headers)


def _skip_blank_lines(buffer: bytearray) -> None:
    # RFC 9112 2.2: a server SHOULD ignore empty lines received before the request line
    # (some clients send a CRLF after a POST body)
    stripped = buffer.lstrip(b"\r\n")
    if len(stripped) != len(buffer):
        del buffer[: len(buffer) - len(stripped)]


def _request_line(line: bytes) -> tuple[str, str, tuple[int, int]]:
    parts = line.split(b" ")
    if len(parts) != 3:
        # two parts is HTTP/0.9 ("GET /"): it has no headers and no status line to
        # answer with, so it is refused like any other malformed line
        raise HttpError(400, "malformed", "malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method) or not _TARGET.fullmatch(target):
        raise HttpError(400, "malformed", "malformed request line")
    match = _VERSION.fullmatch(version)
    if match is None:
        raise HttpError(400, "malformed", "malformed HTTP version")
    if match.group(1) != b"1":
        raise HttpError(505, "malformed", "HTTP version not supported")
    if not target.startswith((b"/", b"http://", b"https://")) and target != b"*":
        raise HttpError(400, "malformed", "malformed request target")
    return method.decode("ascii"), target.decode("ascii"), (1, int(match.group(2)))


def _head_end(buffer: bytearray) -> tuple[int, int]:
    """(end of the head, bytes to consume with its blank line), or (-1, 0) if incomplete."""
    ends = [
        (found + 1, found + len(sep))
        for sep in (b"\n\n", b"\n\r\n")
        if (found := buffer.find(sep)) >= 0
    ]
    return min(ends) if ends else (-1, 0)


def _headers(lines: list[bytes], limit: int) -> dict[str, tuple[str, ...]]:
    headers: dict[str, tuple[str, ...]] = {}
    count = 0
    for raw in lines:
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line:
            continue
        count += 1
        if count > limit:
            raise HttpError(431, "too_large", "too many header fields")
        name, colon, value = line.partition(b":")
        # obs-fold (a line starting with whitespace) and "Name : value" are both ways
        # to make two parsers disagree on a header: RFC 9112 5.1 says reject them
        if not colon or not _TOKEN.fullmatch(name):
            raise HttpError(400, "malformed", "malformed header field")
        value = value.strip(b" \t")
        if _VALUE_FORBIDDEN.search(value):
            raise HttpError(400, "malformed", "malformed header value")
        key = name.decode("ascii").lower()
        headers[key] = (*headers.get(key, ()), value.decode("latin-1"))
    return headers


def _request(
    method: str, target: str, version: tuple[int, int], headers: dict[str, tuple[str, ...]]
) -> Request:
    hosts = headers.get("host", ())
    if len(hosts) > 1 or (version >= (1, 1) and not hosts):
        raise HttpError(400, "malformed", "missing or repeated Host header")
    lengths = {
        part.strip() for value in headers.get("content-length", ()) for part in value.split(",")
    }
    if len(lengths) > 1 or any(not _DIGITS.fullmatch(length) for length in lengths):
        raise HttpError(400, "malformed", "invalid Content-Length")
    # every length judged, a Transfer-Encoding beside it or not: one too long is a 413
    body_lengths = [_body_length(n) for n in lengths]
    has_body = "transfer-encoding" in headers or any(n > 0 for n in body_lengths)
    tokens = {
        token.strip().lower()
        for value in headers.get("connection", ())
        for token in value.split(",")
    }
    keep_alive = "close" not in tokens and (version >= (1, 1) or "keep-alive" in tokens)
    return Request(method, target, version, headers, keep_alive, has_body)


def _body_length(digits: str) -> int:
    """A Content-Length's value (ASCII digits); 413 when it needs too many digits."""
    significant = digits.lstrip("0")
    if len(significant) > MAX_LENGTH_DIGITS:
        raise HttpError(413, "too_large", "Content-Length too large")
    return int(significant or "0")
