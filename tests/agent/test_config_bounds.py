"""Every duration flag has bounds, stated in --help; outside them: one line, exit 2.

`--interval 1ms` busy-looped a core and `--interval 99999999999h` killed the poll thread
with OverflowError while the process lived on behind a 503: both are refused at start.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from nvwatch.agent.cli.options import build_config
from nvwatch.common.durations import DurationBounds, DurationError, parse_duration

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
# host alone: a poll costs nothing and needs no hardware
HOST = ["--sources", "host"]
# a bad flag stops serve before it binds; loopback and any port should it not
SERVE = [*HOST, "--listen", "127.0.0.1:0"]


def _one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got: {output!r}"
    assert lines[0].startswith("nvwatch: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["serve", *SERVE, "--interval", "1ms"], "invalid interval '1ms': must be from 100ms"),
        (["serve", *SERVE, "--interval", "99ms"], "must be from 100ms to 1h"),
        (["serve", *SERVE, "--interval", "1h1ms"], "must be from 100ms to 1h"),
        (["serve", *SERVE, "--interval", "99999999999h"], "must be from 100ms to 1h"),
        (["serve", *SERVE, "--interval", "9" * 400], "must be a finite duration"),
        (["dump", *HOST, "--settle", "1ms"], "invalid settle '1ms': must be from 10ms to 10m"),
        (["dump", *HOST, "--settle", "11m"], "must be from 10ms to 10m"),
        (["dump", *HOST, "--scheduler-interval", "500ms"],
         "invalid scheduler interval '500ms': must be from 1s to 1h"),
        (["doctor", *HOST, "--scheduler-timeout", "6m"],
         "invalid scheduler timeout '6m': must be from 100ms to 5m"),
        (["simulate", "fleet", "--profile", "dgx-h100", "--nodes", "1", "--interval", "1ms"],
         "invalid interval '1ms': must be from 100ms to 1h"),
        (["simulate", "fleet", "--profile", "dgx-h100", "--nodes", "1", "--duration", "500ms"],
         "invalid duration '500ms': must be from 1s to 1y"),
        (["simulate", "fleet", "--profile", "dgx-h100", "--nodes", "1",
          "--duration", "99999999999h"], "must be from 1s to 1y"),
    ],
)  # fmt: skip
def test_a_duration_outside_its_bounds_exits_2_with_one_line(
    args: list[str], expected: str
) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert expected in _one_line_error(result.output)


@pytest.mark.parametrize("interval", ["100ms", "1h", "5s"])
def test_the_bounds_themselves_are_accepted(interval: str) -> None:
    # serve is the one agent command with --interval; its options become this config
    assert build_config({"interval": interval}).interval == parse_duration(interval)


def test_an_interval_out_of_bounds_in_a_config_file_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("interval: 1ms\n")
    result = CliRunner().invoke(cli, ["serve", *SERVE, "--config", str(config)])
    assert result.exit_code == 2, result.output
    assert "must be from 100ms to 1h" in _one_line_error(result.output)


@pytest.mark.parametrize(
    ("command", "flag", "bounds"),
    [
        (["serve"], "--interval", "100ms to 1h"),
        (["dump"], "--settle", "10ms to 10m"),
        (["serve"], "--scheduler-interval", "1s to 1h"),
        (["serve"], "--scheduler-timeout", "100ms to 5m"),
        (["simulate", "fleet"], "--interval", "100ms to 1h"),
        (["simulate", "fleet"], "--duration", "1s to 1y"),
    ],
)
def test_help_states_the_bounds(command: list[str], flag: str, bounds: str) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=1000)
    assert result.exit_code == 0
    # click wraps help text: compare with the whitespace folded
    (line,) = [" ".join(x.split()) for x in result.output.split("\n  -") if x.startswith(flag[1:])]
    assert bounds in line, line


@pytest.mark.parametrize("interval", ["1ms", "99999999999h"])
def test_serve_refuses_the_interval_at_start(interval: str) -> None:
    # a typo on each side, through a real process: nothing is served, exit 2, one line
    completed = subprocess.run(
        [*NVWATCH, "serve", *HOST, "--listen", "127.0.0.1:0", "--interval", interval],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert completed.returncode == 2, completed.stderr
    assert "must be from 100ms to 1h" in _one_line_error(completed.stderr)


def test_parse_duration_bounds_are_inclusive() -> None:
    bounds = DurationBounds(0.1, 3600.0)
    assert parse_duration("100ms", "interval", bounds) == 0.1
    assert parse_duration("1h", "interval", bounds) == 3600.0
    with pytest.raises(DurationError, match="must be from 100ms to 1h"):
        parse_duration("3600.001", "interval", bounds)
    assert str(bounds) == "100ms to 1h"


@pytest.mark.parametrize("value", [float("inf"), float("nan"), [1, 2], {"a": 1}, None, True])
def test_parse_duration_refuses_what_yaml_can_hand_it(value: object) -> None:
    with pytest.raises(DurationError):
        parse_duration(value)  # type: ignore[arg-type]
