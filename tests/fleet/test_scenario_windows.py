"""Scenarios that end: the `from=`/`until=` syntax on every command line, and a running
fleet whose faults show during their window and are gone after it, or after a repair
request written to its repair file."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from nvwatch.agent.cli import main
from nvwatch.agent.cli.options import build_config
from nvwatch.agent.config import ConfigError, ScenarioSpec, parse_scenario, split_scenarios
from nvwatch.sim.fleet.fleet import Fleet
from nvwatch.sim.fleet.plan import FleetError, parse_node_scenario, parse_repair_request

# --- the syntax ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ecc-dbe@2,from=30s,until=5m", ScenarioSpec("ecc-dbe", "2", 30.0, 300.0)),
        ("gpu-lost,until=1h30m", ScenarioSpec("gpu-lost", None, None, 5400.0)),
        ("nvml-driver-broken,from=0", ScenarioSpec("nvml-driver-broken", None, 0.0, None)),
        (" ib-degraded@mlx5_1, from=2.5s ", ScenarioSpec("ib-degraded", "mlx5_1", 2.5, None)),
        ("thermal-runaway@3", ScenarioSpec("thermal-runaway", "3")),
    ],
)
def test_scenario_windows_parse(text: str, expected: ScenarioSpec) -> None:
    spec = parse_scenario(text)
    assert spec == expected
    assert parse_scenario(str(spec)) == spec  # what the fleet prints reads back


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ecc-dbe,until=5x", "invalid until= '5x'"),
        ("ecc-dbe,until=0", "must be greater than zero"),
        ("ecc-dbe,when=5m", "unknown option 'when=5m'"),
        ("ecc-dbe,until", "unknown option 'until'"),
        ("ecc-dbe,until=5m,until=6m", "until= given twice"),
        ("ecc-dbe,from=5m,until=1m", "until= must come after from="),
        ("until=5m", "use NAME[@TARGET][,from=DURATION][,until=DURATION]"),
        (",until=5m", "use NAME[@TARGET]"),
    ],
)
def test_bad_scenario_windows_are_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(text)
    assert message in str(info.value) and repr(text) in str(info.value)
    assert "\n" not in str(info.value)


def test_fleet_scenarios_take_the_same_suffix() -> None:
    assert parse_node_scenario("3:ecc-dbe@2,from=1m,until=5m") == (
        3,
        ScenarioSpec("ecc-dbe", "2", 60.0, 300.0),
    )
    for text, message in [
        ("3:idle,until=5m", "idle sets the workload"),
        ("3:ecc-dbe,until=10s", "until= must come after the fault begins at 30s"),
        ("3:ecc-dbe,until=5x", "invalid until= '5x'"),
        ("3:meltdown,until=5m", "unknown scenario 'meltdown'"),
    ]:
        with pytest.raises(FleetError, match=message) as info:
            parse_node_scenario(text)
        assert "\n" not in str(info.value)


def test_lists_of_scenarios_keep_each_window_with_its_scenario() -> None:
    assert split_scenarios(("3:ecc-dbe@2,until=5m", "4:gpu-lost,5:idle")) == [
        "3:ecc-dbe@2,until=5m",
        "4:gpu-lost",
        "5:idle",
    ]
    assert split_scenarios("gpu-lost@1,from=1m, until=5m idle") == [
        "gpu-lost@1,from=1m,until=5m",
        "idle",
    ]


def test_repair_requests_parse() -> None:
    assert parse_repair_request("3") == (3, None)
    assert parse_repair_request(" 3:ecc-dbe@2 ") == (3, "ecc-dbe@2")
    assert parse_repair_request("0:mlx5_1") == (0, "mlx5_1")
    with pytest.raises(FleetError, match="invalid repair request 'x:gpu-lost'"):
        parse_repair_request("x:gpu-lost")


def test_agent_commands_take_the_window(capsys: pytest.CaptureFixture[str]) -> None:
    params = {"interval": "5s", "sources": "nvml", "sysfs_root": "/sys"}
    config = build_config({**params, "scenario": ("ecc-dbe@2,until=5m",)})
    assert config.scenarios == (ScenarioSpec("ecc-dbe", "2", None, 300.0),)
    argv = ["dump", "--simulate", "dgx1-v100", "--sources", "nvml", "--settle", "0"]
    main([*argv, "--scenario", "ecc-dbe@1,from=0,until=5m"])
    series = 'nvwatch_gpu_ecc_errors_total{gpu="1",scope="volatile",type="uncorrected"'
    assert f"{series}" in capsys.readouterr().out
    for bad in ("ecc-dbe@1,until=5x", "ecc-dbe@1,until=10s"):
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--scenario", bad])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "until=" in err


def test_simulate_fleet_refuses_bad_windows_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "fleet", "--profile", "dgx1-v100:2", "--duration", "1s"]
    for bad in ("0:ecc-dbe,until=5x", "1:gpu-lost,from=2m,until=1m", "0:idle,until=1m"):
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--scenario", bad])
        assert exit_info.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


# --- a running fleet ----------------------------------------------------------------------------

TIME_SCALE = 20.0  # the 30 s onset comes 1.5 s into the run
INTERVAL = 0.5


def _value(fleet: Fleet, pattern: str) -> float | None:
    """The value of the first series of node 0 matching `pattern` (a regex), or None."""
    body = urllib.request.urlopen(fleet.nodes[0].url, timeout=10).read().decode()
    match = re.search(pattern + r"[^\n]* ([0-9.e+-]+)\n", body)
    return float(match.group(1)) if match else None


def _wait(what: str, condition: Callable[[], bool], timeout: float = 20.0) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - started


UNCORRECTED_1 = r'nvwatch_gpu_ecc_errors_total\{gpu="1",scope="volatile",type="uncorrected"'
GPU_2_UP = r'nvwatch_gpu_up\{gpu="2"'


def test_a_fault_shows_in_its_window_and_is_gone_after() -> None:
    spec = parse_node_scenario("0:ecc-dbe@1,until=90s")  # 30..90 s: 1.5..4.5 s real
    with Fleet(
        ["dgx1-v100"], base_port=0, interval=INTERVAL, scenarios=[spec], time_scale=TIME_SCALE
    ) as fleet:
        assert _value(fleet, UNCORRECTED_1) == 0.0  # healthy baseline
        _wait("the ECC error", lambda: _value(fleet, UNCORRECTED_1) == 1.0)
        _wait("the GPU reset", lambda: _value(fleet, UNCORRECTED_1) == 0.0)
        assert fleet.repair(0) == []  # nothing left to repair


def test_a_repair_file_repairs_a_running_fleet(tmp_path: Path) -> None:
    requests = tmp_path / "repairs"
    spec = parse_node_scenario("0:gpu-lost@2")
    with Fleet(
        ["dgx1-v100"],
        base_port=0,
        interval=INTERVAL,
        scenarios=[spec],
        time_scale=TIME_SCALE,
        repair_file=requests,
    ) as fleet:
        _wait("the lost GPU", lambda: _value(fleet, GPU_2_UP) == 0.0)
        # a bad line is logged and skipped; the good one still applies
        requests.write_text("# drained, reset\nnot a request\n0:gpu-lost@2\n")
        _wait("the reset GPU", lambda: _value(fleet, GPU_2_UP) == 1.0)
        assert not requests.exists()  # taken
        with pytest.raises(FleetError, match="no node 3"):
            fleet.repair(3)


def test_the_nvml_source_runs_on_the_fleets_clock() -> None:
    # Its retry back-off (doubling to 300 s) decides when a repaired driver is seen: on the
    # real clock a fleet at 10x would take ten times longer than the scenario says.
    with Fleet(["dgx-station"], base_port=0, interval=INTERVAL, time_scale=TIME_SCALE) as fleet:
        (nvml,) = [s for s in fleet.nodes[0].agent.sources if s.name == "nvml"]
        assert nvml._clock is fleet.clock  # type: ignore[attr-defined]
