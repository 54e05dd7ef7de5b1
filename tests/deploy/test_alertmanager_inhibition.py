"""deploy/alertmanager/alertmanager.yml's inhibitions, in a real Alertmanager on loopback.

A dead agent explains its node's GPU alerts, and inhibits them; it explains nothing its
BMC reports (a failed supply or a stopped fan may be why the agent died, and the BMC
answers while the node is down), so every alert of the BMC group still notifies.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvwatch.alerts.rules import bmc
from nvwatch.mixin.config import MixinConfig
from tests.conftest import require_tool
from tests.e2e.loopback import Endpoint, answers_ok, log_tail, spawn_logged, wait_for
from tests.e2e.service_commands import alertmanager_argv
from tests.processes import stop

DEPLOYED = Path(__file__).parents[2] / "deploy" / "alertmanager" / "alertmanager.yml"
NODE = {"cluster": "c1", "instance": "n1"}


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The deployed routes and inhibitions, with receivers that send nowhere."""
    binary = require_tool("prometheus-alertmanager", "alertmanager")
    workdir = tmp_path_factory.mktemp("alertmanager")
    config = yaml.safe_load(DEPLOYED.read_text(encoding="utf-8"))
    config["receivers"] = [{"name": r["name"]} for r in config["receivers"]]
    path = workdir / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    endpoint = Endpoint.free()
    log = workdir / "alertmanager.log"
    process = spawn_logged(alertmanager_argv(binary, path, workdir / "data", endpoint), log)
    try:

        def ready() -> bool:
            # an Alertmanager that refused the config says why, at once
            assert process.poll() is None, log_tail(log)
            return answers_ok(f"{endpoint.url}/-/ready")

        wait_for("alertmanager ready", ready, 30)
        yield endpoint.url
    finally:
        stop(process, 10)


def _post(url: str, alerts: list[dict[str, Any]]) -> None:
    body = json.dumps(alerts).encode()
    request = urllib.request.Request(
        f"{url}/api/v2/alerts", body, {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def _alerts(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as response:
        result: list[dict[str, Any]] = json.load(response)
        return result


def _alert(name: str, **labels: str) -> dict[str, Any]:
    return {"labels": {"alertname": name, "severity": "critical", **labels}}


def test_a_dead_agent_inhibits_its_gpu_alerts_not_its_bmc_alerts(alertmanager: str) -> None:
    bmc_alerts = [a.name for a in bmc.group(MixinConfig()).alerts]
    sent = [
        _alert("NvwatchAgentDown", **NODE),
        _alert("NvwatchGpuThermalSlowdown", gpu="0", **NODE),
        # the same GPU alert on a node whose agent is up
        _alert("NvwatchGpuThermalSlowdown", gpu="0", cluster="c1", instance="n2"),
        *(_alert(name, **NODE) for name in bmc_alerts),
    ]
    _post(alertmanager, sent)
    wait_for("every alert received", lambda: len(_alerts(alertmanager)) == len(sent), 10)
    # the inhibitor learns of a source alert from its own subscription to the alert store,
    # after the API has listed it: wait for the one source to take effect, then the
    # muted set is final (no other source was sent)
    expected = {("NvwatchGpuThermalSlowdown", "n1")}
    wait_for(
        "the dead agent's inhibition in effect",
        lambda: expected <= _suppressed(alertmanager),
        10,
        explain=lambda: f"muted: {sorted(_suppressed(alertmanager))}",
    )
    assert _suppressed(alertmanager) == expected
    assert len(bmc_alerts) >= 6


def _suppressed(url: str) -> set[tuple[str, str]]:
    """(alertname, instance) of the alerts an inhibition mutes."""
    return {
        (a["labels"]["alertname"], a["labels"]["instance"])
        for a in _alerts(url)
        if a["status"]["inhibitedBy"]
    }
