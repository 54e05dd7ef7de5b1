"""tls_server_config of the exporter-toolkit web config, as a Python ssl.SSLContext.

Every key exporter-toolkit defines is either honoured, with the same meaning as in Go's
crypto/tls, or refused at start-up with the reason; none is accepted and ignored.
What Python's ssl cannot express is refused: RequireAnyClientCert (it cannot require a
certificate without verifying it), TLS 1.3 cipher suites (Go cannot choose them either)
and more than one curve (SSLContext.set_ecdh_curve sets exactly one).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import ssl
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from nvwatch.common.regular_files import regular_size
from nvwatch.common.yaml_safe import key_text, shown

MAX_FILE_BYTES = 1024 * 1024  # PEM files: a chain of a few certificates is a few KB

KEYS = frozenset(
    {
        "cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
        "client_ca_file", "client_allowed_sans", "min_version", "max_version",
        "cipher_suites", "prefer_server_cipher_suites", "curve_preferences",
    }
)  # fmt: skip
# Go's tls.ClientAuthType names -> Python's verify mode; None: cannot be honoured
CLIENT_AUTH: dict[str, ssl.VerifyMode | None] = {
    "NoClientCert": ssl.CERT_NONE,
    # Go asks for a certificate and never checks it, so every client is served; Python
    # cannot ask without verifying, and not asking serves the same clients.
    "RequestClientCert": ssl.CERT_NONE,
    "RequireAnyClientCert": None,
    "RequireClientCert": None,  # exporter-toolkit's old name of RequireAnyClientCert
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's tls.CipherSuites() below TLS 1.3 (exporter-toolkit accepts no others), IANA name
# -> OpenSSL name
CIPHER_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}


class ConfigKeyError(ValueError):
    """A web config key (dotted path) that cannot be honoured, and why."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True)
class TlsConfig:
    context: ssl.SSLContext
    # normalised SANs a client certificate must carry one of (empty: any verified one)
    client_allowed_sans: frozenset[str]


def enabled(raw: Mapping[str, object]) -> bool:
    """exporter-toolkit's TLSConfig.IsEnabled: any certificate or client-auth key set."""
    names = ("cert", "key", "cert_file", "key_file", "client_ca", "client_ca_file")
    return any(raw.get(name) for name in (*names, "client_auth_type"))


