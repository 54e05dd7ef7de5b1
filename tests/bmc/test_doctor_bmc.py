"""`nvwatch doctor --bmc-config FILE --bmc-target HOST:PORT` against a real BMC (ipmi_sim):
the module file checked as `serve` loads it, each target read once as /probe reads it,
a BMC that cannot be read is `down` with the probe's reason and exit 1, bad input exit 2.

The sensor count and the DCMI power are the BMC's (tests/bmc/sim_sensors.py defines the
simulated BMC; the power is set through its console here), not nvwatch's own reading.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvwatch.sim.ports import LOOPBACK
from tests.bmc.ipmi_sim import IpmiSim
from tests.bmc.sim_sensors import NAMES, PASSWORD, USER

TIMEOUT_MS = 1500
CONFIG = f"""\
modules:
  default:
    user: {USER}
    pass: {PASSWORD}
    privilege: admin
    timeout: {TIMEOUT_MS}
    collectors: [ipmi, dcmi]
  wrong:
    user: {USER}
    pass: not-the-password
    privilege: admin
    timeout: {TIMEOUT_MS}
    collectors: [ipmi]
"""


@pytest.fixture
def bmc_config(tmp_path: Path) -> Path:
    path = tmp_path / "ipmi.yml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


@pytest.fixture
def silent_bmc() -> Iterator[str]:
    """A loopback UDP port that takes every packet and answers none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((LOOPBACK, 0))
        yield f"{LOOPBACK}:{sock.getsockname()[1]}"


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    # the host source reads this machine's /proc: up, so only the BMC can make it fail
    argv = [sys.executable, "-m", "nvwatch.agent.cli", "doctor", "--sources=host", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _bmc_json(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    findings: list[dict[str, object]] = json.loads(result.stdout)["bmc"]
    return findings


def test_a_bmc_that_answers_is_up_with_its_sensors(bmc: IpmiSim, bmc_config: Path) -> None:
    bmc.set_dcmi_watts(1236)
    target = f"{bmc.host}:{bmc.port}"
    result = doctor("--bmc-config", str(bmc_config), "--bmc-target", target)
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith(f"bmc {target}")]
    assert f"up       module default: {len(NAMES)} sensors, DCMI power 1236 W in " in line
    loaded = [x for x in result.stdout.splitlines() if x.startswith("bmc-config")]
    assert loaded and "default (1.5 s, dcmi+ipmi)" in loaded[0], result.stdout


def test_a_refused_login_and_a_silent_bmc_are_down(
    bmc: IpmiSim, bmc_config: Path, silent_bmc: str
) -> None:
    wrong = doctor(
        "--format=json", "--bmc-config", str(bmc_config), "--bmc-module", "wrong",
        "--bmc-target", f"{bmc.host}:{bmc.port}", "--bmc-target", silent_bmc,
    )  # fmt: skip
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    config, refused, silent = _bmc_json(wrong)
    assert config["state"] == "loaded"
    assert refused["state"] == "down" and "password" in str(refused["detail"]), refused
    assert silent["state"] == "down", silent
    assert f"within {TIMEOUT_MS / 1000:g}" in str(silent["detail"]), silent


def test_without_a_target_doctor_sends_nothing_and_says_how(bmc_config: Path) -> None:
    result = doctor("--bmc-config", str(bmc_config))
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("bmc")]
    assert line.split()[:2] == ["bmc-config", "loaded"]
    assert "give --bmc-target HOST[:PORT]" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--bmc-target", "127.0.0.1:9"), "give it"),
        (("--bmc-config", "{config}", "--bmc-module", "nope", "--bmc-target", "127.0.0.1:9"),
         "no such module (default, wrong)"),
        (("--bmc-config", "{config}", "--bmc-target", "127.0.0.1:notaport"), "--bmc-target"),
        (("--bmc-config", "{missing}"), "missing.yml"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    bmc_config: Path, tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    filled = [a.format(config=bmc_config, missing=tmp_path / "missing.yml") for a in args]
    result = doctor(*filled)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("nvwatch: error: ") and says in line, line
