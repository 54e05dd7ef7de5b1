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
from nvwatch.agent.server.routes import Health, Router
from nvwatch.agent.threads import start_thread
from nvwatch.agent.webconfig import WebConfig

__all__ = [
    "REFUSAL_REASONS",
    "Health",
    "HttpState",
    "MetricsServer",
    "ServerLimits",
    "gzip_accepted",
    "wants_openmetrics",
]

# a few dozen scrapers (HA pairs, federation, ad-hoc curl) may connect at once, and a
# burst of connections should wait in the kernel, not be dropped, while the loop accepts
_BACKLOG = 512
_STOP_JOIN_S = 5.0


class MetricsServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        exposition: Callable[[], Exposition | None],
        health: Callable[[], Health],
        web_config: WebConfig | None = None,
        limits: ServerLimits | None = None,
    ) -> None:
        limits = limits or ServerLimits()
        self.stats = HttpStats(limits.connection_limit())
        # binding here, in the constructor, makes "address in use" a start-up error
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=_BACKLOG)
        pool = None
        if web_config is not None and web_config.users:
            auth = BasicAuth(web_config.users)
            pool = (auth, BcryptPool(auth, limits.bcrypt_workers, limits.bcrypt_queue))
        self._pool = pool[1] if pool else None
        router = Router(exposition, health)
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
