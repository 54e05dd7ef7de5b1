"""The agent's configuration: one object built by the CLI, handed to the runner.

Values arrive as strings from flags, the environment (`NVWATCH_<FLAG>`) or a YAML file;
the parsers here turn each into a typed value or raise `ConfigError` with one line an
operator can act on.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvwatch.agent.sources.declaration import default_sources, selectable_sources
from nvwatch.common.durations import (
    DurationBounds,
    DurationError,
    parse_duration,
    prometheus_duration,
)
from nvwatch.common.yaml_safe import ConfigError as ConfigError
from nvwatch.common.yaml_safe import key_text, load_yaml_text, read_config_text, shown

if TYPE_CHECKING:
    from nvwatch.agent.server.probe_allow import AllowEntries

# --attribution modes (agent/sources/attribution); none by default: an SRE enables what
# the node runs, and a mode's reads (/proc of every GPU process, the kubelet socket) are
# something to choose, not to discover
ATTRIBUTION_MODES = ("slurm", "kubernetes")
DEFAULT_KUBELET_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
LOG_FORMATS = ("text", "json")


# A bad duration is bad input like any other: callers catch ConfigError alone.
CONFIG_ERRORS = (ConfigError, DurationError)

# Bounds of the duration flags, stated in their --help. The interval's floor keeps a
# typo such as 1ms from busy-looping a core (one poll of a DGX takes tens of ms); its
# ceiling is where /healthz staleness (3 intervals) stops telling anyone anything.
INTERVAL_BOUNDS = DurationBounds(0.1, 3600.0)
# dump's wait between its two polls (0 is also taken: one poll, no rates)
SETTLE_BOUNDS = DurationBounds(0.01, 600.0)
# how long a simulated fleet runs: a year is far below the timers' limit (292 years)
FLEET_DURATION_BOUNDS = DurationBounds(1.0, 365 * 86400.0)
# how often attribution re-reads /proc, the mapping directory and the kubelet: jobs
# start and end on a scale of minutes, and a new GPU process wakes it early anyway
ATTRIBUTION_INTERVAL_BOUNDS = DurationBounds(1.0, 3600.0)
BMC_CACHE_BOUNDS = DurationBounds(0.1, 300.0)
# how often the scheduler source reads Slurm: queues move on a scale of minutes, and each
# refresh is four controller RPCs; one second is the floor a test needs
SCHEDULER_INTERVAL_BOUNDS = DurationBounds(1.0, 3600.0)
# the deadline of one Slurm command: a loaded controller may take seconds to answer
SCHEDULER_TIMEOUT_BOUNDS = DurationBounds(0.1, 300.0)
# account and user label caps (series per partition grow with them)
SCHEDULER_MAX_ACCOUNTS_RANGE = (1, 10_000)
SCHEDULER_MAX_USERS_RANGE = (0, 10_000)
# The cap on what one Slurm command prints, in MiB: past it the command is killed and the
# source is down, so a runaway squeue costs the agent this much memory, not all it prints
# (the parse holds about twice the output at its peak: the text and, for a moment, its
# pieces). Real 22.05 `squeue --json` is about 3.2 KB per job record (3.5 MiB for 1,128
# records, docs/performance.md), so a queue of 100,000 records prints about 310 MiB; 512
# leaves room for longer names, paths and comments. (The simulator's records are ~330 B.)
SCHEDULER_MAX_OUTPUT_MIB = 512
SCHEDULER_MAX_OUTPUT_MIB_RANGE = (1, 4096)


def is_index(text: str) -> bool:
    """A GPU index: ASCII digits. str.isdigit() alone takes '１' (U+FF11), which int()
    reads as 1, and '²', which int() refuses with a ValueError."""
    return text.isascii() and text.isdigit()


@dataclass(frozen=True)
class ScenarioSpec:
    """A simulation scenario, optionally aimed at one GPU index or one IB device, and
    optionally bounded: it begins `from_s` and is repaired `until_s` simulated seconds
    after the node starts (None: the scenario's own onset; never repaired)."""

    name: str
    target: str | None = None
    from_s: float | None = None
    until_s: float | None = None
    # how much the scenario slows what it hits, 0 < slowdown < 1 (None: its default);
    # the simulator says which scenarios take one (sim/scenario_names.py)
    slowdown: float | None = None

    @property
    def gpu(self) -> int | None:
        return int(self.target) if self.target is not None and is_index(self.target) else None

    def __str__(self) -> str:
        """The form parse_scenario reads: 'ecc-dbe@2,from=30s,until=5m'."""
        text = f"{self.name}@{self.target}" if self.target else self.name
        for key, seconds in (("from", self.from_s), ("until", self.until_s)):
            if seconds is not None:
                text += f",{key}={prometheus_duration(seconds) if seconds else '0s'}"
        if self.slowdown is not None:
            text += f",slowdown={self.slowdown:g}"
        return text


@dataclass(frozen=True)
class AgentConfig:
    listen_host: str = "0.0.0.0"
    listen_port: int = 9477
    # `[::]` listens on IPv4 too, as Go exporters do; `tcp6:[::]:PORT` is IPv6 alone
    listen_ipv6_only: bool = False
    interval: float = 5.0
    source_timeout: float | None = None  # None: derived from the interval
    # the sources declared on by default (agent/sources/declaration.py)
    sources: tuple[str, ...] = field(default_factory=default_sources)
    sysfs_root: Path = Path("/sys")
    simulate: str | None = None
    scenarios: tuple[ScenarioSpec, ...] = ()
    seed: int = 0
    web_config: Path | None = None
    log_format: str = "text"
    nvlink_detail: str = "link"
    # mlx5 hw_counters exported: "default" (the loss/congestion set) or "all"
    ib_hw_counters: str = "default"
    # the kernel log XIDs are counted from; None: /dev/kmsg, or the simulated node's log
    kmsg_path: Path | None = None
    # who uses each GPU: modes, their cadence and what they read
    attribution: tuple[str, ...] = ()
    attribution_interval: float = 10.0
    hpc_job_mapping_dir: Path | None = None
    kubelet_socket: Path = DEFAULT_KUBELET_SOCKET
    proc_root: Path = Path("/proc")
    # a simulated node's MIG layout (--mig, sim/gpu/mig_layout.py); None: MIG off
    mig: str | None = None
    # with --simulate: a file of real processes the simulated GPUs report (sim/node/process_file.py)
    sim_process_file: Path | None = None
    # ipmi_exporter's module file: /probe?target=&module= reads one BMC (agent/bmc_probe.py)
    bmc_config: Path | None = None
    # a BMC read serves the probes of its target and module this long (HA Prometheus pairs)
    bmc_cache: float = 5.0
    # the targets /probe may send IPMI to (agent/server/probe_allow.py); None: any
    bmc_allow: AllowEntries | None = None
    # the scheduler source (--sources scheduler): cadence, deadline per Slurm command, and
    # label caps (accounts beyond the cap are "other"; per-user series off at 0), and the cap
    # on what one command prints
    scheduler_interval: float = 30.0
    scheduler_timeout: float = 10.0
    scheduler_max_accounts: int = 50
    scheduler_max_users: int = 0
    scheduler_max_output_mib: int = SCHEDULER_MAX_OUTPUT_MIB

    @property
    def attribution_timeout(self) -> float:
        """The bound of one resolver's I/O (the kubelet call's deadline)."""
        return max(0.5, min(5.0, self.attribution_interval * 0.5))

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


# Go's name for an IPv6-only listener, written before the address: `tcp6:[::]:9477`
IPV6_ONLY_PREFIX = "tcp6:"


def split_ipv6_only(text: str) -> tuple[bool, str]:
    """('tcp6:[::]:9477') -> (True, '[::]:9477'); any other address -> (False, itself)."""
    text = text.strip()
    if text.startswith(IPV6_ONLY_PREFIX):
        rest = text[len(IPV6_ONLY_PREFIX) :]
        if not rest.startswith("["):
            raise ConfigError(f"invalid listen address {text!r}: tcp6: takes [IPV6]:PORT")
        return True, rest
    return False, text


def parse_listen(text: str) -> tuple[str, int]:
    """'0.0.0.0:9477', ':9477', '[::1]:9477', '[fe80::1%eth0]:9477' -> (host, port)."""
    text = text.strip()
    match = re.match(
        r"^(?:\[(?P<v6>[0-9a-fA-F:.]+(?:%[A-Za-z0-9_.\-]+)?)\]|(?P<host>[^:\[\]]*)):"
        r"(?P<port>[0-9]+)$",
        text,
    )
    if not match:
        raise ConfigError(f"invalid listen address {text!r}: use HOST:PORT, e.g. 0.0.0.0:9477")
    # length first: int() refuses 4,300 digits with a ValueError, not a ConfigError
    digits = match.group("port").lstrip("0") or "0"
    if len(digits) > 5 or int(digits) > 65535:
        raise ConfigError(f"invalid listen address {text!r}: port {digits} is out of range")
    port = int(digits)
    host = match.group("v6") or match.group("host") or "0.0.0.0"
    return host, port


def format_listen(host: str, port: int, ipv6_only: bool = False) -> str:
    """The HOST:PORT form parse_listen reads back: an IPv6 address in brackets."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return IPV6_ONLY_PREFIX + where if ipv6_only else where


def parse_sources(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """'nvml,host' -> ('nvml', 'host'): the sources --sources selects, as declared."""
    known = selectable_sources()
    items = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(dict.fromkeys(s.strip() for s in items if str(s).strip()))
    if not names:
        raise ConfigError("no sources given: choose from " + ", ".join(known))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"unknown source {', '.join(map(key_text, unknown))}: choose from " + ", ".join(known)
        )
    return names


def parse_attribution(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """'slurm,kubernetes' -> ('slurm', 'kubernetes'); '' or 'none' -> () (off)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(dict.fromkeys(s.strip() for s in items if str(s).strip()))
    if names == ("none",):
        return ()
    unknown = [n for n in names if n not in ATTRIBUTION_MODES]
    if unknown:
        raise ConfigError(
            f"unknown attribution mode {', '.join(map(key_text, unknown))}: choose from "
            + ", ".join(ATTRIBUTION_MODES)
            + " (comma-separated), or none"
        )
    return names


# The one scenario syntax of every command and of NVWATCH_SCENARIO (serve, dump, doctor,
# topology, `simulate exec`; `simulate fleet` puts NODE: in front for one node):
#   NAME             the scenario on its default part (GPU 0, the first NVLink GPU, every
#                    InfiniBand port, or node-wide), from its default onset
#   NAME@TARGET      on one GPU (an index) or one HCA (mlx5_N)
#   ,from=DURATION   begins this long after the simulated node starts (0: from the start)
#   ,until=DURATION  is repaired this long after the node starts
#   ,slowdown=S      a fault that slows what it hits runs it at 1 - S of its healthy
#                    speed (0 < S < 1): gpu-slow@3,slowdown=0.2
# e.g. gpu-lost@3, ib-congestion@mlx5_1, ecc-dbe@2,from=1m,until=5m. Several are
# separated by spaces (or given as repeated --scenario flags).
SCENARIO_SYNTAX = "NAME[@TARGET][,from=DURATION][,until=DURATION][,slowdown=S]"
_SCENARIO_OPTIONS = ("from", "until", "slowdown")
_ZERO = re.compile(r"0+(?:\.0*)?(?:ms|[smhdwy])?")


def parse_scenario(text: str) -> ScenarioSpec:
    """'thermal-runaway', 'thermal-runaway@3' (GPU 3), 'ib-congestion@mlx5_2', and a time
    window in simulated time since the node started: 'ecc-dbe@2,from=30s,until=5m' (the
    fault begins at 30 s; at 5 min the simulator repairs it)."""
    head, *options = [part.strip() for part in text.strip().split(",")]
    name, _, target = head.partition("@")
    if not name or "=" in head:
        raise ConfigError(f"invalid scenario {shown(text)}: use {SCENARIO_SYNTAX}")
    window: dict[str, float] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or key not in _SCENARIO_OPTIONS:
            raise ConfigError(
                f"invalid scenario {shown(text)}: unknown option {shown(option)} "
                "(use from=, until= or slowdown=)"
            )
        if key in window:
            raise ConfigError(f"invalid scenario {shown(text)}: {key}= given twice")
        if key == "slowdown":
            window[key] = _slowdown(value, text)
        else:
            window[key] = _scenario_time(value, key, text)
    start, end = window.get("from"), window.get("until")
    if start is not None and end is not None and end <= start:
        raise ConfigError(f"invalid scenario {shown(text)}: until= must come after from=")
    return ScenarioSpec(
        name=name,
        target=target or None,
        from_s=start,
        until_s=end,
        slowdown=window.get("slowdown"),
    )


def _slowdown(value: str, text: str) -> float:
    try:
        slowdown = float(value)
    except ValueError:
        slowdown = math.nan
    # a fault that slows nothing, or stops what it hits, is another scenario
    if not 0.0 < slowdown < 1.0:
        raise ConfigError(
            f"invalid scenario {shown(text)}: slowdown={shown(value)} must be a fraction "
            "between 0 and 1 (0.2: 20 % slower)"
        )
    return slowdown


def _scenario_time(value: str, key: str, text: str) -> float:
    # from=0 is a fault present from the start; a repair at 0 would be no fault at all
    if key == "from" and _ZERO.fullmatch(value):
        return 0.0
    try:
        return parse_duration(value, f"{key}=")
    except DurationError as exc:
        raise ConfigError(f"invalid scenario {shown(text)}: {exc}") from exc


def split_scenarios(values: str | list[str] | tuple[str, ...]) -> list[str]:
    """Scenario texts from one string or several, separated by spaces or commas (as the
    environment and config files give them): a from=/until= piece after a comma belongs
    to the scenario before it (so does slowdown=), so 'gpu-lost@1,until=5m idle' is two
    scenarios."""
    items = values.split() if isinstance(values, str) else [str(v) for v in values]
    result: list[str] = []
    for piece in (p.strip() for item in items for p in item.replace(" ", ",").split(",")):
        if not piece:
            continue
        if result and piece.partition("=")[0] in _SCENARIO_OPTIONS:
            result[-1] += "," + piece
        else:
            result.append(piece)
    return result


def load_config_file(path: Path, allowed: set[str]) -> dict[str, Any]:
    """Read a YAML mapping of option name -> value; unknown keys are an error.

    Keys are the long flag names, with dashes or underscores (`sysfs-root` or
    `sysfs_root`), so a config file reads like the command line it replaces. Every
    error is a ConfigError of one line that names the file.
    """
    raw = load_yaml_text(read_config_text(path), path)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: expected a mapping of option: value")
    result: dict[str, Any] = {}
    spelt: dict[str, object] = {}  # option -> its key as written
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        if name not in allowed:
            raise ConfigError(
                f"config file {path}: unknown key {shown(key)} (known: "
                + ", ".join(sorted(k.replace("_", "-") for k in allowed))
                + ")"
            )
        if name in spelt:
            # `sysfs-root` and `sysfs_root` are two keys to YAML and one option here
            raise ConfigError(
                f"config file {path}: {key_text(key)}: given twice, as "
                f"{key_text(spelt[name])} and {key_text(key)}"
            )
        spelt[name] = key
        result[name] = _option_value(path, key, value)
    return result


# The longest value an option needs is a path (PATH_MAX, 4,096): the bound also keeps a
# value out of click's own messages, which quote a value they refuse whole.
MAX_VALUE_CHARS = 4096


def _option_value(path: Path, key: object, value: Any) -> Any:
    """A value as the flag takes it: a scalar, or a list joined to the comma form."""
    scalars = (str, int, float, bool, type(None))
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, scalars) for item in items):
        raise ConfigError(f"config file {path}: {key}: expected a value or a list of values")
    if sum(len(str(item)) for item in items) > MAX_VALUE_CHARS:
        raise ConfigError(
            f"config file {path}: {key}: {shown(value)} is longer than the limit of "
            f"{MAX_VALUE_CHARS:,} characters"
        )
    # lists (sources: [nvml, host]) become the comma form the flag takes
    if isinstance(value, list) and str(key).replace("-", "_") != "scenario":
        return ",".join(str(v) for v in value)
    return value
