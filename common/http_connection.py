"""Where an HTTP(S) server is and how to authenticate to it: the one way nvwatch makes a
request as a client. The report's Prometheus client (report/prom.py) and the agent's exec
probe (`nvwatch web-config get`, agent/webconfig_get.py) both build on it, so neither
imports the other.

Stdlib only. Every mistake in what was given becomes one `ConnectionSetupError` line that
names the flag to fix.
"""

from __future__ import annotations

import base64
import ssl
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from nvwatch.common.regular_files import regular_size


class ConnectionSetupError(Exception):
    """The connection cannot be made as given: not an http(s) URL, two kinds of
    credentials, or a CA file that cannot be loaded."""


@dataclass(frozen=True)
class Connection:
    """Where the server is and how to authenticate to it."""

    url: str
    basic_auth: tuple[str, str] | None = None  # (user, password)
    bearer_token: str | None = None
    ca_file: Path | None = None
    insecure_tls: bool = False
    timeout_seconds: float = 120.0
    headers: dict[str, str] = field(default_factory=dict)
    # what a bad URL's message calls it: the flag or argument that gave it
    url_flag: str = field(default="URL", compare=False)

    def __post_init__(self) -> None:
        check_url(self.url, self.url_flag)
        if self.basic_auth and self.bearer_token:
            raise ConnectionSetupError("give basic auth or a bearer token, not both")


def check_url(url: str, what: str) -> None:
    """ConnectionSetupError naming `what` (the flag) unless `url` is
    http(s)://host[:port][/path]."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConnectionSetupError(f"{what} {url!r}: expected http(s)://host:port[/path]")


def auth_headers(connection: Connection) -> dict[str, str]:
    """The Authorization header the connection's credentials make, if any."""
    if connection.basic_auth is not None:
        user, password = connection.basic_auth
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return {"Authorization": f"Basic {token}"}
    if connection.bearer_token:
        return {"Authorization": f"Bearer {connection.bearer_token}"}
    return {}


def ssl_context(connection: Connection) -> ssl.SSLContext | None:
    """None for http; for https, a context that verifies the server against --ca-file
    (the system's CAs without one), or nothing at all when insecure_tls is asked for."""
    if not connection.url.startswith("https"):
        return None
    if connection.insecure_tls:
        # the operator asked for it (a lab server with a self-signed certificate)
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    cafile = str(connection.ca_file) if connection.ca_file else None
    try:
        if connection.ca_file is not None:
            regular_size(connection.ca_file)  # OpenSSL would wait on a FIFO for good
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise ConnectionSetupError(f"--ca-file {connection.ca_file}: {why}") from None
