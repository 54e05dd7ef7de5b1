from __future__ import annotations

import base64
import gzip
import http.client
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from agent.app import Agent, make_server
from agent.config import AgentConfig
from agent.server import MetricsServer
from tests.agent.fakes import CountingHostSource
from tests.conftest import require_tool


def _get(url: str, headers: dict[str, str] | None = None, method: str = "GET", **kw: object):
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5, **kw) as response:  # type: ignore[arg-type]
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


class Running:
    def __init__(self, agent: Agent, server: MetricsServer, source: CountingHostSource) -> None:
        self.agent, self.server, self.source = agent, server, source
        self.url = f"http://127.0.0.1:{server.port}"


@pytest.fixture
def running() -> Iterator[Running]:
    source = CountingHostSource()
    config = AgentConfig(listen_host="127.0.0.1", listen_port=0, interval=0.2, sources=("host",))
    agent = Agent(config, [source])
    server = make_server(agent)
    agent.poller.poll_once()
    agent.poller.start()
    server.start()
    try:
        yield Running(agent, server, source)
    finally:
        server.stop()
        agent.poller.stop()


def test_metrics_plain_gzip_and_openmetrics(running: Running) -> None:
    status, headers, body = _get(running.url + "/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert b"nvwatch_host_load1" in body
    status, headers, zipped = _get(running.url + "/metrics", {"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    assert b"nvwatch_host_load1" in gzip.decompress(zipped)
    status, headers, om = _get(
        running.url + "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert om.endswith(b"# EOF\n")


def test_scrapes_between_polls_are_identical_and_do_no_source_io(running: Running) -> None:
    running.agent.poller.pause()
    time.sleep(0.3)  # let an in-flight poll finish
    calls = running.source.calls
    bodies = {_get(running.url + "/metrics")[2] for _ in range(5)}
    assert len(bodies) == 1
    assert running.source.calls == calls


def test_healthz_goes_stale_when_polling_stops_and_recovers(running: Running) -> None:
    assert _get(running.url + "/healthz")[0] == 200
    running.agent.poller.pause()
    stale_after = running.agent.config.stale_after
    time.sleep(stale_after + 0.3)
    status, _, body = _get(running.url + "/healthz")
    assert status == 503 and body.startswith(b"stale")
    running.agent.poller.resume()
    time.sleep(0.5)
    assert _get(running.url + "/healthz")[0] == 200


def test_landing_404_405_and_head(running: Running) -> None:
    status, headers, body = _get(running.url + "/")
    assert status == 200 and b"/metrics" in body and b"host" in body
    assert _get(running.url + "/nope")[0] == 404
    status, headers, _ = _get(running.url + "/metrics", method="POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    status, headers, body = _get(running.url + "/metrics", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0


def test_a_stalled_client_does_not_block_others(running: Running) -> None:
    stalled = socket.create_connection(("127.0.0.1", running.server.port))
    stalled.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finishes its request
    try:
        started = time.monotonic()
        assert _get(running.url + "/metrics")[0] == 200
        assert time.monotonic() - started < 2
    finally:
        stalled.close()


def test_concurrent_scrapes_all_succeed(running: Running) -> None:
    results: list[int] = []

    def scrape() -> None:
        for _ in range(10):
            results.append(_get(running.url + "/metrics")[0])

    threads = [threading.Thread(target=scrape) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == [200] * 80


@pytest.fixture
def tls_web_config(tmp_path: Path) -> Path:
    openssl = require_tool("openssl")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(tmp_path / "key.pem"),
         "-out", str(tmp_path / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    path = tmp_path / "web.yaml"
    path.write_text(
        "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    return path


def test_tls_and_basic_auth(tls_web_config: Path) -> None:
    config = AgentConfig(
        listen_host="127.0.0.1", listen_port=0, interval=1, sources=("host",),
        web_config=tls_web_config,
    )  # fmt: skip
    agent = Agent(config, [CountingHostSource()])
    server = make_server(agent)
    agent.poller.poll_once()
    server.start()
    context = ssl.create_default_context(cafile=str(tls_web_config.parent / "cert.pem"))
    context.check_hostname = False
    url = f"https://127.0.0.1:{server.port}/metrics"
    good = "Basic " + base64.b64encode(b"prometheus:s3cret").decode()
    bad = "Basic " + base64.b64encode(b"prometheus:wrong").decode()
    try:
        assert _get(url, context=context)[0] == 401
        assert _get(url, {"Authorization": bad}, context=context)[0] == 401
        status, _, body = _get(url, {"Authorization": good}, context=context)
        assert status == 200 and b"nvwatch_host_load1" in body
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(url.replace("https", "http"), timeout=2)
    finally:
        server.stop()
        agent.poller.stop()
