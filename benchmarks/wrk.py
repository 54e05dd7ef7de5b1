"""Drive Debian's `wrk --latency` in its own process and parse what it prints."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_UNIT_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PERCENTILE = re.compile(r"^\s*(\d+(?:\.\d+)?)%\s+(\d+(?:\.\d+)?)(us|ms|s|m|h)\s*$")
_REQUESTS = re.compile(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h)")
_RPS = re.compile(r"^Requests/sec:\s+([\d.]+)")
_ERRORS = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)|Socket errors:(.*)")

GZIP_HEADER = "Accept-Encoding: gzip"


class WrkError(RuntimeError):
    pass


@dataclass(frozen=True)
class WrkResult:
    connections: int
    gzip: bool
    requests: int
    requests_per_second: float
    p50_seconds: float
    p99_seconds: float
    errors: str | None  # wrk's socket-error / non-2xx line, None when clean
    # kernel TcpExt ListenOverflows during the run (system-wide; only the server under
    # test is being connected to): connections that met a full accept queue
    listen_overflows: int | None = None


def wrk_path() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise WrkError("wrk is not installed (Debian package `wrk`)")
    return path


def run_wrk(url: str, connections: int, duration: float, *, gzip: bool = False) -> WrkResult:
    """One wrk run; threads = min(connections, 2) because the machine has few cores and
    wrk needs at least one connection per thread."""
    threads = max(1, min(connections, 2))
    seconds = max(1, round(duration))
    argv = [
        wrk_path(),
        f"-c{connections}",
        f"-t{threads}",
        f"-d{seconds}s",
        "--timeout",
        "5s",
        "--latency",
    ]
    if gzip:
        argv += ["-H", GZIP_HEADER]
    argv.append(url)
    overflows_before = listen_overflows()
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=seconds + 30, check=False
        )
    except subprocess.TimeoutExpired as exc:
        # subprocess.run kills wrk on timeout; say which run hung
        raise WrkError(f"wrk did not finish: {' '.join(argv)}") from exc
    if done.returncode != 0:
        raise WrkError(f"wrk failed ({done.returncode}): {done.stderr.strip() or done.stdout}")
    result = parse_wrk(done.stdout, connections=connections, gzip=gzip)
    overflows_after = listen_overflows()
    if overflows_before is None or overflows_after is None:
        return result
    return dataclasses.replace(result, listen_overflows=overflows_after - overflows_before)


def listen_overflows() -> int | None:
    """TcpExt ListenOverflows from /proc/net/netstat; None where it cannot be read."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            if "ListenOverflows" in table:
                return int(table["ListenOverflows"])
    return None


def parse_wrk(output: str, *, connections: int, gzip: bool) -> WrkResult:
    percentiles: dict[float, float] = {}
    requests = 0
    rps = 0.0
    errors: list[str] = []
    in_distribution = False
    for line in output.splitlines():
        if line.strip().startswith("Latency Distribution"):
            in_distribution = True
            continue
        if in_distribution:
            match = _PERCENTILE.match(line)
            if match:
                pct, value, unit = match.groups()
                percentiles[float(pct)] = float(value) * _UNIT_SECONDS[unit]
                continue
            in_distribution = False
        if match := _REQUESTS.match(line):
            requests = int(match.group(1))
        elif match := _RPS.match(line):
            rps = float(match.group(1))
        elif _ERRORS.search(line):
            errors.append(line.strip())
    if 50.0 not in percentiles or 99.0 not in percentiles or requests == 0:
        raise WrkError(f"could not parse wrk output:\n{output}")
    return WrkResult(
        connections=connections,
        gzip=gzip,
        requests=requests,
        requests_per_second=rps,
        p50_seconds=percentiles[50.0],
        p99_seconds=percentiles[99.0],
        errors="; ".join(errors) or None,
    )
