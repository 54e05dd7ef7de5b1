"""HTTP: /metrics from the cached exposition, /healthz, a landing page.

One event-loop thread serves every connection (agent/server/loop.py says why), with a
deadline for each request, a limit on connections and a budget for bcrypt
(agent/server/limits.py); no handler ever calls a source.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from nvwatch.agent.exposition.render import Exposition
from nvwatch.agent.server.auth import BasicAuth, BcryptPool
from nvwatch.agent.server.limits import REFUSAL_REASONS, HttpState, HttpStats, ServerLimits
from nvwatch.agent.server.loop import EventLoop
from nvwatch.agent.server.negotiation import gzip_accepted, wants_openmetrics
from nvwatch.agent.server.routes import Health, Probe, Router
from nvwatch.agent.threads import start_thread
from nvwatch.agent.webconfig import WebConfig

__all__ = [
    "REFUSAL_REASONS",
    "Health",
    "HttpState",
    "MetricsServer",
    "ServerLimits",
    "gzip_accepted",
    "listen",
    "wants_openmetrics",
]

# a few dozen scrapers (HA pairs, federation, ad-hoc curl) may connect at once, and a
# burst of connections should wait in the kernel, not be dropped, while the loop accepts
_BACKLOG = 512
_STOP_JOIN_S = 5.0


def listen(host: str, port: int, ipv6_only: bool) -> socket.socket:
    """A listening socket; the IPv6 wildcard takes IPv4 too unless `ipv6_only`, as Go's
    servers do for `[::]:PORT`, so an exporter flag copied across behaves the same."""
    if ":" not in host:
        return socket.create_server((host, port), family=socket.AF_INET, backlog=_BACKLOG)
    address, _, zone = host.partition("%")
    dual = host == "::" and not ipv6_only and socket.has_dualstack_ipv6()
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual else 1)
        sock.bind((address, port, 0, _scope_id(zone)))
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def _scope_id(zone: str) -> int:
    """The interface a zone id (fe80::1%eth0, or %2) names; OSError for an unknown one."""
    if not zone:
        return 0
    if zone.isascii() and zone.isdigit() and len(zone) <= 10:
        return int(zone)
    return socket.if_nametoindex(zone)


class MetricsServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        ipv6_only: bool = False,
        exposition: Callable[[], Exposition | None],
        health: Callable[[], Health],
        web_config: WebConfig | None = None,
        limits: ServerLimits | None = None,
        probe: Probe | None = None,
        listener: socket.socket | None = None,
        liveness: Callable[[], Health] | None = None,
    ) -> None:
        limits = limits or ServerLimits()
        self.stats = HttpStats(limits.connection_limit())
        # binding here, in the constructor, makes "address in use" a start-up error;
        # `nvwatch serve` binds before anything else starts and hands the socket over
        self._listener = listener or listen(host, port, ipv6_only)
        pool = None
        if web_config is not None and web_config.users:
            auth = BasicAuth(web_config.users)
            pool = (auth, BcryptPool(auth, limits.bcrypt_workers))
        self._pool = pool[1] if pool else None
        router = Router(exposition, health, probe, liveness)
        self._loop = EventLoop(self._listener, router, web_config, pool, limits, self.stats)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def http_state(self) -> HttpState:
        """The server's counts, for the agent's own metrics."""
        return self.stats.state()

    def start(self) -> None:
        if self._pool is not None:
            self._pool.start()
        self._thread = start_thread("nvwatch-http", self._loop.run, daemon=True)

    def stop(self) -> None:
        """Fail open connections (keep-alive ones too) at once, unbind, end the threads."""
        if self._thread is None:
            self._loop.close()
        else:
            self._loop.stop()
            self._thread.join(_STOP_JOIN_S)
            self._thread = None
        if self._pool is not None:
            self._pool.stop(timeout=1.0)
