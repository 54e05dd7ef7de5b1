"""A real Prometheus on loopback serving blocks a test wrote (sim/tsdb, promtool's
backfill): no scrapes, no rules, retention long enough for any timestamp, its log in its
work directory, stopped by its pid on the way out. The one way the tests start a
Prometheus on existing blocks."""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import require_tool
from tests.e2e.loopback import Endpoint, wait_for
from tests.e2e.service_commands import prometheus_argv, prometheus_config, write_yaml
from tests.processes import stop

READY_S = 60.0


@contextlib.contextmanager
def prometheus_on(data: Path, work: Path, *extra: str, tls: bool = False) -> Iterator[str]:
    """Prometheus on the data directory `data` (its config and log in `work`), with the
    flags `extra`, until the block ends; its URL (https when `tls`: a web config among
    `extra` serves TLS)."""
    binary = require_tool("prometheus")
    (work / "targets").mkdir(parents=True, exist_ok=True)
    config = prometheus_config(rule_files=[], targets=work / "targets", scrape_interval="1h",
                               scrape_timeout="10s", evaluation_interval="1h")  # fmt: skip
    endpoint = Endpoint.free()
    argv = prometheus_argv(binary, write_yaml(work / "prometheus.yml", config), data, endpoint,
                           ["--storage.tsdb.retention.time=100y", *extra])  # fmt: skip
    log = work / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"{'https' if tls else 'http'}://{endpoint.address}"
    try:
        wait_for("Prometheus ready", lambda: _ready(url, process, log), timeout=READY_S)
        yield url
    finally:
        stop(process, 30)


def _ready(url: str, process: subprocess.Popen[bytes], log: Path) -> bool:
    if process.poll() is not None:
        tail = log.read_text(errors="replace").splitlines()[-3:]
        raise AssertionError("prometheus exited: " + " | ".join(tail))
    # readiness only: checking the certificate is the tests' business
    context = ssl._create_unverified_context() if url.startswith("https") else None
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2, context=context) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as err:
        return err.code == 401  # behind basic auth: answering is ready enough
    except OSError:
        return False  # not listening yet
