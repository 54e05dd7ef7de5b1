"""HTTP: /metrics from the cached exposition, /healthz, a landing page.

Threaded, with a socket timeout per connection, so one slow or stalled client cannot
block the others; no handler ever calls a source.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import html
import logging
import math
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent import __version__
from agent.exposition.render import OPENMETRICS_TYPE, TEXT_CONTENT_TYPE, Exposition
from agent.threads import start_thread
from agent.webconfig import WebConfig

log = logging.getLogger(__name__)

# --- content negotiation ------------------------------------------------------------------
# prometheus_client's choose_encoder() and gzip_accepted() match names and ignore q-values
# (they serve gzip for "gzip;q=0" and OpenMetrics for "application/openmetrics-text;q=0"),
# so the agent weighs RFC 9110 q-values itself. One version of each format is served, so a
# media range's version parameter does not change which format is chosen.

_TEXT = "text/plain"
_OPENMETRICS = "application/openmetrics-text"


def _weighted(header: str) -> list[tuple[str, float]]:
    """'a;v=1;q=0.5, B' -> [('a', 0.5), ('b', 1.0)]: lower-cased names and their q-values."""
    items = []
    for element in header.split(","):
        name, *params = (part.strip() for part in element.split(";"))
        if name:
            items.append((name.lower(), _qvalue(params)))
    return items


def _qvalue(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return 0.0  # an unreadable weight accepts nothing rather than everything
            return min(1.0, max(0.0, q)) if math.isfinite(q) else 0.0
    return 1.0


def _media_preference(offer: str, ranges: list[tuple[str, float]]) -> tuple[float, int, int]:
    """(q, specificity, -position) of the most specific range matching `offer`."""
    best = (0.0, -1, 0)
    for position, (media_range, q) in enumerate(ranges):
        if media_range == offer:
            specificity = 2
        elif media_range == offer.split("/")[0] + "/*":
            specificity = 1
        elif media_range == "*/*":
            specificity = 0
        else:
            continue
        # the most specific range decides; of equally specific ones (two OpenMetrics
        # versions, say) the highest weight counts
        if specificity > best[1] or (specificity == best[1] and q > best[0]):
            best = (q, specificity, -position)
    return best


def wants_openmetrics(accept: str | None) -> bool:
    """Whether an Accept header prefers OpenMetrics over the Prometheus text format.

    The higher q wins; on equal q the more specific match (a named type beats `*/*`), then
    the one the client listed first. Text on a full tie (`*/*`, as curl sends), when
    neither is acceptable, and without a header, as Prometheus' own exporters do.
    """
    if not accept or not accept.strip():
        return False
    ranges = _weighted(accept)
    openmetrics = _media_preference(_OPENMETRICS, ranges)
    return openmetrics[0] > 0 and openmetrics > _media_preference(_TEXT, ranges)


def gzip_accepted(accept_encoding: str | None) -> bool:
    """Whether to gzip a response, by an Accept-Encoding header's q-values.

    gzip's weight is its own entry's (or `x-gzip`'s, its registered alias), else that of
    `*`; the response is gzipped when that weight is above zero and not below identity's
    (its own entry's, else `*`'s; a header that names neither leaves identity out).
    """
    codings: dict[str, float] = {}
    for name, q in _weighted(accept_encoding or ""):
        codings.setdefault("gzip" if name == "x-gzip" else name, q)
    gzip_q = codings.get("gzip", codings.get("*", 0.0))
    identity_q = codings.get("identity", codings.get("*"))
    return gzip_q > 0 and (identity_q is None or gzip_q >= identity_q)


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str


# A connection thread whose socket was shut down ends within a moment; a bound keeps a
# handler stuck elsewhere (writing to a client that stopped reading) from holding shutdown.
_CONNECTION_JOIN_S = 1.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # documents intent; process_request below starts the threads
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops connections when a few dozen scrapers
    # (HA pairs, federation, ad-hoc curl) connect at once
    request_queue_size = 128
    # set by MetricsServer; the handler reads them through self.server
    exposition: Callable[[], Exposition | None]
    health: Callable[[], Health]
    web_config: WebConfig | None

    def __init__(self, address: tuple[str, int]) -> None:
        # before binding: a failed bind calls server_close(), which reads these
        self._connections: list[tuple[threading.Thread, socket.socket]] = []
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # socketserver's ThreadingMixIn starts this thread itself; here it goes through the
        # agent's one thread helper, and the socket is kept so server_close() can end it.
        thread = start_thread(
            "nvwatch-http-conn",
            functools.partial(self.process_request_thread, request, client_address),
            daemon=True,
        )
        with self._connections_lock:
            self._connections = [(t, r) for t, r in self._connections if t.is_alive()]
            self._connections.append((thread, request))

    def server_close(self) -> None:
        super().server_close()
        with self._connections_lock:
            connections, self._connections = self._connections, []
        # A scraper's keep-alive connection would hold its thread in recv() for as long as
        # the scraper keeps asking: a stopped server must fail open connections, not wait
        # for them (a stopped agent looks dead to Prometheus at once, as a killed one does).
        for _, request in connections:
            with contextlib.suppress(OSError):
                request.shutdown(socket.SHUT_RDWR)
        for thread, _ in connections:
            thread.join(timeout=_CONNECTION_JOIN_S)

    def handle_error(self, request: object, client_address: object) -> None:
        # clients that hang up, speak HTTP to the TLS port or time out are routine for an
        # exporter; a traceback per occurrence would drown the log
        log.debug("connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10  # seconds a client may take to send its request
    # Headers and body leave through a buffered writer (flushed by http.server after each
    # request) instead of one unbuffered write per piece, and TCP_NODELAY is on: a small
    # response otherwise waits ~40 ms on Nagle and the client's delayed ACK.
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server_version = f"nvwatch/{__version__}"

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _method_not_allowed(self) -> None:
        self._send(
            405,
            b"method not allowed\n",
            "text/plain; charset=utf-8",
            head=False,
            extra={"Allow": "GET, HEAD"},
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _method_not_allowed

    def _respond(self, head: bool) -> None:
        if not self._authorized():
            self._send(
                401,
                b"unauthorized\n",
                "text/plain; charset=utf-8",
                head,
                extra={"WWW-Authenticate": 'Basic realm="nvwatch"'},
            )
            return
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._metrics(head)
        elif path == "/healthz":
            health = self.server.health()
            body = (("ok: " if health.ok else "stale: ") + health.detail + "\n").encode()
            self._send(200 if health.ok else 503, body, "text/plain; charset=utf-8", head)
        elif path == "/":
            self._send(200, self._landing().encode(), "text/html; charset=utf-8", head)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8", head)

    def _authorized(self) -> bool:
        config = self.server.web_config
        if config is None or not config.users:
            return True
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return config.authorized(user, password)

    def _metrics(self, head: bool) -> None:
        exposition = self.server.exposition()
        if exposition is None:
            self._send(503, b"no poll has completed yet\n", "text/plain; charset=utf-8", head)
            return
        gzipped = gzip_accepted(self._header("Accept-Encoding"))
        if wants_openmetrics(self._header("Accept")):
            body, content_type = exposition.openmetrics(gzipped), OPENMETRICS_TYPE
        else:
            body = exposition.text_gzip if gzipped else exposition.text
            content_type = TEXT_CONTENT_TYPE
        extra = {"Content-Encoding": "gzip"} if gzipped else {}
        extra["Vary"] = "Accept, Accept-Encoding"
        self._send(200, body, content_type, head, extra=extra)

    def _header(self, name: str) -> str | None:
        # a header sent on several lines means the same as one comma-separated line
        values = self.headers.get_all(name)
        return ", ".join(values) if values else None

    def _landing(self) -> str:
        exposition = self.server.exposition()
        rows = ""
        if exposition is not None:
            for status in exposition.snapshot.sources.values():
                why = status.error if not status.up else status.absent_reason
                state = f"{status.state}: {why}" if why else status.state
                rows += f"<tr><td>{html.escape(status.name)}</td><td>{html.escape(state)}</td></tr>"
        health = self.server.health()
        return (
            "<!doctype html><html><head><title>nvwatch</title></head><body>"
            f"<h1>nvwatch {html.escape(__version__)}</h1>"
            "<p>GPU, NVLink and InfiniBand telemetry for Prometheus.</p>"
            f"<p>Polling: {html.escape(health.detail)}</p>"
            f"<table><tr><th>source</th><th>state</th></tr>{rows}</table>"
            '<p><a href="/metrics">/metrics</a> · <a href="/healthz">/healthz</a></p>'
            "</body></html>\n"
        )

    def _send(
        self,
        code: int,
        body: bytes,
        content_type: str,
        head: bool,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)


class MetricsServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        exposition: Callable[[], Exposition | None],
        health: Callable[[], Health],
        web_config: WebConfig | None = None,
    ) -> None:
        # binding here, in the constructor, makes "address in use" a start-up error
        self._server = _Server((host, port))
        self._server.exposition = exposition
        self._server.health = health
        self._server.web_config = web_config
        if web_config is not None and web_config.tls:
            # handshake lazily, in the connection's own thread and under its timeout, so a
            # client that stalls mid-handshake cannot block the accept loop
            self._server.socket = web_config.ssl_context().wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = start_thread(
            "nvwatch-http",
            functools.partial(self._server.serve_forever, poll_interval=0.1),
            daemon=True,
        )

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