def build_tls(raw: Mapping[str, object], base: Path) -> TlsConfig:
    """The server's SSLContext; ConfigKeyError (key relative to tls_server_config)."""
    unknown = sorted(key_text(key) for key in raw if key not in KEYS)
    if unknown:
        raise ConfigKeyError(unknown[0], "unknown key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _server_chain(context, raw, base)
    sans = _client_auth(context, raw, base)
    legacy = _versions(context, raw)
    _ciphers(context, raw, legacy)
    _options(context, raw)
    return TlsConfig(context, sans)


def normal_san(value: str) -> str:
    """A SAN as Go's x509 prints it: IP addresses in canonical form, the rest as is."""
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return value


def san_allowed(peer_cert: Mapping[str, object] | None, allowed: frozenset[str]) -> bool:
    """Whether a verified client certificate (SSLSocket.getpeercert()) has an allowed SAN."""
    sans = (peer_cert or {}).get("subjectAltName", ())
    names = {normal_san(str(entry[1])) for entry in sans} if isinstance(sans, tuple) else set()
    return bool(names & allowed)


def text(raw: Mapping[str, object], key: str) -> str | None:
    value = raw.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigKeyError(key, f"expected a string, got {shown(value)}")
    return value


def texts(raw: Mapping[str, object], key: str) -> list[str]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigKeyError(key, f"expected a list of strings, got {shown(value)}")
    return list(value)


def check_file(path: Path, key: str) -> None:
    """Refuse, naming the file, anything that is not a readable regular file of sane size.

    The agent's one way to open a file it is named (common/regular_files.py): a FIFO in
    place of a certificate must not hang the start-up, nor a device feed OpenSSL forever.
    """
    try:
        size = regular_size(path)
    except OSError as exc:
        raise ConfigKeyError(key, f"cannot read {path}: {exc.strerror or exc}") from exc
    if size > MAX_FILE_BYTES:
        raise ConfigKeyError(key, f"{path} is larger than {MAX_FILE_BYTES} bytes")


@contextlib.contextmanager
def _pem_path(raw: Mapping[str, object], base: Path, key: str) -> Iterator[str]:
    """A path OpenSSL can read `key` (inline PEM) or `key_file` (a file) from."""
    inline, named = text(raw, key), text(raw, f"{key}_file")
    if inline and named:
        raise ConfigKeyError(key, f"{key} and {key}_file are both set; give one")
    if named:
        # relative to the web config file, as in exporter-toolkit
        path = base / named
        check_file(path, f"{key}_file")
        yield str(path)
    elif inline:
        if not hasattr(os, "memfd_create"):
            raise ConfigKeyError(key, "inline PEM needs Linux (memfd); use a file")
        # an anonymous in-memory file: the key in the config never touches a disk
        fd = os.memfd_create("nvwatch-pem")
        try:
            os.write(fd, inline.encode())
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
    else:
        raise ConfigKeyError(f"{key}_file", f"missing: TLS needs {key}_file (or {key})")


def _server_chain(context: ssl.SSLContext, raw: Mapping[str, object], base: Path) -> None:
    with _pem_path(raw, base, "cert") as cert, _pem_path(raw, base, "key") as key:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            where = "cert_file" if text(raw, "cert_file") else "cert"
            names = f"{text(raw, 'cert_file') or 'cert'} with {text(raw, 'key_file') or 'key'}"
            raise ConfigKeyError(where, f"{names}: not a certificate and its key: {exc}") from exc


def _client_auth(context: ssl.SSLContext, raw: Mapping[str, object], base: Path) -> frozenset[str]:
    name = text(raw, "client_auth_type") or "NoClientCert"
    if name not in CLIENT_AUTH:
        raise ConfigKeyError(
            "client_auth_type", f"unknown value {shown(name)}: one of {', '.join(CLIENT_AUTH)}"
        )
    mode = CLIENT_AUTH[name]
    if mode is None:
        raise ConfigKeyError(
            "client_auth_type",
            f"{name} cannot be honoured: Python's ssl verifies every certificate it requires; "
            "use RequireAndVerifyClientCert with client_ca_file",
        )
    has_ca = bool(text(raw, "client_ca") or text(raw, "client_ca_file"))
    if has_ca and name == "NoClientCert":
        # exporter-toolkit refuses this too: a CA that would check nothing is a mistake
        raise ConfigKeyError(
            "client_ca_file", "set without a client_auth_type that asks for certificates"
        )
    if mode is not ssl.CERT_NONE and not has_ca:
        raise ConfigKeyError(
            "client_auth_type", f"{name} needs client_ca_file (or client_ca) to verify against"
        )
    if has_ca:
        _load_client_ca(context, raw, base)
    context.verify_mode = mode
    sans = texts(raw, "client_allowed_sans")
    if sans and mode is ssl.CERT_NONE:
        raise ConfigKeyError(
            "client_allowed_sans",
            "needs VerifyClientCertIfGiven or RequireAndVerifyClientCert: only a verified "
            "certificate's SANs mean anything",
        )
    return frozenset(normal_san(san) for san in sans)


def _load_client_ca(context: ssl.SSLContext, raw: Mapping[str, object], base: Path) -> None:
    inline, named = text(raw, "client_ca"), text(raw, "client_ca_file")
    if inline and named:
        raise ConfigKeyError("client_ca", "client_ca and client_ca_file are both set; give one")
    key = "client_ca_file" if named else "client_ca"
    try:
        if named:
            check_file(base / named, key)
            context.load_verify_locations(cafile=str(base / named))
        else:
            context.load_verify_locations(cadata=inline)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigKeyError(key, f"{named or 'inline PEM'}: no CA certificate: {exc}") from exc


def _version(raw: Mapping[str, object], key: str, default: str) -> ssl.TLSVersion:
    name = text(raw, key) or default
    if name not in VERSIONS:
        raise ConfigKeyError(
            key, f"unknown TLS version {shown(name)}: one of {', '.join(VERSIONS)}"
        )
    return VERSIONS[name]


def _versions(context: ssl.SSLContext, raw: Mapping[str, object]) -> bool:
    """Set min/max version; True when TLS below 1.2 is allowed (needs SECLEVEL=0)."""
    minimum, maximum = _version(raw, "min_version", "TLS12"), _version(raw, "max_version", "TLS13")
    if minimum > maximum:
        raise ConfigKeyError("min_version", f"{minimum.name} is above max_version {maximum.name}")
    legacy = minimum < ssl.TLSVersion.TLSv1_2
    if legacy and not (ssl.HAS_TLSv1 if minimum == ssl.TLSVersion.TLSv1 else ssl.HAS_TLSv1_1):
        raise ConfigKeyError("min_version", f"{minimum.name} is not built into this OpenSSL")
    with warnings.catch_warnings():
        # TLS 1.0 and 1.1 are deprecated, and the user asked for them explicitly
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = minimum
        context.maximum_version = maximum
    return legacy


def _ciphers(context: ssl.SSLContext, raw: Mapping[str, object], legacy: bool) -> None:
    names = texts(raw, "cipher_suites")
    for name in names:
        if name in TLS13_SUITES:
            raise ConfigKeyError(
                "cipher_suites", f"{shown(name)}: TLS 1.3 suites cannot be chosen (in Go neither)"
            )
        if name not in CIPHER_SUITES:
            raise ConfigKeyError(
                "cipher_suites", f"{shown(name)}: not one of Go's tls.CipherSuites() below TLS 1.3"
            )
    if not names and not legacy:
        return
    spec = ":".join(CIPHER_SUITES[name] for name in names) or "DEFAULT"
    # OpenSSL 3 refuses TLS 1.0/1.1 (their SHA-1 signatures) above security level 0
    spec += ":@SECLEVEL=0" if legacy else ""
    try:
        context.set_ciphers(spec)
    except ssl.SSLError as exc:
        raise ConfigKeyError("cipher_suites", f"none is available in this OpenSSL: {exc}") from exc
    available = {cipher["name"] for cipher in context.get_ciphers()}
    for name in names:
        if CIPHER_SUITES[name] not in available:
            raise ConfigKeyError("cipher_suites", f"{name} is not available in this OpenSSL")


def _options(context: ssl.SSLContext, raw: Mapping[str, object]) -> None:
    prefer = raw.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise ConfigKeyError(
            "prefer_server_cipher_suites", f"expected true or false, got {shown(prefer)}"
        )
    if prefer:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    curves = texts(raw, "curve_preferences")
    for curve in curves:
        if curve not in CURVES:
            raise ConfigKeyError("curve_preferences", f"{shown(curve)}: one of {', '.join(CURVES)}")
    if len(curves) > 1:
        raise ConfigKeyError(
            "curve_preferences",
            "Python's ssl sets exactly one curve (SSLContext.set_ecdh_curve); list one",
        )
    if curves:
        context.set_ecdh_curve(CURVES[curves[0]])
