"""A simulated agent says so where a person and a query look: nvwatch_agent_simulated on
/metrics, a banner on the landing page, a warning in the start-up log. A real one never
does. The simulated run is a shell left with NVWATCH_SIMULATE set, as `simulate exec`
leaves its command's environment, and no --simulate flag."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from nvwatch.sim.ports import free_port

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("NVWATCH_")}


@dataclass
class Served:
    metrics: str
    landing: str
    log: str


def _get(url: str, deadline: float, process: subprocess.Popen[str]) -> str:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return str(response.read().decode())
        except OSError:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, f"{url} did not answer"
            time.sleep(0.1)


def _serve(env: dict[str, str]) -> Iterator[Served]:
    port = free_port()
    process = subprocess.Popen(
        [*NVWATCH, "serve", "--sources", "host", "--interval", "1s",
         "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        metrics = _get(f"http://127.0.0.1:{port}/metrics", deadline, process)
        landing = _get(f"http://127.0.0.1:{port}/", deadline, process)
    finally:
        process.terminate()
        _, log = process.communicate(timeout=10)
    yield Served(metrics, landing, log)


@pytest.fixture(scope="module")
def simulated() -> Iterator[Served]:
    yield from _serve({**CLEAN_ENV, "NVWATCH_SIMULATE": "dgx-h100"})


@pytest.fixture(scope="module")
def real() -> Iterator[Served]:
    yield from _serve(CLEAN_ENV)


def test_metrics_carry_a_series_a_rule_can_alert_on(simulated: Served, real: Served) -> None:
    assert 'nvwatch_agent_simulated{profile="dgx-h100"} 1.0' in simulated.metrics.splitlines()
    assert "nvwatch_agent_simulated" not in real.metrics


def test_the_landing_page_has_a_banner(simulated: Served, real: Served) -> None:
    assert "SIMULATED: this agent reads a simulated dgx-h100 node" in simulated.landing
    # first thing on the page, before the title
    assert simulated.landing.index("SIMULATED") < simulated.landing.index("<h1>")
    assert "SIMULATED" not in real.landing


def test_the_start_up_log_warns(simulated: Served, real: Served) -> None:
    warnings = [line for line in simulated.log.splitlines() if " WARNING " in line]
    assert any("SIMULATED node dgx-h100" in line for line in warnings), simulated.log
    assert "SIMULATED" not in real.log
