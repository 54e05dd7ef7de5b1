"""GET one URL of an agent the way its scraper does: TLS verified, basic auth from files.

With `basic_auth_users` every path of the agent needs credentials, `/livez` included,
and a Kubernetes `httpGet` probe can neither verify a private CA nor send a password
held in a Secret. `nvwatch web-config get` is the exec probe's client instead: the CA,
user and password files of the mounted Secret, the answer as an exit code. The request
goes through the connection the report's Prometheus client builds as well (its TLS
context and Authorization header, common/http_connection.py), so there is one way nvwatch
makes an HTTPS request.
"""

from __future__ import annotations

import http.client
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

from nvwatch.common.http_connection import Connection, auth_headers, ssl_context

_BODY_BYTES = 512  # the first line of /livez's answer ("stale: last poll ...") fits
_LINE_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


class Unreachable(Exception):
    """No HTTP answer at all: refused, timed out, or a TLS handshake that failed."""


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    first_line: str  # of the body, cut to one short line

    def describe(self, url: str) -> str:
        said = f": {self.first_line}" if self.first_line.lower() != self.reason.lower() else ""
        return f"{url}: HTTP {self.status} {self.reason}{said}"


def get(connection: Connection) -> Answer:
    """GET connection.url; Unreachable (one line) when no HTTP answer came,
    ConnectionSetupError for a CA file that cannot be loaded."""
    context = ssl_context(connection)
    # the agent is named by its own address: never through a proxy the environment names
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    request = urllib.request.Request(
        connection.url, headers={**connection.headers, **auth_headers(connection)}
    )
    try:
        with opener.open(request, timeout=connection.timeout_seconds) as response:
            return Answer(response.status, response.reason, _first_line(response.read(_BODY_BYTES)))
    except urllib.error.HTTPError as err:
        return Answer(err.code, str(err.reason), _first_line(_read(err)))
    except (OSError, http.client.HTTPException) as err:
        reason = getattr(err, "reason", None) or err
        raise Unreachable(f"cannot reach {connection.url}: {_one_line(str(reason))}") from None


def _read(err: urllib.error.HTTPError) -> bytes:
    try:
        return err.read(_BODY_BYTES)
    except (OSError, http.client.HTTPException):
        return b""


def _first_line(body: bytes) -> str:
    lines = body.decode("utf-8", "replace").strip().splitlines()
    return _one_line(lines[0]) if lines else ""


def _one_line(text: str) -> str:
    flat = _CONTROL.sub(" ", text).strip()
    return flat if len(flat) <= _LINE_CHARS else flat[: _LINE_CHARS - 3] + "..."
