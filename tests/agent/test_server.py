from __future__ import annotations

import base64
import gzip
import http.client
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from nvwatch.agent.app import Agent, make_server, serve
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.server import Health, MetricsServer
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


def _raw_get(port: int, headers: dict[str, str]) -> tuple[dict[str, str], bytes]:
    """GET /metrics with exactly `headers`: http.client adds no Accept-Encoding of its own."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.putrequest("GET", "/metrics", skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 200
        return dict(response.headers), response.read()
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("accept_encoding", "gzipped"),
    [
        (None, False),
        ("gzip;q=0", False),
        ("x-gzip-not", False),
        ("identity", False),
        ("gzip;q=0.5, identity", False),
        ("gzip", True),
        ("deflate, gzip;q=0.5", True),
        ("identity;q=0, gzip", True),
        ("*", True),
        ("x-gzip", True),
        ("GZIP;Q=1.0", True),
    ],
)
def test_gzip_is_negotiated_by_q_value(
    running: Running, accept_encoding: str | None, gzipped: bool
) -> None:
    headers = {} if accept_encoding is None else {"Accept-Encoding": accept_encoding}
    response_headers, body = _raw_get(running.server.port, headers)
    assert response_headers.get("Content-Encoding") == ("gzip" if gzipped else None)
    text = gzip.decompress(body) if gzipped else body
    assert text.startswith(b"# HELP ")


# Prometheus' own Accept headers. Before 2.49 it sent one fixed header; since then
# scrape.acceptHeader() weighs the configured scrape_protocols in order, here 3.x's default
# list and a job that puts the text format first.
PROMETHEUS_2 = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMETHEUS_3 = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
PROMETHEUS_TEXT_FIRST = (
    "text/plain;version=0.0.4;q=0.6,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.4"
)
# every entry weighted, OpenMetrics highest
PROMETHEUS_STYLE = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        (None, False),
        ("*/*", False),
        ("text/plain", False),
        ("application/openmetrics-text;q=0, text/plain", False),
        ("application/openmetrics-text;q=0", False),
        ("application/openmetrics-text;q=0.2, text/plain;q=0.8", False),
        (PROMETHEUS_TEXT_FIRST, False),
        ("application/openmetrics-text; version=1.0.0", True),
        (PROMETHEUS_STYLE, True),
        (PROMETHEUS_2, True),
        (PROMETHEUS_3, True),
        ("application/openmetrics-text, text/plain", True),
        ("text/plain;q=0.5, */*", True),
    ],
)
def test_format_is_negotiated_by_q_value(
    running: Running, accept: str | None, openmetrics: bool
) -> None:
    headers = {} if accept is None else {"Accept": accept}
    response_headers, body = _raw_get(running.server.port, headers)
    if openmetrics:
        assert response_headers["Content-Type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n")
    else:
        assert response_headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert not body.endswith(b"# EOF\n")
    assert response_headers["Vary"] == "Accept, Accept-Encoding"


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


def test_stopping_the_server_leaves_none_of_its_threads() -> None:
    before = set(threading.enumerate())
    server = MetricsServer(
        "127.0.0.1", 0, exposition=lambda: None, health=lambda: Health(True, "polling")
    )
    assert set(threading.enumerate()) == before, "binding must start no thread"
    server.start()
    try:
        assert _get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
        assert "nvwatch-http" in {t.name for t in threading.enumerate()}
    finally:
        server.stop()
    assert set(threading.enumerate()) - before == set()


def test_serve_leaves_process_wide_settings_alone() -> None:
    """Signal handlers and the GIL switch interval belong to `nvwatch serve`, not serve()."""
    config = AgentConfig(listen_host="127.0.0.1", listen_port=0, interval=0.2, sources=("host",))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    interval = sys.getswitchinterval()
    seen: list[tuple[object, float]] = []
    stop = threading.Event()

    def ready(_server: MetricsServer) -> None:
        seen.append(({s: signal.getsignal(s) for s in handlers}, sys.getswitchinterval()))
        stop.set()

    assert serve(config, [CountingHostSource()], ready=ready, stop=stop) == 0
    assert seen == [(handlers, interval)]
