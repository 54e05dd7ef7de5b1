"""The exporter-toolkit web config file: TLS, basic-auth users, headers, rate limit.

Same format Prometheus exporters use, so fleets keep one file (docs/security.md lists
what each key does here):

    tls_server_config: {cert_file: server.crt, key_file: server.key}
    basic_auth_users: {prometheus: "$2y$10$..."}   # bcrypt hashes, never plain passwords

Every key is honoured or refused at start-up: the loader raises WebConfigError with one
line naming the file and the key, and `nvwatch serve` exits 2. Unlike exporter-toolkit,
the file is read once at start-up: restart the agent to rotate certificates.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt

from nvwatch.agent.webconfig_tls import MAX_FILE_BYTES, ConfigKeyError, build_tls, enabled, text
from nvwatch.common.durations import DurationError, parse_duration
from nvwatch.common.yaml_safe import (
    ConfigError,
    key_text,
    load_yaml_text,
    read_config_text,
    shown,
)


class WebConfigError(ConfigError):
    """One line naming the web config file and, where there is one, the key."""


_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
# exporter-toolkit's extraHTTPHeaders: the only headers a config may add, and the values
# allowed where the header is an enumeration (None: any value)
ALLOWED_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}
_BCRYPT_HASH = re.compile(rb"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class RateLimit:
    interval_s: float
    burst: int


@dataclass(frozen=True)
class WebConfig:
    path: Path | None = None
    tls_context: ssl.SSLContext | None = None
    client_allowed_sans: frozenset[str] = frozenset()
    users: Mapping[str, bytes] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()
    rate_limit: RateLimit | None = None

    @property
    def tls(self) -> bool:
        return self.tls_context is not None


def load_web_config(path: Path) -> WebConfig:
    raw = _parse(path)
    try:
        return _config(path, raw)
    except ConfigKeyError as exc:
        raise WebConfigError(f"web config {path}: {exc.key}: {exc.message}") from exc


def _parse(path: Path) -> dict[str, Any]:
    try:
        # the agent's one reader and loader: a regular file only (a FIFO must fail, not
        # hang the start-up), no aliases (a 1 KB alias bomb took 25 s and 2.2 GB here),
        # bounded nesting and integers, no key twice, errors naming the file and the key
        text = read_config_text(path, "web config", MAX_FILE_BYTES)
        raw: Any = load_yaml_text(text, path, "web config")
    except ConfigError as exc:
        raise WebConfigError(str(exc)) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise WebConfigError(f"web config {path}: expected a mapping at the top level")
    return raw


def _config(path: Path, raw: dict[str, Any]) -> WebConfig:
    unknown = sorted(key_text(key) for key in raw if key not in _TOP_KEYS)
    if unknown:
        raise ConfigKeyError(unknown[0], "unknown key")
    tls_raw = _section(raw, "tls_server_config")
    tls = None
    if enabled(tls_raw):
        try:
            tls = build_tls(tls_raw, path.parent)
        except ConfigKeyError as exc:
            raise ConfigKeyError(f"tls_server_config.{exc.key}", exc.message) from exc
    return WebConfig(
        path=path,
        tls_context=tls.context if tls else None,
        client_allowed_sans=tls.client_allowed_sans if tls else frozenset(),
        users=_users(raw.get("basic_auth_users")),
        headers=_http_server(_section(raw, "http_server_config")),
        rate_limit=_rate_limit(_section(raw, "rate_limit")),
    )


def _section(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigKeyError(key, "expected a mapping")
    return value


def _users(raw: object) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigKeyError("basic_auth_users", "expected a mapping of user to bcrypt hash")
    users: dict[str, bytes] = {}
    for user, hashed in raw.items():
        key = f"basic_auth_users.{key_text(user)}"
        if not isinstance(user, str) or ":" in user or not isinstance(hashed, str):
            raise ConfigKeyError(key, "expected a user name without ':' and a bcrypt hash")
        users[user] = _bcrypt_hash(key, hashed)
    _one_cost(users)
    return users


def _one_cost(users: Mapping[str, bytes]) -> None:
    """Refuse users of different bcrypt costs: an unknown user is checked against a dummy
    hash of one cost, so with two costs the time of a 401 tells which user names exist
    (1.3 ms for a known cost-4 user, 107 ms for an unknown one beside a cost-12 user)."""
    costs = {user: int(hashed[4:6]) for user, hashed in users.items()}  # $2b$NN$
    if len(set(costs.values())) < 2:
        return
    low = min(costs, key=costs.__getitem__)
    high = max(costs, key=costs.__getitem__)
    raise ConfigKeyError(
        "basic_auth_users",
        f"users {low} (bcrypt cost {costs[low]}) and {high} (cost {costs[high]}) differ in "
        "cost; every user needs the same one, or how long a 401 takes tells which user "
        f"names exist: rehash {low} at cost {costs[high]} (htpasswd -nBC {costs[high]} {low})",
    )


def _bcrypt_hash(key: str, hashed: str) -> bytes:
    """A hash bcrypt can check, or ConfigKeyError: a bad one must not reach a request."""
    value = hashed.encode()
    match = _BCRYPT_HASH.fullmatch(value)
    if match is None or not 4 <= int(match.group(1)) <= 31:
        raise ConfigKeyError(
            key,
            "not a bcrypt hash ($2a$, $2b$ or $2y$, cost 04-31, 53 characters of salt and hash)",
        )
    # the salt must decode as bcrypt's base64; checking it at cost 4 (~1 ms) instead of
    # the configured cost keeps start-up fast whatever the cost
    try:
        bcrypt.checkpw(b"", value[:4] + b"04" + value[6:])
    except ValueError as exc:
        raise ConfigKeyError(key, f"not a valid bcrypt hash: {exc}") from exc
    return value


def _http_server(raw: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    unknown = sorted(key_text(key) for key in raw if key not in ("http2", "headers"))
    if unknown:
        raise ConfigKeyError(f"http_server_config.{unknown[0]}", "unknown key")
    http2 = raw.get("http2", False)
    if not isinstance(http2, bool):
        raise ConfigKeyError(
            "http_server_config.http2", f"expected true or false, got {shown(http2)}"
        )
    if http2:
        raise ConfigKeyError(
            "http_server_config.http2", "nvwatch serves HTTP/1.1 only; remove the key or set false"
        )
    headers = _section(raw, "headers") if "headers" in raw else {}
    return tuple(_header(name, value) for name, value in headers.items() if value != "")


def _header(name: object, value: object) -> tuple[str, str]:
    key = f"http_server_config.headers.{key_text(name)}"
    if not isinstance(name, str) or name not in ALLOWED_HEADERS:
        raise ConfigKeyError(key, f"cannot be configured; allowed: {', '.join(ALLOWED_HEADERS)}")
    allowed = ALLOWED_HEADERS[name]
    if not isinstance(value, str) or _CONTROL.search(value):
        raise ConfigKeyError(key, "expected a one-line string")
    if allowed is not None and value not in allowed:
        raise ConfigKeyError(key, f"{shown(value)} is not one of {', '.join(allowed)}")
    return name, value


def _rate_limit(raw: Mapping[str, Any]) -> RateLimit | None:
    unknown = sorted(key_text(key) for key in raw if key not in ("interval", "burst"))
    if unknown:
        raise ConfigKeyError(f"rate_limit.{unknown[0]}", "unknown key")
    interval = raw.get("interval", 0)
    if interval in (0, "0", "0s"):
        return None  # exporter-toolkit: an interval of 0 disables the limiter
    try:
        interval_s = parse_duration(text(raw, "interval") or "", "rate_limit.interval")
    except DurationError as exc:
        raise ConfigKeyError("rate_limit.interval", str(exc)) from exc
    burst = raw.get("burst")
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 1:
        # a burst of 0 would refuse every request (golang.org/x/time/rate)
        raise ConfigKeyError(
            "rate_limit.burst", f"expected a whole number >= 1, got {shown(burst)}"
        )
    return RateLimit(interval_s, burst)
