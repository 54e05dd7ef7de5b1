"""HTTP responses as the server writes them: a head of bytes and the body, not copied."""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from http import HTTPStatus

from nvwatch.agent import __version__

TEXT_UTF8 = "text/plain; charset=utf-8"
SERVER = f"nvwatch/{__version__}"


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = TEXT_UTF8
    headers: tuple[tuple[str, str], ...] = ()
    # close the connection after this response (every error reply does: a client that
    # got one may have sent more than the server read, see agent/server/request.py)
    close: bool = False
    # the refusal reason this response counts under (agent/server/limits.py), if any
    refused: str | None = None


def refusal(
    status: int, text: str, reason: str | None, headers: tuple[tuple[str, str], ...] = ()
) -> Response:
    """An error reply: a one-line plain-text body, counted, and the connection closed."""
    return Response(status, (text + "\n").encode(), headers=headers, close=True, refused=reason)


class _Date:
    """The Date header, formatted once a second rather than once a response."""

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._second, self._text = second, email.utils.formatdate(second, usegmt=True)
        return self._text


_date = _Date()
# bodies up to this size go out in one piece with their head: one packet, one TLS record
_JOIN_BELOW = 16 * 1024


def encode(
    response: Response,
    *,
    head_only: bool,
    keep_alive: bool,
    extra: tuple[tuple[str, str], ...] = (),
) -> list[bytes]:
    """The bytes to send: status line and headers, then the body (left out for HEAD).

    `extra` are the web config's http_server_config.headers, on every response.
    """
    status = HTTPStatus(response.status)
    lines = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Date: {_date.now()}",
        f"Server: {SERVER}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
    ]
    lines += [f"{name}: {value}" for name, value in (*response.headers, *extra)]
    # HTTP/1.0 clients that asked for keep-alive get it said back; 1.1 assumes it
    lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    if head_only or not response.body:
        return [head]
    if len(response.body) < _JOIN_BELOW:
        return [head + response.body]
    return [head, response.body]
