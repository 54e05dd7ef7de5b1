"""The scrape config `nvwatch inventory` writes, run by a real Prometheus: a node's BMC
series join its GPU series on the node labels.

Everything is real and on loopback: a simulated GPU node (`serve --simulate`), a
management host's nvwatch reading a real BMC (`serve --bmc-config`, ipmi_sim), and
Prometheus with the two jobs of the inventory's output (the agents' job as
deploy/prometheus has it, the `nvwatch-bmc` job as the command wrote it) and the mixin's
rules. The BMC's inlet is then raised through its console: the node's heat source
becomes the room and its inlet alert goes pending, through the `node_class` the
inventory gave the BMC target.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvwatch.agent.cli import main
from nvwatch.agent.inventory_bmc import SCRAPE_FILE
from nvwatch.alerts import build as alerts_build
from nvwatch.alerts.recording_bmc import HEAT_GPU, HEAT_ROOM, HEAT_SOURCE
from nvwatch.mixin.config import MixinConfig
from tests.bmc.ipmi_sim import IpmiSim
from tests.bmc.sim_sensors import INLET, PASSWORD, USER, initial_raw
from tests.conftest import require_tool
from tests.e2e.loopback import (
    Endpoint,
    answers_ok,
    instant_query,
    log_tail,
    spawn_logged,
    wait_for,
)
from tests.e2e.service_commands import prometheus_argv, write_yaml
from tests.processes import stop_all

REPO = Path(__file__).resolve().parents[2]
NODE = {"cluster": "lab", "instance": "gpu-node01", "rack": "r01", "node_class": "dgx-a100"}
BMC_CONFIG = f"""\
modules:
  default:
    user: {USER}
    pass: {PASSWORD}
    driver: LAN_2_0
    privilege: admin
    timeout: 1500
    collectors: [ipmi, dcmi]
"""


@dataclass
class Stack:
    prometheus: str
    bmc: str  # the BMC's address, as the inventory names it

    def query(self, expr: str) -> list[dict[str, Any]]:
        return instant_query(self.prometheus, expr)


def _nvwatch(*args: str) -> list[str]:
    return [sys.executable, "-m", "nvwatch.agent.cli", "serve", *args]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, shared_sim: IpmiSim) -> Iterator[Stack]:
    prometheus = require_tool("prometheus")
    work = tmp_path_factory.mktemp("inventory-join")
    agent, prober, server = Endpoint.free(), Endpoint.free(), Endpoint.free()
    (work / "ipmi.yml").write_text(BMC_CONFIG)
    inventory = work / "cluster.csv"
    inventory.write_text(
        "hostname,address,node_class,rack,cluster,bmc\n"
        f"{NODE['instance']},127.0.0.1,{NODE['node_class']},{NODE['rack']},{NODE['cluster']},"
        f"{shared_sim.address}\n"
    )
    targets = work / "targets"
    main(["inventory", "--in", str(inventory), "--out", str(targets),
          "--port", str(agent.port), "--bmc-probe", prober.address])  # fmt: skip
    rules = work / "rules"
    alerts_build.write(rules, MixinConfig().with_overrides(evaluation_interval="1s"))
    config = _prometheus_config(targets, rules)
    commands = {
        "agent": _nvwatch("--simulate", NODE["node_class"], "--sources=nvml", "--interval=1s",
                          f"--listen={agent.address}"),
        "prober": _nvwatch("--sources=host", f"--listen={prober.address}",
                           f"--bmc-config={work / 'ipmi.yml'}", "--bmc-cache=0.5s"),
        "prometheus": prometheus_argv(prometheus, write_yaml(work / "prometheus.yml", config),
                                      work / "data", server),
    }  # fmt: skip
    processes = {name: spawn_logged(argv, work / f"{name}.log") for name, argv in commands.items()}

    def ready() -> bool:
        for name, process in processes.items():
            # a process that exited (a flag refused, a port taken) says why, at once
            assert process.poll() is None, f"{name}: {log_tail(work / f'{name}.log')}"
        return answers_ok(f"{server.url}/-/ready")

    try:
        wait_for("prometheus ready", ready, 30)
        result = Stack(server.url, shared_sim.address)
        wait_for("both jobs scraped", lambda: len(result.query("up == 1")) == 2, 60)
        yield result
    finally:
        stop_all(processes.values(), 10)


def _prometheus_config(targets: Path, rules: Path) -> dict[str, Any]:
    """deploy/prometheus's agents job on `targets`, beside the job the inventory wrote."""
    deployed = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    (agents,) = [j for j in deployed["scrape_configs"] if j["job_name"] == "nvwatch"]
    agents["file_sd_configs"] = [{"files": [str(targets / "nvwatch-*.json")]}]
    agents["scrape_timeout"] = "1s"  # within this test's 1 s scrapes
    (bmc,) = yaml.safe_load((targets / SCRAPE_FILE).read_text())["scrape_configs"]
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [
            str(rules / alerts_build.PROMETHEUS_RECORDING),
            str(rules / alerts_build.PROMETHEUS_ALERTS),
        ],
        "scrape_configs": [agents, bmc],
    }


def test_bmc_series_carry_their_nodes_labels_and_join_its_gpus(stack: Stack) -> None:
    inlet = wait_for(
        "the BMC's inlet",
        lambda: stack.query('nvwatch_bmc_temperature_celsius{entity="inlet"}'),
        30,
    )
    (series,) = inlet
    labels = series["metric"]
    assert {k: labels[k] for k in NODE} == NODE
    assert labels["job"] == "nvwatch-bmc" and labels["bmc"] == stack.bmc
    # the value the real BMC was set to
    assert float(series["value"][1]) == initial_raw(INLET)
    joined = stack.query(
        "count by (cluster, instance) (nvwatch_bmc_temperature_celsius)\n"
        "  * on (cluster, instance) count by (cluster, instance) (nvwatch_gpu_up)"
    )
    assert [{k: j["metric"][k] for k in ("cluster", "instance")} for j in joined] == [
        {"cluster": NODE["cluster"], "instance": NODE["instance"]}
    ]
    assert float(joined[0]["value"][1]) > 0


def test_a_hot_inlet_makes_the_room_the_heat_source(stack: Stack, shared_sim: IpmiSim) -> None:
    heat = f'{HEAT_SOURCE}{{instance="{NODE["instance"]}"}}'
    wait_for("the node's verdict: the GPU", lambda: _value(stack, heat) == HEAT_GPU, 30)
    try:
        shared_sim.set_raw(INLET, 42)  # over the dgx-a100's 30 °C
        wait_for("the node's verdict: the room", lambda: _value(stack, heat) == HEAT_ROOM, 30)
        # its alert group runs apart from the recording rules: wait for its evaluation
        pending = wait_for(
            "the inlet alert pending",
            lambda: stack.query('ALERTS{alertname="NvwatchNodeInletTemperatureHigh"}'),
            30,
        )
        assert [p["metric"]["instance"] for p in pending] == [NODE["instance"]]
        assert pending[0]["metric"]["alertstate"] == "pending"  # its for: is minutes
    finally:
        shared_sim.reset()


def _value(stack: Stack, expr: str) -> float | None:
    result = stack.query(expr)
    return float(result[0]["value"][1]) if result else None
