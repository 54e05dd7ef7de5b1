"""What one client may cost the server, and the counts of what was refused.

Every bound here exists because an exporter listens on every node of a cluster, where
anything that can reach the port can try to exhaust it; docs/security.md states them.
"""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

# Why a connection or request was refused; every reason is exported (0 until it happens),
# so an alert can watch any of them without waiting for the first occurrence.
REFUSAL_REASONS = (
    "connection_limit",  # at the limit with nothing to evict: 503 and close
    "evicted",  # closed to make room: the connection waiting longest for its request
    "header_timeout",  # request head (and TLS handshake) not complete within the deadline
    "write_timeout",  # client did not read its response within the deadline
    "malformed",  # 400 / 505: HTTP/0.9, bad request line, header or framing
    "too_large",  # 413 / 414 / 431: Content-Length, request line or head over the limits
    "method_not_allowed",  # 405: anything but GET and HEAD
    "unauthorized",  # 401: missing or wrong basic-auth credentials
    "auth_busy",  # 429: the bcrypt budget was spent; answered without checking
    "rate_limited",  # 429: web config rate_limit
    "tls_handshake",  # handshake failed: no or untrusted client certificate, bad version
    "client_cert_san",  # client certificate without an allowed SAN (client_allowed_sans)
    "http_on_tls_port",  # plain HTTP sent to the TLS port: 400 in plain HTTP
    "accept_failed",  # accept() failed (out of file descriptors): accepting pauses briefly
    "internal_error",  # a bug met serving a connection: logged, that connection closed
)


@dataclass(frozen=True)
class ServerLimits:
    # The whole request head, TLS handshake included, must arrive within this many seconds
    # of the connection opening or of the first byte of a later request: a client sending
    # a byte every few seconds (slowloris) is closed after this, not kept forever.
    header_timeout_s: float = 10.0
    # A keep-alive connection may wait this long for its next request: longer than
    # Prometheus' usual scrape intervals (up to 1m), so scrapers reuse their connection.
    idle_timeout_s: float = 90.0
    # A client must read its whole response within this many seconds.
    write_timeout_s: float = 30.0
    # After an error reply the server stops sending and reads (and drops) what the
    # client still sends for up to this long, so the reply is not lost to a TCP reset.
    linger_s: float = 2.0
    linger_bytes: int = 256 * 1024
    # Open connections, at most; lowered to fit the process's file-descriptor limit.
    # An idle connection costs a socket and a few hundred bytes, not a thread.
    max_connections: int = 4096
    max_request_line: int = 8 * 1024
    max_head_bytes: int = 16 * 1024
    max_headers: int = 100
    # bcrypt checks of credentials not yet verified: how many run at once (threads, each
    # up to one core) and how many may wait; beyond that a request gets 429 at once.
    # Waiting checks run known clients' first, then new clients', then suspects' (those
    # whose check failed lately); a better one evicts the newest of the worst when the
    # queue is full (agent/server/admission.py).
    bcrypt_workers: int = 1
    bcrypt_queue: int = 4
    # checks one client (address, or verified client certificate) may have running or
    # waiting: one host flooding wrong passwords holds one place, not every place
    bcrypt_per_client: int = 1
    # places in the queue suspects may hold together: the rest stays free for clients not
    # flooding, so a new scraper waits for at most the check running and its own
    bcrypt_suspect_queue: int = 2
    # a client is a suspect this long after a check of its credentials failed
    bcrypt_suspect_s: float = 60.0

    def connection_limit(self) -> int:
        """`max_connections`, lowered to leave the rest of the agent 128 descriptors."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(1, min(self.max_connections, soft - 128))


@dataclass(frozen=True)
class HttpState:
    """The server's counts at one moment: what the agent's own metrics publish with a
    poll (agent/exposition/render.py AgentState)."""

    refused: Mapping[str, int]
    connections_open: int
    connections_limit: int


class HttpStats:
    """Counts kept by the server's loop thread, read by the poller when it publishes.

    Only the loop thread writes; a reader copies the dict under the GIL, and the key set
    never changes, so a copy is always a consistent set of integers.
    """

    def __init__(self, connection_limit: int) -> None:
        self.refused = dict.fromkeys(REFUSAL_REASONS, 0)
        self.connections_open = 0
        self.connection_limit = connection_limit

    def refuse(self, reason: str) -> None:
        self.refused[reason] += 1

    def state(self) -> HttpState:
        refused = MappingProxyType(dict(self.refused))
        return HttpState(refused, self.connections_open, self.connection_limit)


class RateLimiter:
    """A token bucket: one token every `interval_s`, at most `burst` saved (web config
    rate_limit, as golang.org/x/time/rate in exporter-toolkit)."""

    def __init__(self, interval_s: float, burst: int) -> None:
        self._interval = interval_s
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._at) / self._interval)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True
