"""nvwatch and the Prometheus community ipmi_exporter on the same real BMC: every value
both report is equal, before and after injected faults.

Debian's prometheus-ipmi-exporter (1.6, FreeIPMI underneath) scrapes the same ipmi_sim
as nvwatch's reader, with one config file for both: ipmi_exporter's own format, which
nvwatch loads as it is (its FreeIPMI-only keys listed as unused). Compared by sensor
name (the SDR's): temperatures, fan speeds, power sensors, DCMI power, and the states of
every sensor both rate. The differences that exist are FreeIPMI's interpretation, and are
asserted exactly so that no other one can hide among them: FreeIPMI calls a non-critical
threshold crossing and a supply pulled from its bay nominal (0), and a supply's
predictive failure critical (2), where nvwatch says warning (1) to all three.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import fetch, running
from nvwatch.agent.exposition.bmc import probe_exposition
from nvwatch.agent.sources.bmc.config import load_bmc_config
from nvwatch.agent.sources.bmc.ipmi import IpmiReader
from nvwatch.agent.sources.bmc.reading import Module, Target
from nvwatch.sim.ports import free_port
from tests.bmc.ipmi_sim import IpmiSim
from tests.bmc.sim_sensors import (
    EXHAUST,
    FAN2,
    INLET,
    NAMES,
    PASSWORD,
    PSU1,
    PSU2,
    PSU3,
    PSU4,
    PSU_AC_LOST,
    PSU_CONFIG_ERROR,
    PSU_FAILURE,
    PSU_INPUT_LOST,
    PSU_OUT_OF_RANGE,
    PSU_PREDICTIVE,
    PSU_PRESENT,
    USER,
)
from tests.conftest import require_tool

MODULE = "sim"
# Shared-record sensors are listed one by one only with --shared-sensors; the SDR cache
# goes to the test's folder, not $HOME (a recompiled SDR makes an old cache stale).
CONFIG = """\
modules:
  default:
    collectors: []
  {module}:
    user: "{user}"
    pass: "{password}"
    driver: "LAN_2_0"
    privilege: "admin"
    timeout: 10000
    workaround_flags:
      - opensesspriv
    collectors: [ipmi, dcmi]
    custom_args:
      ipmi: ["--shared-sensors", "--sdr-cache-directory={cache}"]
