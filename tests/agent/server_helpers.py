"""Running an agent's HTTP server in the test process, and talking to it like a client."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nvwatch.agent.app import Agent
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.server import MetricsServer, ServerLimits
from nvwatch.agent.server.routes import Probe
from nvwatch.agent.webconfig import WebConfig, load_web_config
from tests.agent.fakes import CountingHostSource
from tests.conftest import require_tool


@dataclass
class Served:
    agent: Agent
    server: MetricsServer

    @property
    def port(self) -> int:
        return self.server.port

    def refused(self) -> dict[str, int]:
        return dict(self.server.http_state().refused)


@contextlib.contextmanager
def serving(
    web_config: WebConfig | None = None,
    limits: ServerLimits | None = None,
    probe: Probe | None = None,
) -> Iterator[Served]:
    """A polled agent's server on a free port of 127.0.0.1, polling every second."""
    config = AgentConfig(listen_host="127.0.0.1", listen_port=0, interval=1, sources=("host",))
    agent = Agent(config, [CountingHostSource()])
    server = MetricsServer(
        "127.0.0.1",
        0,
        exposition=agent.exposition,
        health=agent.health,
        web_config=web_config,
        limits=limits,
        probe=probe,
    )
    agent.http_state = server.http_state
    agent.poller.poll_once()
    agent.poller.start()
    server.start()
    try:
        yield Served(agent, server)
    finally:
        server.stop()
        agent.poller.stop()


def web_config(directory: Path, text: str) -> WebConfig:
    path = directory / "web.yml"
    path.write_text(text)
    return load_web_config(path)


def exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, then read until the server closes (or `timeout` passes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_until_closed(sock, timeout)


def read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes; raises TimeoutError if it does not."""
    sock.settimeout(timeout)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def statuses(raw: bytes) -> list[int]:
    """The status code of every response in a raw byte stream, in order."""
    return [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", raw)]


def wait_for(predicate: object, timeout: float = 5.0) -> bool:
    """Poll `predicate()` until it is true or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return bool(predicate())  # type: ignore[operator]


@dataclass(frozen=True)
class Certs:
    """A CA, a server certificate for 127.0.0.1 and clients: trusted, other-CA, self-signed."""

    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path  # signed by `ca`, SANs DNS:scraper.example and IP:10.0.0.7
    client_key: Path
    other_client_cert: Path  # signed by `other_ca`, which the server does not trust
    other_client_key: Path
    other_ca: Path


def _openssl(*args: str) -> None:
    openssl = require_tool("openssl")
    subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-days", "2", "-subj", f"/CN={name}", "-keyout", str(key),
             "-out", str(cert))  # fmt: skip
    return cert, key


def _signed(directory: Path, name: str, ca: tuple[Path, Path], san: str) -> tuple[Path, Path]:
    cert, key, csr = (directory / f"{name}{ext}" for ext in (".pem", ".key", ".csr"))
    ext = directory / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(csr))  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
             "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert))  # fmt: skip
    return cert, key


def make_certs(directory: Path) -> Certs:
    ca, other_ca = _ca(directory, "ca"), _ca(directory, "other-ca")
    server = _signed(directory, "server", ca, "IP:127.0.0.1,DNS:localhost")
    client = _signed(directory, "client", ca, "DNS:scraper.example,IP:10.0.0.7")
    other = _signed(directory, "other-client", other_ca, "DNS:scraper.example")
    return Certs(directory, ca[0], *server, *client, *other, other_ca[0])
