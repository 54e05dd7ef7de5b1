"""The BMC config: ipmi_exporter's module file, accepted as it is, plus keys of ours.

A site that runs the Prometheus community ipmi_exporter points nvwatch at the file it
has. Its format (as prometheus-community/ipmi_exporter parses and documents it):

    modules:
      <name>:
        user: admin                  # the IPMI user; absent: the null user
        pass: secret                 # its password; ours: `password_file` instead
        driver: LAN_2_0              # FreeIPMI's driver type: only LAN_2_0 here
        privilege: operator          # user | operator | admin (FreeIPMI's default: operator)
        timeout: 20000               # ms (FreeIPMI's session timeout; default 20000)
        collectors: [ipmi, dcmi]     # default ipmi, dcmi, bmc, chassis
        exclude_sensor_ids: [2, 29]  # SDR record ids left out
        workaround_flags: [...]      # FreeIPMI's; accepted, not used
        collector_cmd / default_args / custom_args / sel_events   # accepted, not used

Ours: `password_file` (the password is the file's first line; a path relative to the
config file's folder), `inlet_pattern` and `exhaust_pattern` (regular expressions on the
sensor name, for vendors that give inlet or exhaust air no entity id of its own).

Keys nvwatch accepts and does not use are listed in `BmcConfig.unused_keys`, for the
server to log once at start; an unknown key is an error, as in ipmi_exporter (a typo
must not pass as a default). Every error is one ConfigError line naming the file and key.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nvwatch.agent.sources.bmc.reading import DEFAULT_EXHAUST_PATTERN, Module
from nvwatch.common.regular_files import open_regular
from nvwatch.common.yaml_safe import ConfigError, key_text, load_yaml_text, read_config_text, shown

WHAT = "BMC config"
# ipmi_exporter's collectors (config.go); nvwatch reads two of them
IPMI_EXPORTER_COLLECTORS = (
    "ipmi",
    "dcmi",
    "bmc",
    "bmc-watchdog",
    "bmc-device-id",
    "chassis",
    "sel",
    "sel-events",
    "sm-lan-mode",
)
READ_COLLECTORS = ("ipmi", "dcmi")
DEFAULT_COLLECTORS = ("ipmi", "dcmi", "bmc", "chassis")  # ipmi_exporter's defaultConfig
PRIVILEGES = ("user", "operator", "admin")
DEFAULT_PRIVILEGE = "operator"  # FreeIPMI's, which ipmi_exporter leaves in place
DEFAULT_TIMEOUT_MS = 20000  # FreeIPMI's session timeout, likewise
# a read needs a few round trips at the least; an hour is past any scrape interval
TIMEOUT_BOUNDS_MS = (100, 3_600_000)
SUPPORTED_DRIVER = "LAN_2_0"
# IPMI 2.0 limits: user names 16 bytes, RMCP+ passwords 20 bytes
MAX_USER_BYTES = 16
MAX_PASSWORD_BYTES = 20

# keys nvwatch reads
_USED_KEYS = frozenset(
    {
        "user",
        "pass",
        "password_file",
        "driver",
        "privilege",
        "timeout",
        "collectors",
        "exclude_sensor_ids",
        "inlet_pattern",
        "exhaust_pattern",
    }
)
# ipmi_exporter's keys that only make sense for FreeIPMI's tools
_UNUSED_KEYS = frozenset(
    {"workaround_flags", "collector_cmd", "default_args", "custom_args", "sel_events"}
)


@dataclass(frozen=True)
class BmcConfig:
    modules: Mapping[str, Module]
    # dotted paths of what nvwatch accepts and does not use ("modules.dell.workaround_flags",
    # "modules.dell.collectors.sel"), for the server to log once at start
    unused_keys: tuple[str, ...]


def load_bmc_config(path: Path) -> BmcConfig:
    """The modules of the BMC config file at `path`; ConfigError, one line, on bad input."""
    raw = load_yaml_text(read_config_text(path, WHAT), path, WHAT)
    if not isinstance(raw, dict) or not isinstance(raw.get("modules"), dict):
        raise ConfigError(f"{WHAT} {path}: expected `modules:`, a mapping of name: module")
    extra = sorted(key_text(k) for k in raw if k != "modules")
    if extra:
        raise ConfigError(f"{WHAT} {path}: unknown key {', '.join(extra)} (known: modules)")
    if not raw["modules"]:
        raise ConfigError(f"{WHAT} {path}: modules: no module defined")
    modules: dict[str, Module] = {}
    unused: list[str] = []
    for name, body in raw["modules"].items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{WHAT} {path}: modules: module name {shown(name)} is not text")
        where = _Where(path, f"modules.{key_text(name)}")
        modules[name] = _module(name, body, where)
        unused += _unused(body, where.key)
    return BmcConfig(MappingProxyType(modules), tuple(unused))


@dataclass(frozen=True)
class _Where:
    """The file and the key path an error names."""

    path: Path
    key: str

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{WHAT} {self.path}: {self.key}.{key}: {problem}")


def _module(name: str, body: Any, where: _Where) -> Module:
    if not isinstance(body, dict):
        raise ConfigError(f"{WHAT} {where.path}: {where.key}: expected a mapping of key: value")
    unknown = sorted(key_text(k) for k in body if k not in _USED_KEYS | _UNUSED_KEYS)
    if unknown:
        known = ", ".join(sorted(_USED_KEYS | _UNUSED_KEYS))
        raise ConfigError(
            f"{WHAT} {where.path}: {where.key}: unknown key {', '.join(unknown)} (known: {known})"
        )
    _driver(body.get("driver"), where)
    return Module(
        name=name,
        user=_user(body.get("user"), where),
        password=_password(body, where),
        privilege=_privilege(body.get("privilege"), where),
        timeout_s=_timeout_ms(body.get("timeout"), where) / 1000.0,
        collectors=frozenset(_collectors(body.get("collectors"), where)),
        exclude_sensor_ids=frozenset(_record_ids(body.get("exclude_sensor_ids"), where)),
        inlet_pattern=_pattern(body.get("inlet_pattern"), "inlet_pattern", where),
        exhaust_pattern=_pattern(body.get("exhaust_pattern"), "exhaust_pattern", where)
        or DEFAULT_EXHAUST_PATTERN,
    )


def _text(value: Any, key: str, where: _Where) -> str:
    # YAML reads `pass: 1234` as a number; FreeIPMI's file would take it as text too
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise where.error(key, f"expected text, got {shown(value)}")
    return str(value)


def _user(value: Any, where: _Where) -> str:
    user = "" if value is None else _text(value, "user", where)
    if len(user.encode()) > MAX_USER_BYTES:
        raise where.error("user", f"longer than IPMI's {MAX_USER_BYTES} bytes")
    return user


def _password(body: Mapping[str, Any], where: _Where) -> str:
    if "pass" in body and "password_file" in body:
        raise where.error("password_file", "give either pass or password_file, not both")
    if "password_file" in body:
        password = _password_file(body["password_file"], where)
    else:
        password = "" if body.get("pass") is None else _text(body["pass"], "pass", where)
    key = "password_file" if "password_file" in body else "pass"
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise where.error(key, f"the password is longer than IPMI 2.0's {MAX_PASSWORD_BYTES} bytes")
    return password


def _password_file(value: Any, where: _Where) -> str:
    if not isinstance(value, str) or not value:
        raise where.error("password_file", f"expected a file name, got {shown(value)}")
    file = where.path.parent / value  # an absolute `value` stays as it is
    try:
        # a regular file only: a FIFO would hang the start-up (common/regular_files.py)
        with io.TextIOWrapper(open_regular(file), encoding="utf-8") as stream:
            first = stream.readline(MAX_PASSWORD_BYTES * 4 + 2)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise where.error("password_file", f"cannot read {file}: {reason}") from None
    password = first.rstrip("\r\n")
    if not password:
        raise where.error("password_file", f"{file}: the first line is empty")
    return password


def _driver(value: Any, where: _Where) -> None:
    if value is None or (isinstance(value, str) and value.upper() == SUPPORTED_DRIVER):
        return
    kind = "IPMI 1.5" if str(value).upper() == "LAN" else "not a LAN driver"
    raise where.error(
        "driver",
        f"{shown(value)} ({kind}) is not supported: nvwatch reads BMCs over IPMI 2.0 "
        f"(RMCP+) only, driver: {SUPPORTED_DRIVER}",
    )


def _privilege(value: Any, where: _Where) -> str:
    if value is None:
        return DEFAULT_PRIVILEGE
    if not isinstance(value, str) or value.lower() not in PRIVILEGES:
        raise where.error("privilege", f"{shown(value)}: choose from {', '.join(PRIVILEGES)}")
    return value.lower()


def _timeout_ms(value: Any, where: _Where) -> int:
    if value is None:
        return DEFAULT_TIMEOUT_MS
    low, high = TIMEOUT_BOUNDS_MS
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise where.error(
            "timeout", f"{shown(value)}: expected milliseconds, a whole number from {low} to {high}"
        )
    return value


def _collectors(value: Any, where: _Where) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_COLLECTORS
    if not isinstance(value, list):
        raise where.error("collectors", f"expected a list, got {shown(value)}")
    for item in value:
        if item not in IPMI_EXPORTER_COLLECTORS:
            raise where.error(
                "collectors",
                f"unknown collector {shown(item)} (ipmi_exporter's: "
                f"{', '.join(IPMI_EXPORTER_COLLECTORS)})",
            )
    return tuple(value)


def _record_ids(value: Any, where: _Where) -> tuple[int, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= 0xFFFF:
            raise where.error("exclude_sensor_ids", f"{shown(item)} is not an SDR record id")
    return tuple(items)


def _pattern(value: Any, key: str, where: _Where) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise where.error(key, f"expected a regular expression, got {shown(value)}")
    try:
        re.compile(value)
    except re.error as exc:
        raise where.error(key, f"{shown(value)} is not a regular expression: {exc}") from None
    return value


def _unused(body: Mapping[str, Any], module_key: str) -> list[str]:
    """What of this module nvwatch accepts and leaves alone: FreeIPMI's options, and the
    collectors it does not read."""
    keys = [f"{module_key}.{key}" for key in sorted(body) if key in _UNUSED_KEYS]
    collectors = _collector_list(body)
    keys += [f"{module_key}.collectors.{c}" for c in collectors if c not in READ_COLLECTORS]
    return keys


def _collector_list(body: Mapping[str, Any]) -> tuple[str, ...]:
    """The collectors the file names (not the defaults: the operator wrote none of them)."""
    value = body.get("collectors")
    return () if value is None else tuple(value)
