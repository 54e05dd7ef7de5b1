"""What each path answers: /metrics from the cached exposition, /healthz and /livez, a
landing page.

Runs on the server's loop thread and only copies cached bytes: no handler calls a source.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

from nvwatch.agent import __version__
from nvwatch.agent.exposition.render import OPENMETRICS_TYPE, TEXT_CONTENT_TYPE, Exposition
from nvwatch.agent.server.deferred import Deferred
from nvwatch.agent.server.negotiation import gzip_accepted, wants_openmetrics
from nvwatch.agent.server.request import Request
from nvwatch.agent.server.responses import Response, refusal


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str


ALLOWED_METHODS = ("GET", "HEAD")
UNAUTHORIZED = refusal(
    401, "unauthorized", "unauthorized", (("WWW-Authenticate", 'Basic realm="nvwatch"'),)
)
METHOD_NOT_ALLOWED = refusal(
    405, "method not allowed", "method_not_allowed", (("Allow", ", ".join(ALLOWED_METHODS)),)
)
AUTH_BUSY = refusal(
    429, "too many credentials to check, retry later", "auth_busy", (("Retry-After", "1"),)
)
RATE_LIMITED = refusal(429, "too many requests", "rate_limited", (("Retry-After", "1"),))


NO_PROBE = Response(404, b"no BMC config: this agent probes no BMC (serve --bmc-config FILE)\n")

Probe = Callable[[Request], "Response | Deferred"]


def _health_response(health: Health) -> Response:
    body = (("ok: " if health.ok else "stale: ") + health.detail + "\n").encode()
    return Response(200 if health.ok else 503, body)


class Router:
    def __init__(
        self,
        exposition: Callable[[], Exposition | None],
        health: Callable[[], Health],
        probe: Probe | None = None,
        liveness: Callable[[], Health] | None = None,
    ) -> None:
        self._exposition = exposition
        self._health = health
        self._probe = probe
        self._liveness = liveness or health

    def respond(self, request: Request) -> Response | Deferred:
        """The answer to an authorised GET or HEAD; a BMC probe's comes later, from a
        worker (agent/server/probe.py)."""
        path = request.path
        if path == "/metrics":
            return self._metrics(request)
        if path == "/probe":
            return self._probe(request) if self._probe is not None else NO_PROBE
        if path == "/healthz":
            return _health_response(self._health())
        if path == "/livez":
            return _health_response(self._liveness())
        if path == "/":
            return Response(200, self._landing().encode(), "text/html; charset=utf-8")
        return Response(404, b"not found\n")

    def _metrics(self, request: Request) -> Response:
        exposition = self._exposition()
        if exposition is None:
            return Response(503, b"no poll has completed yet\n")
        gzipped = gzip_accepted(request.header("Accept-Encoding"))
        if wants_openmetrics(request.header("Accept")):
            body, content_type = exposition.openmetrics(gzipped), OPENMETRICS_TYPE
        else:
            body = exposition.text_gzip if gzipped else exposition.text
            content_type = TEXT_CONTENT_TYPE
        headers: tuple[tuple[str, str], ...] = (("Vary", "Accept, Accept-Encoding"),)
        if gzipped:
            headers = (("Content-Encoding", "gzip"), *headers)
        return Response(200, body, content_type, headers)

    def _landing(self) -> str:
        exposition = self._exposition()
        rows = ""
        if exposition is not None:
            for status in exposition.snapshot.sources.values():
                why = status.error if not status.up else status.absent_reason
                state = f"{status.state}: {why}" if why else status.state
                rows += f"<tr><td>{html.escape(status.name)}</td><td>{html.escape(state)}</td></tr>"
        health = self._health()
        simulated = exposition.simulated if exposition is not None else None
        return (
            "<!doctype html><html><head><title>nvwatch</title></head><body>"
            f"{_simulated_banner(simulated) if simulated else ''}"
            f"<h1>nvwatch {html.escape(__version__)}</h1>"
            "<p>GPU, NVLink and InfiniBand telemetry for Prometheus.</p>"
            f"<p>Polling: {html.escape(health.detail)}</p>"
            f"<table><tr><th>source</th><th>state</th></tr>{rows}</table>"
            '<p><a href="/metrics">/metrics</a> · <a href="/healthz">/healthz</a>'
            f"{' · /probe?target=BMC&amp;module=NAME' if self._probe else ''}</p>"
            "</body></html>\n"
        )


def _simulated_banner(profile: str) -> str:
    """Top of the landing page of an agent on a simulated node: no one may take it for
    a real one (its serials, UUIDs and driver version look real)."""
    return (
        '<p role="alert" style="background:#c00;color:#fff;padding:1em;font-weight:bold">'
        f"SIMULATED: this agent reads a simulated {html.escape(profile)} node (--simulate or "
        "NVWATCH_SIMULATE), not real hardware. Every GPU, serial and UUID it serves is "
        "made up; /metrics says so in nvwatch_agent_simulated.</p>"
    )
