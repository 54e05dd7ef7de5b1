"""A simulated fleet's BMCs: one loopback address per node, the `nvwatch-bmc` job's
targets carrying the node's labels, and each BMC reading its own node, faults included."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from nvwatch.agent.inventory_bmc import probe_job
from nvwatch.agent.sources.bmc.reading import BmcError, SensorReading, Target
from nvwatch.sim.bmc.reader import SIMULATED_MODULE
from nvwatch.sim.fleet.fleet import Fleet
from nvwatch.sim.fleet.plan import (
    bmc_file_sd_groups,
    file_sd_groups,
    parse_node_scenario,
    plan_fleet,
)
from tests.conftest import require_tool
from tests.e2e.loopback import Endpoint, instant_query, spawn_logged, wait_for
from tests.e2e.service_commands import prometheus_argv
from tests.processes import stop

TIME_SCALE = 20.0  # the 30 s onset comes 1.5 s into the run
INTERVAL = 0.5
SHARE_WINDOW, SHARE_SAMPLES = "10s", 6


def test_every_node_has_its_own_bmc_on_loopback() -> None:
    specs = plan_fleet(["dgx1-v100"] * 300, base_port=0)
    addresses = [spec.bmc for spec in specs]
    assert len(set(addresses)) == 300
    assert all(ipaddress.ip_address(a).is_loopback for a in addresses)
    assert addresses[0] == "127.1.0.1"  # where `serve --simulate` puts its node's BMC


def test_bmc_targets_carry_the_labels_of_their_node() -> None:
    specs = plan_fleet(["dgx1-v100", "dgx-a100", "dgx-h100"], base_port=9500, cluster="c1")
    agents = file_sd_groups([(s, f"127.0.0.1:{s.port}") for s in specs])
    bmcs = bmc_file_sd_groups(specs)
    assert len(bmcs) == len(agents)
    for spec, agent, bmc in zip(specs, agents, bmcs, strict=True):
        assert bmc["targets"] == [spec.bmc]
        assert bmc["labels"] == {**agent["labels"], "bmc": spec.bmc}


def test_the_bmc_job_is_a_configuration_prometheus_accepts(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    specs = plan_fleet(["dgx-a100"] * 2, base_port=9500)
    targets = tmp_path / "bmc.json"
    targets.write_text(json.dumps(bmc_file_sd_groups(specs)))
    job = probe_job([str(targets)], "127.0.0.1:9499", interval="30s")
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    checked = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert job["job_name"] == "nvwatch-bmc"


def _fans(fleet: Fleet, node: int) -> dict[str, SensorReading]:
    reading = fleet.bmc_reader.read(Target(fleet.specs[node].bmc), SIMULATED_MODULE)
    return {s.name: s for s in reading.sensors if s.name.startswith("FAN")}


def _wait(what: str, condition: Callable[[], bool], timeout: float = 20.0) -> None:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_each_bmc_reads_its_own_node_and_repairs_reach_it() -> None:
    spec = parse_node_scenario("1:fan-failure@1")
    with Fleet(
        ["dgx1-v100", "dgx-a100"],
        base_port=0,
        interval=INTERVAL,
        scenarios=[spec],
        time_scale=TIME_SCALE,
    ) as fleet:
        assert sorted(fleet.bmc_reader.addresses) == sorted(s.bmc for s in fleet.specs)
        # each BMC reads its own node: the DGX A100 draws more than a DGX-1 can
        watts = [
            fleet.bmc_reader.read(Target(spec.bmc), SIMULATED_MODULE).dcmi_watts
            for spec in fleet.specs
        ]
        dgx1_max = fleet.nodes[0].sim.profile.system_power_watts
        assert watts[0] is not None and watts[1] is not None
        assert watts[0] <= dgx1_max < watts[1]
        _wait("the stopped fan", lambda: _fans(fleet, 1)["FAN1"].value == 0)
        assert all(fan.value for fan in _fans(fleet, 0).values())  # node 0 is fine
        assert fleet.repair(1, "fan-failure@1") == ["fan-failure@1"]
        _wait("the new fan", lambda: bool(_fans(fleet, 1)["FAN1"].value))
        with pytest.raises(BmcError, match="no answer"):
            fleet.bmc_reader.read(Target("127.1.9.9"), SIMULATED_MODULE)


def test_simulate_fleet_writes_the_bmc_targets(tmp_path: Path) -> None:
    out, bmc = tmp_path / "fleet.json", tmp_path / "bmc" / "fleet.json"
    bmc.parent.mkdir()
    args = ["simulate", "fleet", "--profile", "dgx-a100", "--nodes", "2", "--base-port", "0",
            "--duration", "1s", "--interval", "1s", "--file-sd", str(out),
            "--bmc-file-sd", str(bmc)]  # fmt: skip
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "management host: http://127.0.0.1:" in result.output
    agents = json.loads(out.read_text())
    bmcs = json.loads(bmc.read_text())
    assert [g["labels"]["instance"] for g in bmcs] == [g["labels"]["instance"] for g in agents]
    assert [g["targets"] for g in bmcs] == [["127.1.0.1"], ["127.1.0.2"]]


def test_prometheus_probes_each_bmc_and_joins_it_with_its_node(tmp_path: Path) -> None:
    """A real Prometheus: the agents' job and the `nvwatch-bmc` job through the fleet's
    management host; one target no BMC answers for is down alone."""
    prometheus = require_tool("prometheus")
    spec = parse_node_scenario("1:psu-failure@2,from=0")
    with Fleet(["dgx1-v100", "dgx-a100"], base_port=0, interval=1.0, scenarios=[spec]) as fleet:
        agents, bmcs = tmp_path / "agents.json", tmp_path / "bmcs.json"
        fleet.write_file_sd(agents)
        lost = {"targets": ["127.1.9.9"], "labels": {"instance": "dgx-lost", "bmc": "127.1.9.9"}}
        bmcs.write_text(json.dumps([*fleet.bmc_file_sd(), lost]))
        jobs = [
            {"job_name": "nvwatch", "file_sd_configs": [{"files": [str(agents)]}]},
            fleet.bmc_scrape_config(bmcs, interval="1s"),
        ]
        config = tmp_path / "prometheus.yml"
        config.write_text(
            yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs})
        )
        endpoint = Endpoint.free()
        argv = prometheus_argv(prometheus, config, tmp_path / "data", endpoint)
        process = spawn_logged(argv, tmp_path / "prometheus.log")
        try:

            def bmc_up() -> dict[str, float] | None:
                found = instant_query(endpoint.url, "nvwatch_bmc_up")
                up = {r["metric"]["instance"]: float(r["value"][1]) for r in found}
                return up if len(up) == 3 else None

            assert wait_for("every BMC probed", bmc_up, 60) == {
                "dgx-000": 1.0, "dgx-001": 1.0, "dgx-lost": 0.0
            }  # fmt: skip
            # both sides averaged over the same window: a GPU reading and a BMC reading
            # scraped a second or two apart differ by what the GPUs did in between
            node_power = "nvwatch_bmc_power_watts{method='dcmi'}"
            sampled = f"count_over_time({node_power}[{SHARE_WINDOW}]) >= {SHARE_SAMPLES}"
            wait_for(
                "a window of BMC samples",
                lambda: len(instant_query(endpoint.url, sampled)) == 2,
                60,
            )
            gpus = f"avg_over_time(nvwatch_gpu_power_watts[{SHARE_WINDOW}])"
            share = f"sum by (cluster, instance) ({gpus}) / on (cluster, instance) "
            share += f"avg_over_time({node_power}[{SHARE_WINDOW}])"
            joined = instant_query(endpoint.url, share)
            shares = {r["metric"]["instance"]: float(r["value"][1]) for r in joined}
            assert shares.keys() == {"dgx-000", "dgx-001"}
            assert all(0.1 < value < 0.9 for value in shares.values()), shares
            failed = instant_query(endpoint.url, "nvwatch_bmc_power_supply_failed == 1")
            assert [(r["metric"]["instance"], r["metric"]["sensor"]) for r in failed] == [
                ("dgx-001", "PSU2 Status")
            ]
            node = instant_query(endpoint.url, "nvwatch_bmc_up{instance='dgx-001'}")[0]["metric"]
            assert (node["job"], node["bmc"], node["rack"], node["node_class"]) == (
                "nvwatch-bmc", fleet.specs[1].bmc, fleet.specs[1].rack, "dgx-a100"
            )  # fmt: skip
        finally:
            stop(process, 15)
