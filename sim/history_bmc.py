"""What a history writes for one node's BMC at one instant: the `nvwatch-bmc` job's scrape.

A management host probes every BMC (`/probe?target=<bmc>&module=default`), so the series
carry that job's labels: the node's `cluster`, `rack`, `node_class` and `instance` (the
join with its GPU series) and `bmc`, its address. The BMC answers whether or not the
node's agent does, so an agent-down episode leaves these series whole. Values are the
node's SDR readings (sim/bmc_sdr.py) as the `bmc` source interprets them: temperatures
with their entity, fan speeds, every power reading (DCMI's as `sensor="dcmi"`), supplies
present and failed, and each threshold sensor's and supply's state. The read's duration
is left out: no read happened, and a history must be the same for the same seed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from nvwatch.agent.sources.bmc.reading import (
    READING_TYPE_THRESHOLD,
    SENSOR_TYPE_POWER_SUPPLY,
    UNIT_DEGREES_C,
    UNIT_RPM,
    UNIT_WATTS,
    BmcReading,
    SensorReading,
)
from nvwatch.sim.bmc_reader import SIMULATED_MODULE
from nvwatch.sim.fleet_plan import BMC_JOB, NodeSpec, node_labels

UP = "up"
BMC_FAMILIES: tuple[str, ...] = (
    "nvwatch_bmc_up",
    "nvwatch_bmc_power_watts",
    "nvwatch_bmc_temperature_celsius",
    "nvwatch_bmc_fan_speed_rpm",
    "nvwatch_bmc_power_supply_present",
    "nvwatch_bmc_power_supply_failed",
    "nvwatch_bmc_sensor_state",
)
DCMI_SENSOR = "dcmi"
# the interpretation of the `bmc` source: entity ids, type names as FreeIPMI's (the
# `type` label ipmi_exporter uses), supply offsets and the 0/1/2 state
ENTITIES = {0x37: "inlet", 0x40: "inlet", 0x03: "cpu", 0x41: "cpu", 0x07: "board", 0x42: "board"}
TYPE_NAMES = {0x01: "Temperature", 0x03: "Current", 0x04: "Fan", 0x08: "Power Supply"}
EXHAUST_NAMES = re.compile(r"(?i)exhaust|outlet")
THRESHOLD_CRITICAL, THRESHOLD_WARNING = 0b110110, 0b001001
SUPPLY_PRESENT, SUPPLY_FAILED = 1 << 0, (1 << 1) | (1 << 3) | (1 << 4)

Row = tuple[str, str, float]


class BmcSeries:
    """One node's BMC as the `nvwatch-bmc` job records it; rendered label sets cached."""

    def __init__(self, spec: NodeSpec) -> None:
        self.spec = spec
        self.target = {"job": BMC_JOB, **node_labels(spec), "bmc": spec.bmc}
        self._cache: dict[tuple[str, ...], str] = {}
        inlet = SIMULATED_MODULE.inlet_pattern
        self._inlet_names = re.compile(inlet) if inlet else None

    def labels(self, *pairs: str) -> str:
        labels = self._cache.get(pairs)
        if labels is None:
            extra = dict(zip(pairs[::2], pairs[1::2], strict=True))
            pairs_text = ",".join(f'{k}="{v}"' for k, v in {**self.target, **extra}.items())
            labels = self._cache[pairs] = "{" + pairs_text + "}"
        return labels

    def rows(self, reading: BmcReading | None) -> Iterator[Row]:
        """The scrape of the probe: `up` 1 (the management host answers), and the BMC's
        series, or `nvwatch_bmc_up` 0 alone for a BMC that did not answer."""
        yield UP, self.labels(), 1.0
        yield "nvwatch_bmc_up", self.labels(), 0.0 if reading is None else 1.0
        if reading is None:
            return
        for sensor in reading.sensors:
            yield from self._sensor(sensor)
        if reading.dcmi_watts is not None:
            labels = self.labels("method", "dcmi", "sensor", DCMI_SENSOR)
            yield "nvwatch_bmc_power_watts", labels, reading.dcmi_watts

    def _sensor(self, sensor: SensorReading) -> Iterator[Row]:
        name, type_name = sensor.name, TYPE_NAMES.get(sensor.sensor_type)
        if sensor.states is None or type_name is None:
            return  # unavailable (absent, never 0), or a sensor nvwatch does not interpret
        if sensor.sensor_type == SENSOR_TYPE_POWER_SUPPLY:
            failed = 1.0 if sensor.states & SUPPLY_FAILED else 0.0
            present = 1.0 if sensor.states & SUPPLY_PRESENT else 0.0
            yield "nvwatch_bmc_power_supply_present", self.labels("sensor", name), present
            yield "nvwatch_bmc_power_supply_failed", self.labels("sensor", name), failed
            state = 2.0 if failed else (0.0 if present else 1.0)
        elif sensor.reading_type == READING_TYPE_THRESHOLD:
            yield from self._value(sensor)
            state = _threshold_state(sensor.states)
        else:
            return
        yield "nvwatch_bmc_sensor_state", self.labels("sensor", name, "type", type_name), state

    def _value(self, sensor: SensorReading) -> Iterator[Row]:
        value, name = sensor.value, sensor.name
        if value is None:
            return
        if sensor.unit == UNIT_DEGREES_C:
            labels = self.labels("sensor", name, "entity", self._entity(sensor))
            yield "nvwatch_bmc_temperature_celsius", labels, value
        elif sensor.unit == UNIT_RPM:
            yield "nvwatch_bmc_fan_speed_rpm", self.labels("sensor", name), value
        elif sensor.unit == UNIT_WATTS:
            labels = self.labels("method", "sensor", "sensor", name)
            yield "nvwatch_bmc_power_watts", labels, value

    def _entity(self, sensor: SensorReading) -> str:
        entity = ENTITIES.get(sensor.entity_id, "other")
        if entity != "inlet" and self._inlet_names and self._inlet_names.search(sensor.name):
            return "inlet"
        if entity != "inlet" and EXHAUST_NAMES.search(sensor.name):
            return "exhaust"
        return entity


def _threshold_state(states: int) -> float:
    if states & THRESHOLD_CRITICAL:
        return 2.0
    return 1.0 if states & THRESHOLD_WARNING else 0.0


BMC_HELP = {
    "nvwatch_bmc_up": "1 if the probe read the BMC, 0 if it did not answer.",
    "nvwatch_bmc_power_watts": "Node input power: DCMI Get Power Reading, and each "
    "power sensor of the SDR.",
    "nvwatch_bmc_temperature_celsius": "Temperature of a BMC sensor; entity from the "
    "IPMI entity id (inlet, cpu, board, exhaust, other).",
    "nvwatch_bmc_fan_speed_rpm": "Speed of a chassis fan.",
    "nvwatch_bmc_power_supply_present": "1 if the power supply is present.",
    "nvwatch_bmc_power_supply_failed": "1 if the power supply failed or lost its input.",
    "nvwatch_bmc_sensor_state": "State of a BMC sensor: 0 nominal, 1 warning, 2 critical.",
}
