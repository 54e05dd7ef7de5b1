"""The /probe body of a real BMC (ipmi_sim), as a scraper parses it: every family is the
catalogue's (HELP, TYPE, labels), every value is what the BMC holds, faults show in the
states, and a failed probe is `nvwatch_bmc_up 0`, its duration and its reason.

Every family of the BMC contract is rendered here: nvwatch_bmc_up,
nvwatch_bmc_read_duration_seconds, nvwatch_bmc_power_watts,
nvwatch_bmc_temperature_celsius, nvwatch_bmc_fan_speed_rpm,
nvwatch_bmc_power_supply_present, nvwatch_bmc_power_supply_failed and
nvwatch_bmc_sensor_state (tests/agent/test_catalogue.py points here for them).
"""

from __future__ import annotations

import dataclasses
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.catalogue import BY_NAME, Scope, of_scope
from nvwatch.agent.exposition.bmc import probe_exposition
from nvwatch.agent.sources.bmc.ipmi import IpmiReader
from nvwatch.agent.sources.bmc.reading import Module, Target
from tests.bmc.ipmi_sim import IpmiSim
from tests.bmc.sim_sensors import (
    EXHAUST,
    FAN2,
    INLET,
    POWER,
    POWER_M,
    PSU1,
    PSU2,
    PSU_AC_LOST,
    PSU_FAILURE,
    PSU_PRESENT,
    SENSORS,
)
from tests.conftest import require_tool

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]
BMC_FAMILIES = {spec.name for spec in of_scope(Scope.BMC, Scope.BMC_SENSOR)}


def _parse(body: bytes) -> Series:
    """Every sample as (name, sorted labels) -> value, checking each family against the
    catalogue on the way."""
    series: Series = {}
    for family in text_string_to_metric_families(body.decode()):
        spec = BY_NAME[family.name]
        assert (family.type, family.documentation) == (spec.type.value, spec.help), family.name
        for sample in family.samples:
            assert sorted(sample.labels) == sorted(spec.labels), (sample.name, sample.labels)
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in series, f"duplicate series {key}"
            series[key] = sample.value
    return series


def _value(series: Series, name: str, **labels: str) -> float | None:
    return series.get((name, tuple(sorted(labels.items()))))


def _probe(target: Target, module: Module) -> Series:
    return _parse(probe_exposition(IpmiReader().read(target, module), None, module))


def _promtool_check(body: bytes) -> None:
    promtool = require_tool("promtool")
    done = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, timeout=60, check=False
    )
    # promtool lints names as well: a non-zero exit is a finding, printed, not a crash
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def test_a_healthy_bmc_probe(target: Target, module: Module) -> None:
    body = probe_exposition(IpmiReader().read(target, module), None, module)
    series = _parse(body)
    assert _value(series, "nvwatch_bmc_up") == 1
    assert 0 < (_value(series, "nvwatch_bmc_read_duration_seconds") or 0) < module.timeout_s
    for sim in SENSORS:
        if not sim.scanning:  # unavailable: absent from every family, never 0
            assert not [key for key in series if ("sensor", sim.name) in key[1]]
    watts = _sim_raw(POWER) * POWER_M
    assert _value(series, "nvwatch_bmc_power_watts", method="dcmi", sensor="dcmi") == watts
    assert (
        _value(series, "nvwatch_bmc_power_watts", method="sensor", sensor="Pwr Consumption")
        == watts
    )
    assert _value(series, "nvwatch_bmc_fan_speed_rpm", sensor="Fan1") == 4800
    _promtool_check(body)


def _sim_raw(number: int) -> int:
    return next(s.raw for s in SENSORS if s.number == number)


def test_temperature_entities(target: Target, module: Module) -> None:
    series = _probe(target, module)
    temps = {
        dict(labels)["sensor"]: dict(labels)["entity"]
        for name, labels in series
        if name == "nvwatch_bmc_temperature_celsius"
    }
    # inlet by its entity id (0x37), exhaust by the default name pattern, the CPU by 0x03
    assert temps == {"Inlet Temp": "inlet", "Exhaust Temp": "exhaust", "CPU Temp": "cpu"}
    assert _value(
        series, "nvwatch_bmc_temperature_celsius", sensor="Inlet Temp", entity="inlet"
    ) == _sim_raw(INLET)


