"""The web config loader: every key honoured or refused in one line naming file and key."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from nvwatch.agent.webconfig import WebConfigError, load_web_config
from tests.agent.server_helpers import Certs, make_certs

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
HASH_COST_5 = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=5)).decode()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _load(certs: Certs, text: str, name: str = "web.yml") -> Any:
    path = certs.dir / name
    path.write_text(text)
    return load_web_config(path)


def _tls(extra: str = "") -> str:
    lines = "".join(f"  {line}\n" for line in extra.splitlines())
    return f"tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n{lines}"


def _refused(certs: Certs, text: str, *fragments: str) -> str:
    with pytest.raises(WebConfigError) as caught:
        _load(certs, text, "bad.yml")
    message = str(caught.value)
    assert "\n" not in message
    assert str(certs.dir / "bad.yml") in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_every_key_exporter_toolkit_defines_loads(certs: Certs) -> None:
    config = _load(
        certs,
        _tls(
            "client_auth_type: RequireAndVerifyClientCert\nclient_ca_file: ca.pem\n"
            "client_allowed_sans: [scraper.example, '::ffff:10.0.0.7']\nmin_version: TLS12\n"
            "max_version: TLS13\ncipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n"
            "prefer_server_cipher_suites: false\ncurve_preferences: [X25519]"
        )
        + "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: sameorigin\n"
        "    Content-Security-Policy: \"default-src 'self'\"\n    X-XSS-Protection: ''\n"
        f"basic_auth_users:\n  prometheus: '{HASH}'\n"
        "rate_limit:\n  interval: 100ms\n  burst: 10\n",
    )
    assert config.tls
    assert config.client_allowed_sans == {"scraper.example", "::ffff:a00:7"}
    # a blank header is unset, as in exporter-toolkit
    assert config.headers == (
        ("X-Frame-Options", "sameorigin"),
        ("Content-Security-Policy", "default-src 'self'"),
    )
    assert set(config.users) == {"prometheus"}
    assert (config.rate_limit.interval_s, config.rate_limit.burst) == (0.1, 10)


def test_empty_file_and_zero_rate_limit_mean_plain_http(certs: Certs) -> None:
    assert not _load(certs, "").tls
    assert _load(certs, "rate_limit:\n  interval: 0\n").rate_limit is None
    assert not _load(certs, "tls_server_config: {}\n").tls


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("nope: 1\n", ["nope: unknown key"]),
        (_tls("nope: 1"), ["tls_server_config.nope: unknown key"]),
        (
            _tls("client_auth_type: RequireAnyClientCert"),
            ["client_auth_type", "cannot be honoured"],
        ),
        (_tls("client_auth_type: RequireClientCert"), ["client_auth_type", "cannot be honoured"]),
        (_tls("client_auth_type: Maybe"), ["client_auth_type", "unknown value 'Maybe'"]),
        (_tls("client_ca_file: ca.pem"), ["tls_server_config.client_ca_file", "without"]),
        (_tls("client_auth_type: RequireAndVerifyClientCert"), ["needs client_ca_file"]),
        (
            _tls("client_allowed_sans: [a]\nclient_auth_type: RequestClientCert"),
            ["client_allowed_sans", "verified"],
        ),
        (_tls("min_version: TLS09"), ["min_version", "unknown TLS version"]),
        (_tls("min_version: TLS13\nmax_version: TLS12"), ["min_version", "above max_version"]),
        (_tls("cipher_suites: [TLS_AES_128_GCM_SHA256]"), ["cipher_suites", "TLS 1.3"]),
        (_tls("cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]"), ["cipher_suites", "not one of"]),
        (_tls("cipher_suites: TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"), ["a list of strings"]),
        (_tls("prefer_server_cipher_suites: 'yes'"), ["prefer_server_cipher_suites"]),
        (_tls("curve_preferences: [CurveP256, X25519]"), ["curve_preferences", "one curve"]),
        (_tls("curve_preferences: [P256]"), ["curve_preferences", "P256"]),
        ("http_server_config:\n  http2: true\n", ["http_server_config.http2", "HTTP/1.1 only"]),
        ("http_server_config:\n  headers:\n    Server: x\n", ["headers.Server", "cannot be"]),
        ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", ["'allow'"]),
        (
            'http_server_config:\n  headers:\n    X-XSS-Protection: "1\\r\\nSet-Cookie: a"\n',
            ["one-line"],
        ),
        ("rate_limit:\n  interval: 1s\n  burst: 0\n", ["rate_limit.burst"]),
        ("rate_limit:\n  interval: soon\n  burst: 1\n", ["rate_limit.interval"]),
        ("basic_auth_users:\n  alice: $2b$10$short\n", ["basic_auth_users.alice", "bcrypt"]),
        ("basic_auth_users:\n  bob: $2y$03$" + "a" * 53 + "\n", ["basic_auth_users.bob"]),
        ("basic_auth_users:\n  carol: $2y$04$" + "a" * 53 + "\n", ["carol", "not a valid bcrypt"]),
        ("basic_auth_users:\n  dave: plaintext\n", ["basic_auth_users.dave"]),
        (
            f"basic_auth_users:\n  erin: '{HASH}'\n  frank: '{HASH_COST_5}'\n",
            ["basic_auth_users:", "erin (bcrypt cost 4)", "frank (cost 5)", "htpasswd -nBC 5 erin"],
        ),
        ("basic_auth_users: [a]\n", ["basic_auth_users"]),
        ("tls_server_config:\n  cert_file: server.pem\n", ["key_file", "missing"]),
        (_tls("cert: x"), ["cert and cert_file are both set"]),
        ("- a\n", ["expected a mapping at the top level"]),
        ("a: [\n", ["not valid YAML"]),
    ],
)
def test_what_cannot_be_honoured_is_refused_in_one_line(
    certs: Certs, text: str, fragments: list[str]
) -> None:
    _refused(certs, text, *fragments)


def test_missing_or_bad_certificate_files_are_named(certs: Certs) -> None:
    # before: "cannot load TLS certificate/key: [Errno 2] No such file or directory"
    missing = certs.dir / "missing.pem"
    text = "tls_server_config:\n  cert_file: missing.pem\n  key_file: server.key\n"
    _refused(certs, text, "tls_server_config.cert_file", str(missing), "No such file")
    text = "tls_server_config:\n  cert_file: server.pem\n  key_file: missing.key\n"
    _refused(certs, text, "tls_server_config.key_file", str(certs.dir / "missing.key"))
    text = "tls_server_config:\n  cert_file: server.pem\n  key_file: client.key\n"
    _refused(certs, text, "tls_server_config.cert_file", "server.pem with client.key")
    _refused(certs, _tls("client_auth_type: VerifyClientCertIfGiven\nclient_ca_file: nope.pem"),
             "client_ca_file", str(certs.dir / "nope.pem"))  # fmt: skip
    text = "tls_server_config:\n  cert_file: bad.yml\n  key_file: server.key\n"
    _refused(certs, text, "tls_server_config.cert_file")


def test_unreadable_and_hostile_files(certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match=r"cannot read web config .*No such file"):
        load_web_config(tmp_path / "absent.yml")
    with pytest.raises(WebConfigError, match="not a regular file"):
        load_web_config(tmp_path)
    (tmp_path / "binary.yml").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(WebConfigError, match="not UTF-8"):
        load_web_config(tmp_path / "binary.yml")
    (tmp_path / "big.yml").write_text("# " + "x" * (1024 * 1024) + "\n")
    with pytest.raises(WebConfigError, match="larger than"):
        load_web_config(tmp_path / "big.yml")
    fifo = tmp_path / "fifo.yml"
    os.mkfifo(fifo)
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(_error_of(fifo)), daemon=True)
    worker.start()
    worker.join(5)
    assert done and "not a regular file" in done[0], "a FIFO must not block the start-up"


def _error_of(path: Path) -> str:
    try:
        load_web_config(path)
    except WebConfigError as exc:
        return str(exc)
    return ""


def test_serve_exits_2_naming_the_user_of_a_malformed_hash(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users:\n  prometheus: $2b$10$short\n")
    result = CliRunner().invoke(
        cli, ["serve", "--sources", "host", "--listen", "127.0.0.1:0", "--web-config", str(path)]
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "basic_auth_users.prometheus" in lines[0] and str(path) in lines[0]
