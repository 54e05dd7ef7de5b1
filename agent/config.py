"""The agent's configuration: one object built by the CLI, handed to the runner.

Values arrive as strings from flags, the environment (`NVWATCH_<FLAG>`) or a YAML file;
the parsers here turn each into a typed value or raise `ConfigError` with one line an
operator can act on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agent.durations import DurationError

KNOWN_SOURCES = ("nvml", "infiniband", "host")
LOG_FORMATS = ("text", "json")


class ConfigError(ValueError):
    """Bad input from a flag, the environment or a config file."""


# A bad duration is bad input like any other: callers catch ConfigError alone.
CONFIG_ERRORS = (ConfigError, DurationError)


@dataclass(frozen=True)
class ScenarioSpec:
    """A simulation scenario, optionally aimed at one GPU index or one IB device."""

    name: str
    target: str | None = None

    @property
    def gpu(self) -> int | None:
        return int(self.target) if self.target is not None and self.target.isdigit() else None


@dataclass(frozen=True)
class AgentConfig:
    listen_host: str = "0.0.0.0"
    listen_port: int = 9477
    interval: float = 5.0
    source_timeout: float | None = None  # None: derived from the interval
    sources: tuple[str, ...] = KNOWN_SOURCES
    sysfs_root: Path = Path("/sys")
    simulate: str | None = None
    scenarios: tuple[ScenarioSpec, ...] = ()
    seed: int = 0
    web_config: Path | None = None
    log_format: str = "text"
    nvlink_detail: str = "link"

    @property
    def timeout(self) -> float:
        # a source may use most of the interval, but the loop must still tick on time
        if self.source_timeout is not None:
            return self.source_timeout
        return max(0.5, min(10.0, self.interval * 0.8))

    @property
    def stale_after(self) -> float:
        """Age of the newest snapshot after which /healthz reports stale."""
        return 3 * self.interval + self.timeout


def parse_listen(text: str) -> tuple[str, int]:
    """'0.0.0.0:9477', ':9477', '[::1]:9477', '127.0.0.1:0' -> (host, port)."""
    text = text.strip()
    match = re.match(r"^(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d+)$", text)
    if not match:
        raise ConfigError(f"invalid listen address {text!r}: use HOST:PORT, e.g. 0.0.0.0:9477")
    port = int(match.group("port"))
    if port > 65535:
        raise ConfigError(f"invalid listen address {text!r}: port {port} is out of range")
    host = match.group("v6") or match.group("host") or "0.0.0.0"
    return host, port


def parse_sources(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(dict.fromkeys(s.strip() for s in items if str(s).strip()))
    if not names:
        raise ConfigError("no sources given: choose from " + ", ".join(KNOWN_SOURCES))
    unknown = [n for n in names if n not in KNOWN_SOURCES]
    if unknown:
        raise ConfigError(
            f"unknown source {', '.join(unknown)}: choose from {', '.join(KNOWN_SOURCES)}"
        )
    return names


def parse_scenario(text: str) -> ScenarioSpec:
    """'thermal-runaway' or 'thermal-runaway@3' (GPU 3) or 'ib-congestion@mlx5_2'."""
    name, _, target = text.partition("@")
    if not name:
        raise ConfigError(f"invalid scenario {text!r}: use NAME or NAME@TARGET")
    return ScenarioSpec(name=name, target=target or None)


def load_config_file(path: Path, allowed: set[str]) -> dict[str, Any]:
    """Read a YAML mapping of option name -> value; unknown keys are an error.

    Keys are the long flag names, with dashes or underscores (`sysfs-root` or
    `sysfs_root`), so a config file reads like the command line it replaces.
    """
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"config file {path} is not valid YAML: {first}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: expected a mapping of option: value")
    result: dict[str, Any] = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        if name not in allowed:
            raise ConfigError(
                f"config file {path}: unknown key {key!r} (known: "
                + ", ".join(sorted(k.replace("_", "-") for k in allowed))
                + ")"
            )
        # lists (sources: [nvml, host]) become the comma form the flag takes
        if isinstance(value, list) and name != "scenario":
            value = ",".join(str(v) for v in value)
        result[name] = value
    return result
