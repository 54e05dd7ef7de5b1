"""Findings of the second attack on the HTTP server, each from outside the process where
it can be: a real `nvwatch serve`, real sockets, the kernel's own view in /proc/net/tcp.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import bcrypt
import pytest

from benchmarks.never_reading import request, server_side
from nvwatch.agent.config import ConfigError, parse_listen, split_ipv6_only
from nvwatch.agent.server import MetricsServer, ServerLimits
from nvwatch.agent.server.routes import Health
from nvwatch.sim.ports import free_port

GOOD = "Basic " + base64.b64encode(b"prometheus:s3cret").decode()


@contextlib.contextmanager
def _serve(
    argv: list[str], env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "nvwatch.agent.cli", "serve", *argv, f"--listen=127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while _status(port, "/healthz", GOOD) is None:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "agent did not start"
            time.sleep(0.1)
        yield process, port
    finally:
        if process.poll() is None:
            process.terminate()
            process.communicate(timeout=20)


def _status(port: int, path: str, authorization: str | None = None) -> int | None:
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        client.request("GET", path, headers={"Authorization": authorization or ""})
        return client.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        client.close()


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


@pytest.mark.parametrize(
    ("digits", "also"),
    [
        ("1" * 5000, ""),
        ("0" * 5000 + "5", ""),
        ("9" * 19, ""),
        # a Transfer-Encoding beside it must not spare the length its check
        ("1" * 19, "Transfer-Encoding: chunked\r\n"),
    ],
)
def test_a_huge_content_length_is_413_before_auth_and_the_server_lives(
    tmp_path: Path, digits: str, also: str
) -> None:
    web = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    with _serve(["--sources", "host", f"--web-config={web}"]) as (_, port):
        head = f"GET /healthz HTTP/1.1\r\nHost: n\r\nContent-Length: {digits}\r\n{also}\r\n"
        answer = _raw(port, head.encode())
        # Python's int() refuses 4,300 digits: before, the server thread died on it
        if digits.lstrip("0") and len(digits.lstrip("0")) > 18:
            assert answer.startswith(b"HTTP/1.1 413 "), answer[:80]
        else:
            assert answer.startswith(b"HTTP/1.1 401 "), answer[:80]
        assert _status(port, "/healthz", GOOD) == 200


def test_never_reading_clients_are_reset_at_the_write_deadline() -> None:
    # a body larger than what a small receive window takes, small enough that the
    # server's send buffer takes all of it: the write "completes" at once
    body = b"# a /metrics body\n" * 14_000
    exposition = SimpleNamespace(text=body, text_gzip=body)
    # long enough to see the answers queued first on a loaded machine: at 1 s, setting
    # up 40 clients there took longer, and every one was reset before the first look
    limits = ServerLimits(write_timeout_s=4.0)
    server = MetricsServer(
        "127.0.0.1",
        0,
        exposition=lambda: exposition,  # type: ignore[arg-type,return-value]
        health=lambda: Health(True, "ok"),
        limits=limits,
    )
    server.start()
    clients = []
    try:
        for index in range(40):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(request(keep_alive=index % 2 == 0))
            clients.append(sock)
        # only our clients' connections: another test may hold this port number elsewhere
        ours = {sock.getsockname()[1] for sock in clients}
        # until every answer sits in our kernel, unread (bounded: the writes are at once)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            sockets, queued = server_side(server.port, ours)
            if sockets == 40 and queued > 40 * 100_000:
                break
            time.sleep(0.05)
        assert sockets == 40 and queued > 40 * 100_000, (sockets, queued)
        # the deadline, plus one sweep tick, plus slack for a loaded machine
        deadline = time.monotonic() + limits.write_timeout_s + 2.0
        while server_side(server.port, ours)[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        # the kernel's view: no socket left on the agent's side, orphans included
        assert server_side(server.port, ours) == (0, 0)
        assert server.http_state().refused["write_timeout"] == 40
        assert server.http_state().connections_open == 0
    finally:
        for sock in clients:
            sock.close()
        server.stop()


def _server_on(listen: str) -> MetricsServer:
    ipv6_only, address = split_ipv6_only(listen)
    host, port = parse_listen(address)
    return MetricsServer(
        host,
        port,
        ipv6_only=ipv6_only,
        exposition=lambda: None,
        health=lambda: Health(True, "ok"),
    )


def _answers(family: socket.AddressFamily, host: str, port: int) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            sock.connect((host, port))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: n\r\nConnection: close\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


@pytest.mark.parametrize(
    ("listen", "ipv4", "ipv6"),
    [("[::]:0", True, True), ("tcp6:[::]:0", False, True), ("[::1%lo]:0", False, True)],
)
def test_the_ipv6_wildcard_is_dual_stack_unless_asked(listen: str, ipv4: bool, ipv6: bool) -> None:
    server = _server_on(listen)
    server.start()
    try:
        assert _answers(socket.AF_INET, "127.0.0.1", server.port) is ipv4
        assert _answers(socket.AF_INET6, "::1", server.port) is ipv6
    finally:
        server.stop()


def test_the_ipv6_only_form_takes_a_bracketed_address() -> None:
    with pytest.raises(ConfigError, match="tcp6: takes"):
        split_ipv6_only("tcp6:0.0.0.0:9477")


def test_sighup_is_logged_and_every_simulated_file_goes_at_exit(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {"TMPDIR": str(scratch), "PATH": "/usr/bin:/bin"}
    argv = ["--simulate", "dgx-h100", "--sources", "nvml,infiniband", "--interval", "500ms"]
    with _serve(argv, env) as (process, port):
        names = sorted(path.name for path in scratch.iterdir())
        assert any(name.endswith(".kmsg") for name in names), names  # the simulated node's
        process.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert process.poll() is None, "SIGHUP ended the agent"
        assert _status(port, "/healthz") == 200
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    assert "received SIGHUP: nothing is reloaded" in stderr
    assert list(scratch.iterdir()) == []
