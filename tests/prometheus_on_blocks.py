"""A real Prometheus on loopback serving blocks a test wrote (sim/tsdb): no scrapes, no
rules, retention long enough for any timestamp, stopped by its pid on the way out."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import require_tool
from tests.e2e.loopback import Endpoint, answers_ok, wait_for
from tests.e2e.service_commands import prometheus_argv, prometheus_config, write_yaml
from tests.processes import stop


@contextlib.contextmanager
def prometheus_on(data: Path, work: Path, *extra: str) -> Iterator[str]:
    """Prometheus on the data directory `data` (its config in `work`), with the flags
    `extra`, until the block ends; its URL."""
    binary = require_tool("prometheus")
    (work / "targets").mkdir(exist_ok=True)
    config = prometheus_config(rule_files=[], targets=work / "targets", scrape_interval="1h",
                               scrape_timeout="10s", evaluation_interval="1h")  # fmt: skip
    endpoint = Endpoint.free()
    argv = prometheus_argv(binary, write_yaml(work / "prometheus.yml", config), data, endpoint,
                           ["--storage.tsdb.retention.time=100y", *extra])  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("Prometheus ready", lambda: answers_ok(f"{endpoint.url}/-/ready"), timeout=60)
        yield endpoint.url
    finally:
        stop(process)
