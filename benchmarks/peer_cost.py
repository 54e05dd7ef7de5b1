"""nvwatch beside nvitop-exporter on one simulated node: process CPU per exported sample.

nvitop-exporter (https://github.com/XuehaiPan/nvitop, a pynvml-based Prometheus
exporter) runs unchanged under `nvwatch simulate exec`, which puts the simulated NVML
under its pynvml; nvwatch runs as `nvwatch serve --simulate`. Both poll the same
simulated node at a 1 s interval, one after the other, and both pay for the simulator
in their own process. Each is scraped once a second, as Prometheus would (gzip asked
for), while the CPU time of its process tree is measured (`sim_cost.cpu_window`); the
samples are the non-comment lines of its exposition.

nvitop-exporter is used from this interpreter when it is importable, otherwise installed
into a throwaway venv (removed afterwards). When that fails the result says why.
"""

from __future__ import annotations

import gzip
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from benchmarks.common import nvwatch_command, running
from benchmarks.harness import count_samples
from benchmarks.sim_cost import cpu_window, serve_argv
from nvwatch.sim.ports import free_port

REQUIREMENT = "nvitop-exporter>=1.7,<1.8"
PEER = "nvitop-exporter"
# nvwatch like for like (GPU metrics, one series per GPU for NVLink), then as it ships
NVWATCH_CONFIGS: tuple[tuple[str, ...], ...] = (
    ("--sources=nvml", "--nvlink-detail=gpu"),
    (),
)
_INSTALL_TIMEOUT_S = 300.0


class PeerUnavailable(RuntimeError):
    """nvitop-exporter could not be imported or installed; the message says why."""


@dataclass(frozen=True)
class ExporterCost:
    name: str  # "nvitop-exporter 1.7.2", "nvwatch --sources=nvml --nvlink-detail=gpu"
    seconds: float
    cpu_ms_per_s: float  # process tree, scraped once a second
    samples: int  # non-comment lines of the last scrape
    scrapes: int

    @property
    def us_per_s_per_sample(self) -> float:
        """CPU per second per exported sample, in microseconds."""
        return 1e3 * self.cpu_ms_per_s / max(1, self.samples)


@dataclass(frozen=True)
class PeerCost:
    profile: str
    interval: float
    peer: ExporterCost | None  # None when nvitop-exporter could not be run
    nvwatch: list[ExporterCost] = field(default_factory=list)  # NVWATCH_CONFIGS order
    unavailable: str | None = None  # why the peer is missing


class _Scraper:
    """GET /metrics as Prometheus does (gzip accepted); remembers the last sample count."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples = 0
        self.scrapes = 0

    def __call__(self) -> None:
        request = urllib.request.Request(self.url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=5.0) as response:
            body: bytes = response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
        self.samples = count_samples(body)
        self.scrapes += 1


def measure_peer_cost(
    profile: str,
    interval: float,
    seconds: float,
    warmup: float,
    log_dir: Path,
    configs: tuple[tuple[str, ...], ...] = NVWATCH_CONFIGS,
) -> PeerCost:
    """nvitop-exporter, then nvwatch in each of `configs`, one at a time."""
    venv = Path(tempfile.mkdtemp(prefix="nvwatch-bench-nvitop-"))
    peer: ExporterCost | None = None
    unavailable: str | None = None
    try:
        try:
            command, version = peer_command(venv)
        except PeerUnavailable as exc:
            unavailable = str(exc)
        else:
            port = free_port()
            argv = [
                *nvwatch_command(),
                *("simulate", "exec", "--profile", profile, "--"),
                *command,
                *("--bind-address", "127.0.0.1", "--port", str(port)),
                *("--interval", f"{interval:g}"),
            ]
            # it has no health endpoint: /metrics answers once its first update is done
            metrics = f"http://127.0.0.1:{port}/metrics"
            log = log_dir / f"{PEER}-{profile}.log"
            peer = _measure(f"{PEER} {version}", argv, metrics, metrics, seconds, warmup, log)
        nvwatch = [
            _measure_nvwatch(profile, interval, seconds, warmup, log_dir, flags)
            for flags in configs
        ]
    finally:
        shutil.rmtree(venv, ignore_errors=True)
    return PeerCost(profile, interval, peer, nvwatch, unavailable)


def nvwatch_name(flags: tuple[str, ...]) -> str:
    return " ".join(("nvwatch", *flags)) if flags else "nvwatch (default sources)"


def _measure_nvwatch(
    profile: str,
    interval: float,
    seconds: float,
    warmup: float,
    log_dir: Path,
    flags: tuple[str, ...],
) -> ExporterCost:
    port = free_port()
    argv = serve_argv(profile, interval, port, *flags)
    ready = f"http://127.0.0.1:{port}/healthz"
    metrics = f"http://127.0.0.1:{port}/metrics"
    log = log_dir / f"nvwatch-peer-{profile}-{len(flags)}.log"
    return _measure(nvwatch_name(flags), argv, ready, metrics, seconds, warmup, log)


def _measure(
    name: str,
    argv: list[str],
    ready_url: str,
    metrics_url: str,
    seconds: float,
    warmup: float,
    log: Path,
) -> ExporterCost:
    """Start `argv`, warm up, then its tree's CPU while it is scraped once a second; the
    process group is stopped however this ends (common.running)."""
    scrape = _Scraper(metrics_url)
    with running(argv, ready_url, ready_timeout=60.0, log=log) as process:
        wall, cpu_ms_per_s = cpu_window(process.pid, seconds, warmup, scrape)
    if scrape.samples == 0:
        raise RuntimeError(f"{name}: no samples in /metrics (log: {log})")
    return ExporterCost(name, wall, cpu_ms_per_s, scrape.samples, scrape.scrapes)


# --- getting nvitop-exporter -------------------------------------------------------------


def peer_command(venv: Path) -> tuple[list[str], str]:
    """(argv prefix that runs nvitop-exporter, its version): this interpreter's copy, or
    one installed into `venv`. Raises PeerUnavailable with the reason."""
    if importlib.util.find_spec("nvitop_exporter") is not None:
        return [sys.executable, "-m", "nvitop_exporter"], metadata.version(PEER)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "venv", str(venv)], "creating a venv")
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, "--retries", "1", "--timeout", "30", REQUIREMENT], f"pip install {REQUIREMENT}")
    version = _run(
        [str(python), "-c", f"from importlib import metadata; print(metadata.version({PEER!r}))"],
        f"reading the installed {PEER}'s version",
    )
    return [str(venv / "bin" / PEER)], version.strip()


def _run(argv: list[str], what: str) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerUnavailable(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-1:]
        raise PeerUnavailable(f"{what} failed ({done.returncode}): {' '.join(errors)[:300]}")
    return done.stdout
