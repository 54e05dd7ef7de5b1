"""HTTP: /metrics from the cached exposition, /healthz, a landing page.

Threaded, with a socket timeout per connection, so one slow or stalled client cannot
block the others; no handler ever calls a source.
"""

from __future__ import annotations

import base64
import binascii
import html
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agent import __version__
from agent.exposition.render import OPENMETRICS_TYPE, TEXT_CONTENT_TYPE, Exposition
from agent.webconfig import WebConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops connections when a few dozen scrapers
    # (HA pairs, federation, ad-hoc curl) connect at once
    request_queue_size = 128
    # set by MetricsServer; the handler reads them through self.server
    exposition: Callable[[], Exposition | None]
    health: Callable[[], Health]
    web_config: WebConfig | None

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
        gzipped = "gzip" in self.headers.get("Accept-Encoding", "")
        if "application/openmetrics-text" in self.headers.get("Accept", ""):
            body, content_type = exposition.openmetrics(gzipped), OPENMETRICS_TYPE
        else:
            body = exposition.text_gzip if gzipped else exposition.text
            content_type = TEXT_CONTENT_TYPE
        extra = {"Content-Encoding": "gzip"} if gzipped else {}
        extra["Vary"] = "Accept, Accept-Encoding"
        self._send(200, body, content_type, head, extra=extra)

    def _landing(self) -> str:
        exposition = self.server.exposition()
        rows = ""
        if exposition is not None:
            for status in exposition.snapshot.sources.values():
                state = "up" if status.up else f"down: {status.error}"
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
        self._server = _Server((host, port), _Handler)
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
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="nvwatch-http",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