"""


@dataclass(frozen=True)
class Peer:
    url: str  # the exporter's /ipmi for the BMC
    module: Module  # nvwatch's reading of the same config file


@pytest.fixture(scope="module")
def peer(shared_sim: IpmiSim, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    exporter = require_tool("prometheus-ipmi-exporter")
    require_tool("ipmimonitoring")
    root = tmp_path_factory.mktemp("ipmi-exporter")
    cache = root / "freeipmi"
    cache.mkdir(mode=0o700)
    config = root / "ipmi_exporter.yml"
    config.write_text(CONFIG.format(module=MODULE, user=USER, password=PASSWORD, cache=cache))
    loaded = load_bmc_config(config)
    assert f"modules.{MODULE}.workaround_flags" in loaded.unused_keys
    assert f"modules.{MODULE}.custom_args" in loaded.unused_keys
    port = free_port()
    argv = [exporter, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}"]
    with running(argv, f"http://127.0.0.1:{port}/metrics", log=root / "exporter.log"):
        query = urllib.parse.urlencode({"target": shared_sim.address, "module": MODULE})
        yield Peer(f"http://127.0.0.1:{port}/ipmi?{query}", loaded.modules[MODULE])


@dataclass
class Values:
    """What one exporter reports, by kind and sensor name."""

    temperatures: dict[str, float]
    fans: dict[str, float]
    power: dict[str, float]  # sensors in watts, plus "dcmi"
    states: dict[str, float]  # every rated sensor's 0/1/2
    collectors: dict[str, float]  # collector -> 1 read, 0 failed


def _families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def _exporter(peer: Peer) -> Values:
    got = _families(fetch(peer.url, timeout=30).decode())
    collectors = {labels["collector"]: v for labels, v in got["ipmi_up"]}

    def by_name(name: str) -> dict[str, float]:
        return {labels["name"]: value for labels, value in got.get(name, [])}

    power = by_name("ipmi_power_watts")
    for _, watts in got.get("ipmi_dcmi_power_consumption_watts", []):
        power["dcmi"] = watts
    states = {
        **by_name("ipmi_temperature_state"),
        **by_name("ipmi_fan_speed_state"),
        **by_name("ipmi_power_state"),
        **{
            labels["name"]: value
            for labels, value in got.get("ipmi_sensor_state", [])
            if labels["type"] == "Power Supply"
        },
    }
    return Values(
        by_name("ipmi_temperature_celsius"), by_name("ipmi_fan_speed_rpm"), power, states,
        collectors,
    )  # fmt: skip


def _nvwatch(peer: Peer, sim: IpmiSim) -> Values:
    reading = IpmiReader().read(Target(sim.host, sim.port), peer.module)
    got = _families(probe_exposition(reading, None, peer.module).decode())
    assert got["nvwatch_bmc_up"] == [({}, 1.0)]

    def by_sensor(name: str) -> dict[str, float]:
        return {labels["sensor"]: value for labels, value in got.get(name, [])}

    return Values(
        by_sensor("nvwatch_bmc_temperature_celsius"),
        by_sensor("nvwatch_bmc_fan_speed_rpm"),
        by_sensor("nvwatch_bmc_power_watts"),
        by_sensor("nvwatch_bmc_sensor_state"),
        {labels["collector"]: v for labels, v in got["nvwatch_bmc_collector_up"]},
    )


def _compare(peer: Peer, sim: IpmiSim) -> dict[str, tuple[float, float]]:
    """Assert every value both report is equal; return the states that differ, as
    sensor -> (nvwatch, exporter)."""
    theirs, ours = _exporter(peer), _nvwatch(peer, sim)
    assert ours.temperatures == theirs.temperatures
    assert ours.fans == theirs.fans
    assert ours.power == theirs.power
    assert "dcmi" in ours.power
    # the collectors both ran, each read, as each exporter says it in its own family
    assert ours.collectors == theirs.collectors == {"ipmi": 1, "dcmi": 1}
    # every sensor the exporter rates, nvwatch rates too (and the power supplies)
    assert set(theirs.states) <= set(ours.states)
    return {
        name: (ours.states[name], value)
        for name, value in theirs.states.items()
        if ours.states[name] != value
    }


def test_a_healthy_bmc_reads_the_same(peer: Peer, bmc: IpmiSim) -> None:
    assert _compare(peer, bmc) == {}


def test_faults_read_the_same(peer: Peer, bmc: IpmiSim) -> None:
    bmc.set_raw(INLET, 42)  # critical
    bmc.set_raw(EXHAUST, 65)  # non-critical: FreeIPMI's nominal, nvwatch's warning
    bmc.set_raw(FAN2, 3)  # critical
    bmc.set_bit(PSU1, PSU_FAILURE, True)
    bmc.set_bit(PSU2, PSU_AC_LOST, True)
    bmc.set_bit(PSU4, PSU_FAILURE, True)
    bmc.set_dcmi_watts(452)
    assert _compare(peer, bmc) == {"Exhaust Temp": (1, 0)}
    theirs = _exporter(peer)
    assert theirs.states["Inlet Temp"] == theirs.states[NAMES[PSU4]] == 2  # the fault is seen
    assert theirs.power["dcmi"] == 452


def test_a_pulled_supply_is_the_documented_difference(peer: Peer, bmc: IpmiSim) -> None:
    bmc.set_bit(PSU2, PSU_PRESENT, False)
    assert _compare(peer, bmc) == {"PSU2 Status": (1, 0)}


def test_every_supply_offset_rates_as_freeipmi_but_predictive_failure(
    peer: Peer, bmc: IpmiSim
) -> None:
    bmc.set_bit(PSU1, PSU_PREDICTIVE, True)  # still delivering power: a warning here
    bmc.set_bit(PSU2, PSU_OUT_OF_RANGE, True)
    bmc.set_bit(PSU3, PSU_CONFIG_ERROR, True)
    bmc.set_bit(PSU4, PSU_INPUT_LOST, True)
    assert _compare(peer, bmc) == {"PSU1 Status": (1, 2)}
    assert {_exporter(peer).states[NAMES[n]] for n in (PSU2, PSU3, PSU4)} == {2}


def test_one_config_file_for_both(peer: Peer) -> None:
    """The module nvwatch read from the exporter's file is the one the exporter uses."""
    assert (peer.module.user, peer.module.password) == (USER, PASSWORD)
    assert peer.module.timeout_s == 10.0
    assert peer.module.collectors == {"ipmi", "dcmi"}
