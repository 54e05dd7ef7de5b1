"""The first minutes with the command line: bare groups print help, a missing driver is
explained, each command's --help lists what acts there, IPv6 listen addresses work."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from nvwatch.sim.ports import free_port
from nvwatch.sim.scenario_names import known_scenarios

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
# the machine's real state: no NVWATCH_* left over from a shell that simulates
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("NVWATCH_")}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NVWATCH, *args], capture_output=True, text=True, timeout=60, env=CLEAN_ENV
    )


@pytest.mark.parametrize("group", [[], ["simulate"], ["dashboards"], ["alerts"]])
def test_a_bare_group_prints_its_help_and_exits_0(group: list[str]) -> None:
    completed = _run(*group)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    name = " ".join(["nvwatch", *group])
    assert completed.stdout.startswith(f"Usage: {name} [OPTIONS] COMMAND [ARGS]...")
    # the help, as --help prints it: several lines, with its commands
    assert completed.stdout == _run(*group, "--help").stdout
    assert "Commands:" in completed.stdout


def test_an_unknown_command_is_still_an_error() -> None:
    completed = _run("bogus")
    assert completed.returncode == 2
    assert completed.stderr.strip() == "nvwatch: error: No such command 'bogus'."


def test_topology_without_a_driver_says_what_is_missing_and_how_to_simulate() -> None:
    """This machine has no libnvidia-ml and no NVIDIA PCI function (as doctor says)."""
    completed = _run("topology")
    assert completed.returncode == 2
    (line,) = completed.stderr.splitlines()
    assert line.startswith("nvwatch: error: no GPU topology to show: ")
    assert "no NVIDIA GPU on this node" in line
    assert "libnvidia-ml.so.1 could not be loaded" in line
    suggested = re.search(r"nvwatch (topology --simulate \S+)", line)
    assert suggested, line
    # the command it suggests works
    tried = _run(*suggested.group(1).split())
    assert tried.returncode == 0, tried.stderr
    assert tried.stdout.startswith(" " * 8 + "GPU0")


def _option_names(command: list[str]) -> set[str]:
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return set(re.findall(r"^\s+(--[a-z-]+)", result.output, re.MULTILINE))


@pytest.mark.parametrize(
    ("command", "absent"),
    [
        # topology polls nothing and renders no exposition
        (["topology"], {"--interval", "--sources", "--nvlink-detail", "--ib-hw-counters",
                        "--kmsg-path", "--listen", "--web-config", "--seed"}),
        # doctor reports sources, it renders no series to choose between and shows no
        # simulated value a seed would change
        (["doctor"], {"--interval", "--nvlink-detail", "--ib-hw-counters", "--listen",
                      "--web-config", "--seed"}),
        # dump polls --settle apart, not on an interval
        (["dump"], {"--interval", "--listen", "--web-config"}),
    ],
)  # fmt: skip
def test_commands_list_only_the_options_that_act_there(
    command: list[str], absent: set[str]
) -> None:
    names = _option_names(command)
    assert not names & absent, names & absent
    assert {"--simulate", "--scenario", "--config"} <= names


def test_serve_keeps_every_agent_option() -> None:
    names = _option_names(["serve"])
    assert {"--interval", "--sources", "--nvlink-detail", "--ib-hw-counters", "--kmsg-path",
            "--listen", "--web-config", "--onset", "--scenario"} <= names  # fmt: skip


def test_a_config_file_for_serve_also_serves_doctor(tmp_path: object) -> None:
    """One file for the node: keys another agent command takes are left alone, unknown
    keys are still refused."""
    from pathlib import Path

    path = Path(str(tmp_path)) / "nvwatch.yaml"
    path.write_text("interval: 10s\nlisten: 127.0.0.1:0\nsources: [host]\n")
    ok = CliRunner().invoke(cli, ["doctor", "--config", str(path)])
    assert ok.exit_code == 0, ok.output
    path.write_text("intervall: 10s\n")
    bad = CliRunner().invoke(cli, ["doctor", "--config", str(path)])
    assert bad.exit_code == 2
    assert "unknown key 'intervall'" in bad.output


def _help_text(command: list[str]) -> str:
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=1000)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_interval_help_shows_the_duration_format() -> None:
    text = _help_text(["serve"])
    assert "--interval DURATION" in text
    assert "e.g. 500ms, 5s, 1h30m, 2.5s" in text
    assert "--interval DURATION" in _help_text(["simulate", "fleet"])


@pytest.mark.parametrize(
    "command", [["serve"], ["dump"], ["doctor"], ["topology"], ["simulate", "exec"],
                ["simulate", "fleet"]],
)  # fmt: skip
def test_scenario_help_lists_every_registered_scenario(command: list[str]) -> None:
    text = _help_text(command)
    assert all(name in text for name in known_scenarios())
    assert "NAME[@TARGET][,from=DURATION][,until=DURATION]" in text


@pytest.fixture
def ipv6_loopback() -> Iterator[str]:
    """'::1' when this host can bind it (has_ipv6 and a real bind), else skip: whether it
    can depends on the host's network set-up, not on CI."""
    if not socket.has_ipv6:
        pytest.skip("Python built without IPv6")
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"this host has no IPv6 loopback: {exc}")
    yield "::1"


def test_serve_listens_on_an_ipv6_address(ipv6_loopback: str) -> None:
    port = free_port(ipv6_loopback)
    process = subprocess.Popen(
        [*NVWATCH, "serve", "--sources", "host", "--interval", "1s",
         "--listen", f"[{ipv6_loopback}]:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=CLEAN_ENV,
    )  # fmt: skip
    try:
        body = b""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not body:
            try:
                with urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=2) as r:
                    body = r.read()
            except OSError:
                assert process.poll() is None, process.communicate()[1]
                time.sleep(0.1)
        assert b'nvwatch_agent_source_up{source="host"} 1.0' in body
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    # the log names the address as the flag takes it back
    assert f"listening on [::1]:{port}" in stderr
