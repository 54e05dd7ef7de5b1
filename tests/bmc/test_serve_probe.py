"""`nvwatch serve --bmc-config` end to end: a real agent process probing a real BMC
(ipmi_sim) at Prometheus's request, a BMC that does not answer, and bad modules.

Values are checked against what the BMC was set to through its console; the parsing of
the body is prometheus_client's own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.sim.ports import LOOPBACK, free_port
from tests.bmc.ipmi_sim import IpmiSim
from tests.bmc.sim_sensors import FAN2, INLET, PASSWORD, PSU1, PSU_FAILURE, USER, initial_raw
from tests.processes import stop

TIMEOUT_MS = 1500
CONFIG = f"""\
modules:
  default:
    user: {USER}
    pass: {PASSWORD}
    driver: LAN_2_0
    privilege: admin
    timeout: {TIMEOUT_MS}
    workaround_flags: [opensesspriv]
    collectors: [ipmi, dcmi, sel]
  from_file:
    user: {USER}
    password_file: bmc-password
    privilege: admin
    timeout: {TIMEOUT_MS}
    collectors: [ipmi]
  wrong:
    user: {USER}
    pass: not-the-password
    privilege: admin
    timeout: {TIMEOUT_MS}
    collectors: [ipmi]
"""


@dataclass
class Agent:
    port: int
    process: subprocess.Popen[str]

    def get(self, path: str) -> tuple[int, str, float]:
        began = time.monotonic()
        url = f"http://{LOOPBACK}:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                return reply.status, reply.read().decode(), time.monotonic() - began
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), time.monotonic() - began

    def probe(self, target: str, module: str = "default") -> dict[tuple[str, str], float]:
        status, body, _ = self.get(f"/probe?target={target}&module={module}")
        assert status == 200, body
        return samples(body)


def samples(body: str) -> dict[tuple[str, str], float]:
    """(name, the sensor label or "") -> value of every sample in a probe's body."""
    return {
        (sample.name, sample.labels.get("sensor", "")): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    directory = tmp_path_factory.mktemp("serve-bmc")
    (directory / "ipmi.yml").write_text(CONFIG)
    (directory / "bmc-password").write_text(PASSWORD + "\n")
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nvwatch.agent.cli",
            "serve",
            "--sources=host",
            f"--listen={LOOPBACK}:{port}",
            f"--bmc-config={directory / 'ipmi.yml'}",
            "--bmc-cache=0.1s",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NVWATCH_LOG_FORMAT": "text"},
    )
    agent = Agent(port, process)
    try:
        _wait_serving(agent)
        yield agent
    finally:
        stop(process, 10)


def _wait_serving(agent: Agent) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert agent.process.poll() is None, agent.process.stderr.read()  # type: ignore[union-attr]
        with contextlib.suppress(OSError):
            if agent.get("/healthz")[0] == 200:
                return
        time.sleep(0.1)
    raise TimeoutError("nvwatch serve did not come up")


@pytest.fixture
def silent_bmc() -> Iterator[str]:
    """A UDP port that takes every packet and answers none: a BMC that hangs."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((LOOPBACK, 0))
        yield f"{LOOPBACK}:{sock.getsockname()[1]}"


def test_a_probe_reads_what_the_bmc_was_set_to(agent: Agent, bmc: IpmiSim) -> None:
    read = agent.probe(bmc.address)
    assert read[("nvwatch_bmc_up", "")] == 1
    assert read[("nvwatch_bmc_temperature_celsius", "Inlet Temp")] == initial_raw(INLET)
    assert read[("nvwatch_bmc_fan_speed_rpm", "Fan2")] == initial_raw(FAN2) * 100
    assert read[("nvwatch_bmc_power_supply_failed", "PSU1 Status")] == 0
    bmc.set_raw(INLET, 42)
    bmc.set_raw(FAN2, 0)
    bmc.set_bit(PSU1, PSU_FAILURE, True)
    time.sleep(0.2)  # past --bmc-cache
    read = agent.probe(bmc.address, "from_file")  # the password from password_file
    assert read[("nvwatch_bmc_temperature_celsius", "Inlet Temp")] == 42
    assert read[("nvwatch_bmc_fan_speed_rpm", "Fan2")] == 0
    assert read[("nvwatch_bmc_power_supply_failed", "PSU1 Status")] == 1


def test_a_silent_bmc_is_down_at_its_timeout_and_delays_no_other(
    agent: Agent, bmc: IpmiSim, silent_bmc: str
) -> None:
    with ThreadPoolExecutor(2) as pool:
        silent = pool.submit(agent.get, f"/probe?target={silent_bmc}")
        time.sleep(0.1)
        answering = agent.get(f"/probe?target={bmc.address}")
        metrics = agent.get("/metrics")
        status, body, took = silent.result()
    assert samples(answering[1])[("nvwatch_bmc_up", "")] == 1 and answering[2] < 1.0
    assert metrics[0] == 200 and metrics[2] < 1.0
    assert status == 200 and samples(body)[("nvwatch_bmc_up", "")] == 0
    assert body.startswith("# nvwatch_bmc_up 0: ")
    assert TIMEOUT_MS / 1000 <= took < TIMEOUT_MS / 1000 + 1.0


def test_a_wrong_password_is_the_target_down_with_the_reason(agent: Agent, bmc: IpmiSim) -> None:
    status, body, _ = agent.get(f"/probe?target={bmc.address}&module=wrong")
    assert status == 200
    assert samples(body)[("nvwatch_bmc_up", "")] == 0
    assert "authentication failed" in body.splitlines()[0]


def test_a_module_missing_from_the_config_is_one_line(agent: Agent, bmc: IpmiSim) -> None:
    status, body, _ = agent.get(f"/probe?target={bmc.address}&module=dell")
    assert status == 400
    assert body == "unknown module 'dell' (the BMC config has: default, from_file, wrong)\n"


def test_keys_nvwatch_does_not_use_are_listed_once_at_start(agent: Agent) -> None:
    agent.process.send_signal(signal.SIGTERM)
    _, err = agent.process.communicate(timeout=10)
    assert agent.process.returncode == 0
    listed = [line for line in err.splitlines() if "accepted but not used" in line]
    assert len(listed) == 1
    assert "modules.default.workaround_flags" in listed[0]
    assert "Traceback" not in err
