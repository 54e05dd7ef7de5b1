"""Every tls_server_config and http_server_config key, against real TLS clients.

Each key is checked with Python's ssl and with curl: a key that was accepted and ignored
(mutual TLS, min_version, headers before this) fails here.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvwatch.agent.server import ServerLimits
from tests.agent.server_helpers import (
    Certs,
    Served,
    make_certs,
    read_until_closed,
    serving,
    statuses,
    web_config,
)
from tests.conftest import require_tool

REFUSED = (ssl.SSLError, OSError, http.client.HTTPException)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _serve_tls(certs: Certs, extra: str = "", top: str = "") -> Iterator[Served]:
    config = web_config(
        certs.dir,
        "tls_server_config:\n"
        f"  cert_file: {certs.server_cert.name}\n  key_file: {certs.server_key.name}\n"
        + "".join(f"  {line}\n" for line in extra.splitlines())
        + top,
    )
    with serving(config) as served:
        yield served


@pytest.fixture
def tls_server(request: pytest.FixtureRequest, certs: Certs) -> Iterator[Served]:
    """A TLS server whose tls_server_config gets the test's `extra` lines (parametrized)."""
    extra, top = request.param if isinstance(request.param, tuple) else (request.param, "")
    yield from _serve_tls(certs, extra, top)


