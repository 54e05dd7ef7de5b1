"""`nvwatch web-config init`: the files it writes make a real `nvwatch serve` answer a
client that verifies the certificate and sends the password, and nobody else."""

from __future__ import annotations

import base64
import datetime
import http.client
import ipaddress
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509

from nvwatch.sim.ports import free_port
from tests.processes import stop

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]


def _init(out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [*NVWATCH, "web-config", "init", "--out", str(out), "--bcrypt-cost", "4", *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _get(port: int, context: ssl.SSLContext, password: str | None) -> int:
    client = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    headers = {}
    if password is not None:
        token = base64.b64encode(f"prometheus:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    try:
        client.request("GET", "/metrics", headers=headers)
        return client.getresponse().status
    finally:
        client.close()


def _verifying(cert: Path) -> ssl.SSLContext:
    """What Prometheus does with the printed tls_config: the certificate as its CA, and
    `nvwatch` as the name to verify, whatever address it scrapes."""
    context = ssl.create_default_context(cafile=str(cert))
    context.check_hostname = True
    original = context.wrap_socket

    def wrap(sock: object, *args: object, **kwargs: object) -> ssl.SSLSocket:
        kwargs["server_hostname"] = "nvwatch"
        return original(sock, *args, **kwargs)  # type: ignore[arg-type]

    context.wrap_socket = wrap  # type: ignore[method-assign]
    return context


def test_a_served_web_config_admits_the_verified_password_holder_only(tmp_path: Path) -> None:
    out = tmp_path / "web"
    done = _init(out)
    assert done.returncode == 0, done.stderr
    assert (
        "server_name: nvwatch" in done.stdout
        and "password_file: prometheus.password" in done.stdout
    )
    password = (out / "prometheus.password").read_text().strip()
    port = free_port()
    argv = [*NVWATCH, "serve", "--sources", "host", "--web-config", str(out / "web-config.yml")]
    process = subprocess.Popen(
        [*argv, "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True
    )
    try:
        context = _verifying(out / "nvwatch.crt")
        deadline = time.monotonic() + 60
        while True:
            try:
                status = _get(port, context, password)
                break
            except ConnectionError:
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "the agent never served"
                time.sleep(0.1)
        assert status == 200
        assert _get(port, context, "not-the-password") == 401
        assert _get(port, context, None) == 401
        with pytest.raises(ssl.SSLCertVerificationError):
            _get(port, ssl.create_default_context(), password)  # the system's CAs: unknown
    finally:
        stop(process)


def test_secrets_are_private_and_the_certificate_names_the_fleet(tmp_path: Path) -> None:
    out = tmp_path / "web"
    assert _init(out, "--host", "gpu-node-01", "--host", "10.0.0.7", "--days", "30").returncode == 0
    for secret in ("nvwatch.key", "prometheus.password", "prometheus.username", "web-config.yml"):
        assert stat.S_IMODE((out / secret).stat().st_mode) == 0o600, secret
    # as a Secret's values they reach the scrape config untrimmed: no newline
    assert (out / "prometheus.username").read_bytes() == b"prometheus"
    password = (out / "prometheus.password").read_bytes()
    assert password == password.strip() and len(password) >= 32
    cert = x509.load_pem_x509_certificate((out / "nvwatch.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {"nvwatch", "localhost", "gpu-node-01"}
    assert set(names.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address(a) for a in ("127.0.0.1", "::1", "10.0.0.7")
    }
    lasts = cert.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)
    assert datetime.timedelta(days=29) < lasts <= datetime.timedelta(days=30)


def test_existing_files_are_kept_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "web"
    assert _init(out).returncode == 0
    first = (out / "prometheus.password").read_text()
    again = _init(out)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"nvwatch: error: {out / 'nvwatch.crt'} exists; --force replaces the five files"
    ]
    assert (out / "prometheus.password").read_text() == first
    assert _init(out, "--force").returncode == 0
    assert (out / "prometheus.password").read_text() != first


@pytest.mark.parametrize("flags", [["--host", "a b"], ["--host", "*.example"], ["--user", "a:b"]])
def test_bad_names_are_one_line_and_exit_2(tmp_path: Path, flags: list[str]) -> None:
    done = _init(tmp_path / "web", *flags)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "web").exists() or not any((tmp_path / "web").iterdir())
