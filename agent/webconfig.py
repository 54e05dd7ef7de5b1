"""The exporter-toolkit web config file: TLS certificate and basic-auth users.

Same shape as Prometheus exporters use, so fleets keep one format:

    tls_server_config: {cert_file: server.crt, key_file: server.key}
    basic_auth_users: {prometheus: "$2y$10$..."}   # bcrypt hashes, never plain passwords
"""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml


class WebConfigError(ValueError):
    pass


_TOP_KEYS = {"tls_server_config", "basic_auth_users", "http_server_config"}
_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version"}


@dataclass
class WebConfig:
    cert_file: Path | None = None
    key_file: Path | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    # bcrypt is deliberately slow (~50 ms at cost 10); remember verified credentials so a
    # scrape every few seconds does not burn a core. Keyed by the exact header value.
    _verified: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    def ssl_context(self) -> ssl.SSLContext:
        assert self.cert_file is not None and self.key_file is not None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"cannot load TLS certificate/key: {exc}") from exc
        return context

    def authorized(self, username: str, password: str) -> bool:
        if not self.users:
            return True
        hashed = self.users.get(username)
        key = f"{username}\0{password}"
        with self._lock:
            if key in self._verified:
                return True
        # compare against a dummy hash for unknown users too: no timing hint on user names
        candidate = hashed or _DUMMY_HASH
        ok = bcrypt.checkpw(password.encode(), candidate) and hashed is not None
        if ok:
            with self._lock:
                if len(self._verified) > 64:
                    self._verified.clear()
                self._verified.add(key)
        return ok


_DUMMY_HASH = bcrypt.hashpw(b"nvwatch-dummy", bcrypt.gensalt(rounds=4))


def load_web_config(path: Path) -> WebConfig:
    try:
        raw: Any = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise WebConfigError(f"cannot read web config {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise WebConfigError(f"web config {path} is not valid YAML: {exc}") from exc
    if raw is None:
        return WebConfig()
    if not isinstance(raw, dict):
        raise WebConfigError(f"web config {path}: expected a mapping at the top level")
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise WebConfigError(f"web config {path}: unknown key(s) {', '.join(sorted(unknown))}")
    config = WebConfig()
    tls = raw.get("tls_server_config") or {}
    if not isinstance(tls, dict) or set(tls) - _TLS_KEYS:
        raise WebConfigError(f"web config {path}: tls_server_config has unknown keys")
    if tls:
        if "cert_file" not in tls or "key_file" not in tls:
            raise WebConfigError(
                f"web config {path}: tls_server_config needs cert_file and key_file"
            )
        # relative paths are relative to the config file, as in exporter-toolkit
        config.cert_file = path.parent / str(tls["cert_file"])
        config.key_file = path.parent / str(tls["key_file"])
    users = raw.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise WebConfigError(f"web config {path}: basic_auth_users must map user to bcrypt hash")
    for user, hashed in users.items():
        value = str(hashed).encode()
        if not value.startswith((b"$2a$", b"$2b$", b"$2y$")):
            raise WebConfigError(f"web config {path}: password of {user!r} is not a bcrypt hash")
        config.users[str(user)] = value
    if config.tls:
        config.ssl_context()  # fail at start-up, not at the first scrape
    return config