def client(
    certs: Certs,
    cert: tuple[Path, Path] | None = None,
    versions: tuple[ssl.TLSVersion, ssl.TLSVersion] | None = None,
    ciphers: str | None = None,
    curve: str | None = None,
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if cert:
        context.load_cert_chain(*cert)
    if versions:
        context.minimum_version, context.maximum_version = versions
    if ciphers:
        context.set_ciphers(ciphers)
    if curve:
        context.set_ecdh_curve(curve)
    return context


def get(port: int, context: ssl.SSLContext, path: str = "/metrics") -> tuple[int, str, str, dict]:
    """(status, TLS version, cipher, headers) of one GET over TLS."""
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        connection.request("GET", path)
        sock = connection.sock  # before the response: one with Connection: close drops it
        assert isinstance(sock, ssl.SSLSocket)
        version, cipher = str(sock.version()), (sock.cipher() or ("",))[0]
        response = connection.getresponse()
        response.read()
        return response.status, version, cipher, dict(response.headers)
    finally:
        connection.close()


def curl(certs: Certs, port: int, *args: str, path: str = "/metrics") -> tuple[int, str]:
    """(exit code, output) of curl -sS over TLS: the HTTP status, then any -D headers."""
    binary = require_tool("curl")
    result = subprocess.run(
        [binary, "-sS", "--max-time", "5", "--cacert", str(certs.ca), "-o", "/dev/null",
         "-w", "%{http_code}", *args, f"https://127.0.0.1:{port}{path}"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return result.returncode, result.stdout


def curl_status(certs: Certs, port: int, *args: str) -> int:
    code, out = curl(certs, port, *args)
    return int(out[-3:]) if code == 0 else 0


def assert_refused(port: int, context: ssl.SSLContext) -> None:
    with pytest.raises(REFUSED):
        get(port, context)


# --- client certificates ----------------------------------------------------------------


@pytest.mark.parametrize(
    "tls_server",
    ["client_auth_type: RequireAndVerifyClientCert\nclient_ca_file: ca.pem"],
    indirect=True,
)
def test_require_and_verify_client_cert(tls_server: Served, certs: Certs) -> None:
    # before: served /metrics to a client without any certificate
    port = tls_server.port
    assert_refused(port, client(certs))
    assert_refused(port, client(certs, cert=(certs.other_client_cert, certs.other_client_key)))
    assert get(port, client(certs, cert=(certs.client_cert, certs.client_key)))[0] == 200
    assert curl_status(certs, port) == 0
    assert (
        curl_status(certs, port, "--cert", str(certs.client_cert), "--key", str(certs.client_key))
        == 200
    )
    other = ("--cert", str(certs.other_client_cert), "--key", str(certs.other_client_key))
    assert curl_status(certs, port, *other) == 0
    assert tls_server.refused()["tls_handshake"] >= 3


@pytest.mark.parametrize(
    "tls_server",
    ["client_auth_type: VerifyClientCertIfGiven\nclient_ca_file: ca.pem"],
    indirect=True,
)
def test_verify_client_cert_if_given(tls_server: Served, certs: Certs) -> None:
    port = tls_server.port
    assert get(port, client(certs))[0] == 200
    assert get(port, client(certs, cert=(certs.client_cert, certs.client_key)))[0] == 200
    assert_refused(port, client(certs, cert=(certs.other_client_cert, certs.other_client_key)))
    assert curl_status(certs, port) == 200
    other = ("--cert", str(certs.other_client_cert), "--key", str(certs.other_client_key))
    assert curl_status(certs, port, *other) == 0


@pytest.mark.parametrize(
    "tls_server", ["client_auth_type: RequestClientCert\nclient_ca_file: ca.pem"], indirect=True
)
def test_request_client_cert_serves_every_client_as_go_does(
    tls_server: Served, certs: Certs
) -> None:
    port = tls_server.port
    assert get(port, client(certs))[0] == 200
    assert curl_status(certs, port) == 200


@pytest.mark.parametrize(
    ("sans", "served"),
    [("[scraper.example]", True), ("['10.0.0.7']", True), ("[other.example]", False)],
)
def test_client_allowed_sans(certs: Certs, sans: str, served: bool) -> None:
    extra = (
        "client_auth_type: RequireAndVerifyClientCert\nclient_ca_file: ca.pem\n"
        f"client_allowed_sans: {sans}"
    )
    for running in _serve_tls(certs, extra):
        trusted = client(certs, cert=(certs.client_cert, certs.client_key))
        if served:
            assert get(running.port, trusted)[0] == 200
        else:
            assert_refused(running.port, trusted)
            assert running.refused()["client_cert_san"] == 1


# --- versions, suites, curves -------------------------------------------------------------

TLS12 = (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2)
TLS13 = (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3)


@pytest.mark.parametrize("tls_server", ["min_version: TLS13"], indirect=True)
def test_min_version(tls_server: Served, certs: Certs) -> None:
    # before: TLS 1.2 was accepted whatever min_version said
    assert_refused(tls_server.port, client(certs, versions=TLS12))
    assert get(tls_server.port, client(certs, versions=TLS13))[1] == "TLSv1.3"
    assert curl_status(certs, tls_server.port, "--tlsv1.2", "--tls-max", "1.2") == 0
    assert curl_status(certs, tls_server.port, "--tlsv1.3") == 200


@pytest.mark.parametrize("tls_server", ["max_version: TLS12"], indirect=True)
def test_max_version(tls_server: Served, certs: Certs) -> None:
    assert_refused(tls_server.port, client(certs, versions=TLS13))
    assert get(tls_server.port, client(certs))[1] == "TLSv1.2"
    assert curl_status(certs, tls_server.port, "--tlsv1.3") == 0


@pytest.mark.parametrize("tls_server", ["min_version: TLS10\nmax_version: TLS10"], indirect=True)
def test_tls10_when_asked_for(tls_server: Served, certs: Certs) -> None:
    # OpenSSL 3 refuses TLS 1.0 above security level 0, on both sides
    legacy = client(certs, ciphers="DEFAULT:@SECLEVEL=0")
    legacy.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    assert get(tls_server.port, legacy)[1] == "TLSv1"
    assert_refused(tls_server.port, client(certs))


ECDSA_128 = "ECDHE-ECDSA-AES128-GCM-SHA256"
ECDSA_256 = "ECDHE-ECDSA-AES256-GCM-SHA384"


@pytest.mark.parametrize(
    "tls_server", ["cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]"], indirect=True
)
def test_cipher_suites(tls_server: Served, certs: Certs) -> None:
    port = tls_server.port
    assert_refused(port, client(certs, versions=TLS12, ciphers=ECDSA_256))
    assert get(port, client(certs, versions=TLS12))[2] == ECDSA_128
    tls12 = ("--tlsv1.2", "--tls-max", "1.2")
    assert curl_status(certs, port, *tls12, "--ciphers", ECDSA_256) == 0
    assert curl_status(certs, port, *tls12, "--ciphers", ECDSA_128) == 200


@pytest.mark.parametrize(("prefer", "chosen"), [("true", ECDSA_256), ("false", ECDSA_128)])
def test_prefer_server_cipher_suites(certs: Certs, prefer: str, chosen: str) -> None:
    extra = (
        "cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, "
        f"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\nprefer_server_cipher_suites: {prefer}"
    )
    for running in _serve_tls(certs, extra):
        # the client prefers AES-128; the server's list puts AES-256 first
        context = client(certs, versions=TLS12, ciphers=f"{ECDSA_128}:{ECDSA_256}")
        assert get(running.port, context)[2] == chosen


@pytest.mark.parametrize("tls_server", ["curve_preferences: [CurveP384]"], indirect=True)
def test_curve_preferences(tls_server: Served, certs: Certs) -> None:
    port = tls_server.port
    assert_refused(port, client(certs, curve="prime256v1"))
    assert get(port, client(certs, curve="secp384r1"))[0] == 200
    assert curl_status(certs, port, "--curves", "prime256v1") == 0
    assert curl_status(certs, port, "--curves", "secp384r1") == 200


# --- http_server_config, rate_limit, inline PEM, the plain port ---------------------------

HEADERS = (
    "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    "    X-Content-Type-Options: nosniff\n    Strict-Transport-Security: max-age=31536000\n"
)


@pytest.mark.parametrize("tls_server", [("", HEADERS)], indirect=True)
def test_configured_headers_are_on_every_response(tls_server: Served, certs: Certs) -> None:
    # before: http_server_config was accepted and ignored
    for path, status in (("/metrics", 200), ("/nope", 404)):
        got, _, _, headers = get(tls_server.port, client(certs), path)
        assert got == status
        assert headers["X-Frame-Options"] == "deny"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Strict-Transport-Security"] == "max-age=31536000"
    code, out = curl(certs, tls_server.port, "-D", "-")
    assert code == 0 and "X-Frame-Options: deny" in out


@pytest.mark.parametrize(
    "tls_server", [("", "rate_limit:\n  interval: 1h\n  burst: 2\n")], indirect=True
)
def test_rate_limit(tls_server: Served, certs: Certs) -> None:
    codes = [get(tls_server.port, client(certs))[0] for _ in range(3)]
    assert codes == [200, 200, 429]
    assert tls_server.refused()["rate_limited"] == 1


def test_inline_cert_key_and_client_ca(certs: Certs, tmp_path: Path) -> None:
    def block(path: Path) -> str:
        return "|\n" + "".join(f"    {line}\n" for line in path.read_text().splitlines())

    config = web_config(
        tmp_path,
        f"tls_server_config:\n  cert: {block(certs.server_cert)}  key: {block(certs.server_key)}"
        f"  client_ca: {block(certs.ca)}  client_auth_type: RequireAndVerifyClientCert\n",
    )
    with serving(config) as running:
        assert_refused(running.port, client(certs))
        assert (
            get(running.port, client(certs, cert=(certs.client_cert, certs.client_key)))[0] == 200
        )


@pytest.mark.parametrize("tls_server", [""], indirect=True)
def test_plain_http_to_the_tls_port_gets_a_plain_400(tls_server: Served) -> None:
    # before: an empty reply
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n")
        raw = read_until_closed(sock, 5)
    assert statuses(raw) == [400]
    assert b"Client sent an HTTP request to an HTTPS server." in raw
    assert time.monotonic() - started < 2
    assert tls_server.refused()["http_on_tls_port"] == 1


def test_a_stalled_handshake_is_cut_at_the_request_deadline(certs: Certs) -> None:
    config = web_config(
        certs.dir,
        f"tls_server_config:\n  cert_file: {certs.server_cert.name}\n"
        f"  key_file: {certs.server_key.name}\n",
    )
    with (
        serving(config, ServerLimits(header_timeout_s=0.5)) as running,
        socket.create_connection(("127.0.0.1", running.port), timeout=5) as sock,
    ):
        sock.sendall(bytes.fromhex("16030100f4"))  # a ClientHello's record header, then nothing
        assert read_until_closed(sock, 5) == b""
        assert running.refused()["header_timeout"] == 1