def test_every_family_under_faults(bmc: IpmiSim, target: Target, module: Module) -> None:
    bmc.set_raw(INLET, 42)  # > UC 40: critical
    bmc.set_raw(EXHAUST, 65)  # > UNC 60 only: warning
    bmc.set_raw(FAN2, 3)  # 300 RPM < LC: critical
    bmc.set_bit(PSU1, PSU_FAILURE, True)
    bmc.set_bit(PSU2, PSU_AC_LOST, True)
    bmc.set_dcmi_watts(452)
    series = _probe(target, module)
    assert {name.removesuffix("_total") for name, _ in series} == BMC_FAMILIES

    def state(sensor: str, kind: str) -> float | None:
        return _value(series, "nvwatch_bmc_sensor_state", sensor=sensor, type=kind)

    assert state("Inlet Temp", "Temperature") == 2
    assert state("Exhaust Temp", "Temperature") == 1
    assert state("Fan2", "Fan") == 2
    assert state("Fan1", "Fan") == 0
    assert state("PSU1 Status", "Power Supply") == 2
    assert state("PSU2 Status", "Power Supply") == 2
    for psu in ("PSU1 Status", "PSU2 Status"):
        assert _value(series, "nvwatch_bmc_power_supply_failed", sensor=psu) == 1
        assert _value(series, "nvwatch_bmc_power_supply_present", sensor=psu) == 1
    assert _value(series, "nvwatch_bmc_fan_speed_rpm", sensor="Fan2") == 300
    assert _value(series, "nvwatch_bmc_power_watts", method="dcmi", sensor="dcmi") == 452


def test_a_pulled_supply(bmc: IpmiSim, target: Target, module: Module) -> None:
    bmc.set_bit(PSU2, PSU_PRESENT, False)
    series = _probe(target, module)
    assert _value(series, "nvwatch_bmc_power_supply_present", sensor="PSU2 Status") == 0
    assert _value(series, "nvwatch_bmc_power_supply_failed", sensor="PSU2 Status") == 0
    state = _value(series, "nvwatch_bmc_sensor_state", sensor="PSU2 Status", type="Power Supply")
    assert state == 1  # a warning: redundancy is what a missing supply costs
    assert _value(series, "nvwatch_bmc_power_supply_present", sensor="PSU1 Status") == 1


def test_a_failed_probe_is_up_0_its_duration_and_why(module: Module) -> None:
    body = probe_exposition(None, "no answer within 2.0 s", module, duration_s=2.01)
    text = body.decode()
    assert text.startswith("# nvwatch_bmc_up 0: no answer within 2.0 s\n")
    series = _parse(body)
    # every collector of the module failed with the read, each named as ipmi_exporter does
    assert series == {
        ("nvwatch_bmc_up", ()): 0.0,
        **{("nvwatch_bmc_collector_up", (("collector", c),)): 0.0 for c in module.collectors},
        ("nvwatch_bmc_read_duration_seconds", ()): 2.01,
    }
    assert module.collectors == {"ipmi", "dcmi"}
    _promtool_check(body)


def test_a_reason_is_one_comment_line(module: Module) -> None:
    body = probe_exposition(None, "first\nsecond\r\n# TYPE x gauge", module).decode()
    comments = [line for line in body.splitlines() if not line.startswith(("# HELP", "# TYPE"))]
    assert comments[0] == "# nvwatch_bmc_up 0: first second # TYPE x gauge"
    assert _parse(body.encode())[("nvwatch_bmc_up", ())] == 0.0


@pytest.mark.parametrize("collectors", [{"dcmi"}, {"ipmi"}, set()])
def test_only_the_modules_collectors_are_exported(
    target: Target, module: Module, collectors: set[str]
) -> None:
    reading = IpmiReader().read(target, module)  # both collectors read
    chosen = Module(**{**module.__dict__, "collectors": frozenset(collectors)})
    series = _parse(probe_exposition(reading, None, chosen))
    sensors = {dict(labels).get("sensor") for _, labels in series} - {None}
    assert ("dcmi" in sensors) == ("dcmi" in collectors)
    assert (len(sensors - {"dcmi"}) > 0) == ("ipmi" in collectors)
    up = {dict(labels)["collector"]: v for (name, labels), v in series.items()
          if name == "nvwatch_bmc_collector_up"}  # fmt: skip
    assert up == dict.fromkeys(collectors, 1.0)


def test_a_bmc_without_dcmi_power_fails_that_collector_alone(
    target: Target, module: Module
) -> None:
    reading = dataclasses.replace(IpmiReader().read(target, module), dcmi_watts=None)
    series = _parse(probe_exposition(reading, None, module))
    assert series[("nvwatch_bmc_up", ())] == 1.0
    assert series[("nvwatch_bmc_collector_up", (("collector", "ipmi"),))] == 1.0
    assert series[("nvwatch_bmc_collector_up", (("collector", "dcmi"),))] == 0.0
