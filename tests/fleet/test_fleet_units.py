"""Fleet planning (profiles, scenarios, ports, file_sd) and cluster inventories."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from nvwatch.agent.config import ConfigError, ScenarioSpec
from nvwatch.agent.inventory import load_inventory, write_file_sd
from nvwatch.sim.clock import SteppedClock
from nvwatch.sim.fleet.plan import (
    FleetError,
    assign_ports,
    expand_profiles,
    file_sd_groups,
    parse_node_scenario,
    plan_fleet,
)


def test_mixed_profiles_expand_in_order() -> None:
    names = expand_profiles("dgx1-v100:100,dgx-a100:24")
    assert len(names) == 124
    assert names[0] == names[99] == "dgx1-v100"
    assert names[100] == names[123] == "dgx-a100"
    assert expand_profiles("dgx-h100", nodes=3) == ["dgx-h100"] * 3
    assert expand_profiles("dgx1-v100:2,dgx-a100:1", nodes=3) == ["dgx1-v100"] * 2 + ["dgx-a100"]


@pytest.mark.parametrize(
    ("text", "nodes", "message"),
    [
        ("dgx-h100", None, "needs --nodes"),
        ("dgx-h100,dgx-a100:2", 3, "has no count"),
        ("dgx-h100:0", None, "whole number"),
        ("dgx-h100:x", None, "whole number"),
        ("dgx1-v100:2", 3, "does not match"),
        ("no-such-box:2", None, "no-such-box"),
        ("", None, "no profile"),
    ],
)
def test_bad_profile_specs(text: str, nodes: int | None, message: str) -> None:
    with pytest.raises(FleetError, match=message):
        expand_profiles(text, nodes)


def test_node_scenarios_parse_with_targets() -> None:
    assert parse_node_scenario("3:thermal-runaway@2") == (3, ScenarioSpec("thermal-runaway", "2"))
    assert parse_node_scenario("5:ib-congestion@mlx5_1") == (
        5,
        ScenarioSpec("ib-congestion", "mlx5_1"),
    )
    assert parse_node_scenario("0:gpu-lost") == (0, ScenarioSpec("gpu-lost", None))
    # without NODE: every node's, as NVWATCH_SCENARIO means to serve --simulate
    assert parse_node_scenario("gpu-lost@3") == (None, ScenarioSpec("gpu-lost", "3"))
    for bad in ("x:gpu-lost", "3:", "3:no-such-fault", "no-such-fault"):
        with pytest.raises(FleetError):
            parse_node_scenario(bad)


def test_scenario_targets_are_checked_against_the_node() -> None:
    profiles = ["dgx1-v100", "geforce-workstation"]
    with pytest.raises(FleetError, match=r"GPU index 0\.\.7"):
        plan_fleet(profiles, base_port=9500, scenarios=[(0, ScenarioSpec("gpu-lost", "8"))])
    with pytest.raises(FleetError, match="no device 'mlx5_7'"):
        plan_fleet(profiles, base_port=9500, scenarios=[(0, ScenarioSpec("ib-degraded", "mlx5_7"))])
    with pytest.raises(FleetError, match="no InfiniBand"):
        plan_fleet(profiles, base_port=9500, scenarios=[(1, ScenarioSpec("ib-congestion"))])
    with pytest.raises(FleetError, match=r"nodes 0\.\.1"):
        plan_fleet(profiles, base_port=9500, scenarios=[(2, ScenarioSpec("gpu-lost"))])


def test_ports_names_racks_and_seeds() -> None:
    specs = plan_fleet(["dgx-a100"] * 6, base_port=9600, seed=10, nodes_per_rack=4)
    assert [s.port for s in specs] == list(range(9600, 9606))
    assert [s.name for s in specs][:2] == ["dgx-000", "dgx-001"]
    assert [s.rack for s in specs] == ["rack-00"] * 4 + ["rack-01"] * 2
    assert [s.seed for s in specs] == list(range(10, 16))
    assert assign_ports(3, 0) == [0, 0, 0]
    with pytest.raises(FleetError, match="65536"):
        assign_ports(2, 65535)


def test_file_sd_has_one_group_per_node_with_labels() -> None:
    specs = plan_fleet(["dgx1-v100", "dgx-a100"], base_port=9500, cluster="c1")
    groups = file_sd_groups([(s, f"127.0.0.1:{s.port}") for s in specs])
    assert groups[1] == {
        "targets": ["127.0.0.1:9501"],
        "labels": {
            "cluster": "c1",
            "rack": "rack-00",
            "node_class": "dgx-a100",
            "instance": "dgx-001",
        },
    }


def test_stepped_clock_holds_then_runs_scaled() -> None:
    clock = SteppedClock(10.0, running=False)
    held = clock()
    assert clock.step() == held
    clock.run()
    time.sleep(0.02)
    stepped = clock.step()
    assert stepped >= held + 0.1  # 20 ms of real time is 200 ms of simulated time
    assert clock() == stepped  # reads do not move it


def test_stepped_clock_keeps_its_time_when_its_scale_changes() -> None:
    clock = SteppedClock(100.0)
    time.sleep(0.01)
    before = time.monotonic()
    fast = clock.step()
    clock.set_scale(1.0)
    changed = time.monotonic()
    time.sleep(0.2)
    slow = clock.step()
    real = time.monotonic() - changed
    # the 100x seconds already run stay (no jump back), and from the change on one
    # simulated second passes per real one: 100x would have added 20 s
    assert fast <= slow <= fast + (changed - before) * 100 + real
    assert slow - fast >= 0.2
    with pytest.raises(ValueError):
        clock.set_scale(0)


INVENTORY = """\
# node/IB/IPMI plan: in-band management addresses are scraped
hostname,address,node_class,rack,cluster
node01,10.10.10.101,dgx1-v100,r01,gpu
node02,10.10.10.102,dgx1-v100,r01,gpu
node03,10.10.10.103,dgx-a100,r02,gpu
"""


def test_inventory_csv_to_file_sd_per_class(tmp_path: Path) -> None:
    path = tmp_path / "cluster.csv"
    path.write_text(INVENTORY)
    out = tmp_path / "targets"
    out.mkdir()
    (out / "nvwatch-retired-class.json").write_text("[]")
    written = write_file_sd(load_inventory(path), out, 9477)
    assert sorted(p.name for p in written) == ["nvwatch-dgx-a100.json", "nvwatch-dgx1-v100.json"]
    assert not (out / "nvwatch-retired-class.json").exists()
    groups = json.loads((out / "nvwatch-dgx1-v100.json").read_text())
    assert groups[0] == {
        "targets": ["10.10.10.101:9477"],
        "labels": {
            "cluster": "gpu",
            "rack": "r01",
            "node_class": "dgx1-v100",
            "instance": "node01",
        },
    }


def test_inventory_yaml_with_cluster_default_and_ipv6(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "cluster: lab\nnodes:\n"
        "  - {hostname: a1, address: 'fd00::1', node_class: dgx-h100, rack: r1}\n"
    )
    nodes = load_inventory(path)
    assert nodes[0].cluster == "lab"
    groups = json.loads(write_file_sd(nodes, tmp_path / "o", 9477)[0].read_text())
    assert groups[0]["targets"] == ["[fd00::1]:9477"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("hostname,address,rack\nn1,10.0.0.1,r1\n", "missing column(s) node_class"),
        (INVENTORY + "node01,10.10.10.150,dgx1-v100,r01,gpu\n", "duplicate hostname node01"),
        (INVENTORY + "node09,10.10.10.101,dgx1-v100,r01,gpu\n", "duplicate address 10.10.10.101"),
        (INVENTORY + "node09,10.10.10.300,dgx1-v100,r01,gpu\n", "invalid address '10.10.10.300'"),
        (INVENTORY + "node_9,10.10.10.109,dgx1-v100,r01,gpu\n", "invalid hostname"),
        (INVENTORY + "node09,10.10.10.109,,r01,gpu\n", "empty node_class"),
        ("hostname,address,node_class,rack,colour\n", "unknown column(s) colour"),
    ],
)
def test_inventory_errors_are_one_clear_line(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "cluster.csv"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_inventory(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_inventory_command_exit_codes(tmp_path: Path) -> None:
    good = tmp_path / "cluster.csv"
    good.write_text(INVENTORY)
    runner = CliRunner()
    result = runner.invoke(cli, ["inventory", "--in", str(good), "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    assert "nvwatch-dgx-a100.json" in result.output
    bad = tmp_path / "bad.csv"
    bad.write_text("hostname,address\n")
    from nvwatch.agent.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["inventory", "--in", str(bad), "--out", str(tmp_path / "t")])
    assert exit_info.value.code == 2


def test_simulate_fleet_bad_input_exits_2() -> None:
    from nvwatch.agent.cli import main

    for argv in (
        ["simulate", "fleet", "--profile", "dgx1-v100"],
        ["simulate", "fleet", "--profile", "dgx1-v100:2", "--scenario", "7:gpu-lost"],
        ["simulate", "fleet", "--profile", "dgx1-v100:2", "--time-scale", "0"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
