"""`nvwatch serve --simulate` answers /probe for its simulated node's BMC, with the
simulator's built-in module, through the same probe service and exposition as a real
BMC's; the node power it reports holds the GPUs the agent's own /metrics reports."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.sim.fleet.plan import bmc_address
from nvwatch.sim.ports import LOOPBACK, free_port
from tests.processes import stop


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}{path}", timeout=10) as reply:
        return str(reply.read().decode())


def _values(body: str, name: str) -> dict[str, float]:
    """Value by the sample's `sensor` label (or its `gpu` label) of one family."""
    return {
        sample.labels.get("sensor", sample.labels.get("gpu", "")): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == name
    }


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nvwatch.agent.cli",
            "serve",
            "--simulate=dgx-h100",
            "--sources=nvml",
            f"--listen={LOOPBACK}:{port}",
            "--interval=1s",
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.poll() is None, "serve --simulate exited"
            with contextlib.suppress(OSError):
                _get(port, "/metrics")
                break
            time.sleep(0.2)
        yield port
    finally:
        stop(process)


def test_the_simulated_node_s_bmc_answers_its_probe(port: int) -> None:
    gpus = sum(_values(_get(port, "/metrics"), "nvwatch_gpu_power_watts").values())
    body = _get(port, f"/probe?target={bmc_address(0)}")
    assert _values(body, "nvwatch_bmc_up") == {"": 1.0}
    node = _values(body, "nvwatch_bmc_power_watts")["dcmi"]
    # the node draws its eight GPUs and more (CPUs, fans, the rest), within DGX H100's 10.2 kW
    assert gpus > 0 and gpus < node <= 10_200
    inlet = [v for k, v in _values(body, "nvwatch_bmc_temperature_celsius").items() if "Inlet" in k]
    assert inlet and all(15 < v < 35 for v in inlet)


def test_a_target_that_is_not_the_simulated_bmc_is_down(port: int) -> None:
    body = _get(port, f"/probe?target={bmc_address(1)}")
    assert _values(body, "nvwatch_bmc_up") == {"": 0.0}
    assert body.startswith("# nvwatch_bmc_up 0: ")
