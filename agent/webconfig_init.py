"""A TLS + basic-auth web config in one step: what `nvwatch web-config init` writes.

The agent's default is node_exporter's: plain HTTP, no authentication, on every
interface. The secure setup needs a certificate, its key, a bcrypt hash and a file in
the exporter-toolkit format, each easy to get subtly wrong by hand (a key readable by
all, a hash of another cost than the next one, a certificate whose names Prometheus
cannot verify). This writes all of them into one directory that configuration
management copies to every node as it is:

- ``nvwatch.crt``, ``nvwatch.key``: one self-signed certificate (ECDSA P-256) for the
  fleet. Its names include ``nvwatch``, so Prometheus verifies every node against it
  with ``tls_config: {ca_file: nvwatch.crt, server_name: nvwatch}``, whatever address
  it scrapes; a site with its own CA replaces the two files and keeps the rest.
- ``prometheus.password``: the generated password of the one basic-auth user, for
  Prometheus' ``basic_auth.password_file``; the agent keeps only its bcrypt hash.
- ``prometheus.username``: that user's name, so everything a scraper needs is in a file
  (a Kubernetes Secret made of the directory gives a ServiceMonitor both keys).
- ``web-config.yml``: the exporter-toolkit file naming the two above, TLS 1.2 and up.

The files with secrets are written 0600 and nothing is overwritten unless asked. The
user and password files hold no newline: prometheus-operator puts a Secret's value into
the scrape config as it is, and Prometheus sends a user name as it is given (it trims a
password; nvwatch's own readers strip both).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import bcrypt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CERT_FILE = "nvwatch.crt"
KEY_FILE = "nvwatch.key"
PASSWORD_FILE = "prometheus.password"
USER_FILE = "prometheus.username"
CONFIG_FILE = "web-config.yml"
# the name Prometheus verifies every node's certificate against (tls_config.server_name)
FLEET_NAME = "nvwatch"
DEFAULT_NAMES = (FLEET_NAME, "localhost")
DEFAULT_ADDRESSES = ("127.0.0.1", "::1")
DEFAULT_DAYS = 825  # the longest validity macOS and browsers still accept
DEFAULT_COST = 10  # ~80 ms a check on a 2-core node; each credential is checked once


class WebConfigInitError(ValueError):
    """What init cannot do, in one line (an existing file, a bad name)."""


@dataclass(frozen=True)
class Written:
    directory: Path
    user: str
    names: tuple[str, ...]

    @property
    def config(self) -> Path:
        return self.directory / CONFIG_FILE


def names_and_addresses(hosts: Sequence[str]) -> tuple[list[str], list[str]]:
    """The certificate's DNS names and IP addresses: the defaults and `hosts`, each taken
    as an address when it parses as one."""
    names, addresses = list(DEFAULT_NAMES), list(DEFAULT_ADDRESSES)
    for host in hosts:
        try:
            addresses.append(str(ipaddress.ip_address(host)))
        except ValueError:
            if not host or any(c.isspace() or c in "/:@*" for c in host):
                raise WebConfigInitError(
                    f"--host {host!r} is not a host name or an address"
                ) from None
            names.append(host.lower())
    return list(dict.fromkeys(names)), list(dict.fromkeys(addresses))


def init_web_config(
    directory: Path,
    *,
    user: str,
    hosts: Sequence[str] = (),
    days: int = DEFAULT_DAYS,
    cost: int = DEFAULT_COST,
    force: bool = False,
) -> Written:
    """Write the five files into `directory` (created if missing)."""
    names, addresses = names_and_addresses(hosts)
    if not user or ":" in user or any(c.isspace() for c in user):
        raise WebConfigInitError(f"--user {user!r}: a user name has no spaces or ':'")
    files = [directory / f for f in (CERT_FILE, KEY_FILE, PASSWORD_FILE, USER_FILE, CONFIG_FILE)]
    existing = [str(f) for f in files if f.exists() or f.is_symlink()]
    if existing and not force:
        raise WebConfigInitError(f"{existing[0]} exists; --force replaces the five files")
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    _write(directory / KEY_FILE, _key_pem(key), 0o600)
    _write(directory / CERT_FILE, _certificate_pem(key, names, addresses, days), 0o644)
    password = secrets.token_urlsafe(24)
    _write(directory / PASSWORD_FILE, password.encode(), 0o600)
    _write(directory / USER_FILE, user.encode(), 0o600)
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=cost)).decode()
    _write(directory / CONFIG_FILE, _config_text(user, hashed).encode(), 0o600)
    return Written(directory, user, tuple(names))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate_pem(
    key: ec.EllipticCurvePrivateKey, names: list[str], addresses: list[str], days: int
) -> bytes:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, FLEET_NAME)])
    now = datetime.datetime.now(datetime.timezone.utc)
    alternative: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    alternative += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little behind
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        # its own CA: Prometheus takes it as ca_file, so it must be allowed to sign
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM)


def _config_text(user: str, hashed: str) -> str:
    return (
        "# written by `nvwatch web-config init`: TLS with the fleet's self-signed\n"
        "# certificate and one basic-auth user, whose password is in prometheus.password\n"
        "tls_server_config:\n"
        f"  cert_file: {CERT_FILE}\n"
        f"  key_file: {KEY_FILE}\n"
        "  min_version: TLS12\n"
        "basic_auth_users:\n"
        f"  {user}: '{hashed}'\n"
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write through a new file of the final mode, then rename: a secret is never
    readable by others, not even for the moment before a chmod."""
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(partial, path)


def scrape_config(written: Written, job: str = "nvwatch") -> str:
    """The Prometheus side, for the command to print (paths as Prometheus will see them
    once the files are copied next to its config)."""
    return (
        f"- job_name: {job}\n"
        "  scheme: https\n"
        f"  tls_config: {{ca_file: {CERT_FILE}, server_name: {FLEET_NAME}}}\n"
        f"  basic_auth: {{username: {written.user}, password_file: {PASSWORD_FILE}}}\n"
    )
