"""The chassis model behind a simulated node's BMC, read the way the `bmc` source reads a
real one (SimulatedBmcReader): node power is its GPUs plus the rest, within the class's
published maximum; the exhaust rises above the inlet with power over airflow; fans follow
the inlet; the GPUs breathe the inlet air. Expected values come from the simulator's own
state (its GPUs, a twin node) or from the published figures, never from the model's
constants.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import pytest

from nvwatch.agent import simulation
from nvwatch.agent.config import AgentConfig, parse_scenario
from nvwatch.agent.sources.bmc.reading import (
    BmcError,
    BmcReading,
    SensorReading,
    Target,
)
from nvwatch.sim.bmc.classes import BMC_CLASSES, ENTITY_AIR_INLET, bmc_class, rest_max_watts
from nvwatch.sim.bmc.reader import NO_ANSWER_WAIT_CAP_S, SimulatedBmcReader
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.profiles import PROFILES
from tests.sim.conftest import BMC_ADDRESS, BMC_MODULE

SETTLED_S = 600.0
UPPER_NON_CRITICAL, UPPER_CRITICAL = 1 << 3, 1 << 4
REDUNDANCY_LOST, REDUNDANCY_DEGRADED = 1 << 1, 1 << 2


@dataclass
class Node:
    node: SimulatedNode
    clock: ManualClock

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.node.tick()

    def read(self) -> BmcReading:
        reader = SimulatedBmcReader({BMC_ADDRESS: self.node}, sleep=lambda _: None)
        return reader.read(Target(BMC_ADDRESS), BMC_MODULE)

    def sensors(self) -> dict[str, SensorReading]:
        return {s.name: s for s in self.read().sensors}

    def value(self, name: str) -> float:
        value = self.sensors()[name].value
        assert value is not None
        return value

    def watts(self) -> float:
        """The node's input power: DCMI's, or the power sensor's where there is no DCMI."""
        reading = self.read()
        return reading.dcmi_watts if reading.dcmi_watts is not None else self.value("Total Power")

    def gpu_watts(self) -> float:
        return sum(gpu.power_w for gpu in self.node.nvml.gpus)

    def fan_rpm(self) -> float:
        return sum(s.value or 0.0 for name, s in self.sensors().items() if name.startswith("FAN"))


@contextmanager
def nodes(profile: str, *variants: dict[str, object]) -> Iterator[list[Node]]:
    """One node of `profile` per variant (SimulatedNode keyword arguments; `scenarios` as
    texts), each on its own manual clock at 0, closed after."""
    made: list[Node] = []
    try:
        for variant in variants:
            options = dict(variant)
            specs = [parse_scenario(s) for s in options.pop("scenarios", ())]  # type: ignore[attr-defined]
            clock = ManualClock()
            made.append(Node(SimulatedNode(profile, specs, clock=clock, **options), clock))  # type: ignore[arg-type]
        yield made
    finally:
        for node in made:
            node.node.close()


def advance(all_nodes: Sequence[Node], seconds: float) -> None:
    for node in all_nodes:
        node.advance(seconds)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_class_leaves_room_for_the_rest_of_the_node(profile: str) -> None:
    model, chassis = PROFILES[profile], bmc_class(PROFILES[profile])
    assert rest_max_watts(model, chassis) > 0
    with nodes(profile, {}) as (node,):
        flat_out = node.node.bmc.node_watts(
            sum(gpu.tdp_watts for gpu in model.gpus), 1.0, [chassis.fan_max_rpm] * chassis.fans
        )
    assert flat_out <= model.system_power_watts  # NVIDIA's published maximum


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_node_power_is_its_gpus_and_the_rest_within_the_maximum(profile: str) -> None:
    maximum = PROFILES[profile].system_power_watts
    with nodes(profile, {}, {"scenarios": ["idle"]}) as (busy, idle):
        for _ in range(10):
            advance((busy, idle), 30.0)
            for node in (busy, idle):
                assert node.gpu_watts() < node.watts() <= maximum
        # what is not a GPU draws more under a job (CPUs feeding it, NICs) but far less
        # than the GPUs add
        rest_busy = busy.watts() - busy.gpu_watts()
        rest_idle = idle.watts() - idle.gpu_watts()
        assert rest_idle < rest_busy < rest_idle + (busy.gpu_watts() - idle.gpu_watts())


def test_node_power_follows_gpu_power_plus_the_supplies_loss() -> None:
    # twins but for a power cap on every GPU: same work, same moment, less GPU power in
    # the compute phase of each training step (the all-reduce stays under the cap)
    caps = [f"power-capped@{i},from=0" for i in range(8)]
    with nodes("dgx-h100", {}, {"scenarios": caps}) as (free, capped):
        ratios = []
        for _ in range(40):
            advance((free, capped), 0.7)
            gpus = free.gpu_watts() - capped.gpu_watts()
            if gpus > 500:
                ratios.append((free.watts() - capped.watts()) / gpus)
    assert len(ratios) > 10
    for ratio in ratios:
        assert 1.0 < ratio < 1.15  # every GPU watt, plus what the supplies lose on it


def test_the_exhaust_rises_with_power_over_airflow() -> None:
    # steady idle nodes in three rooms: the fans turn at three speeds, the law holds
    with nodes(
        "dgx-a100", *({"scenarios": ["idle"], "room_c": c} for c in (15.0, 25.0, 33.0))
    ) as made:
        advance(made, SETTLED_S)
        laws = []
        for node in made:
            rise = node.value("Exhaust Temp") - node.value("Inlet Temp")
            laws.append(rise * node.fan_rpm() / node.watts())
            assert rise > 3
    assert max(laws) == pytest.approx(min(laws), rel=0.12)  # whole-degree readings


def test_fans_follow_the_inlet_and_the_load() -> None:
    variants = [{"scenarios": ["idle"], "room_c": c} for c in (15.0, 25.0, 33.0)]
    with nodes("dgx1-v100", *variants, {"room_c": 33.0}) as made:
        advance(made, SETTLED_S)
        speeds = [node.fan_rpm() for node in made]
    assert speeds[0] < speeds[1] < speeds[2] < speeds[3]  # warmer, then busier


@pytest.mark.parametrize("profile", ["dgx1-v100", "dgx-a100", "dgx-h100", "inference-t4"])
def test_the_gpus_breathe_the_inlet_air(profile: str) -> None:
    # below slowdown a GPU's power does not depend on its temperature: every degree of
    # inlet is a degree of die
    with nodes(profile, {"room_c": 22.0}, {"room_c": 30.0}) as (cool, warm):
        advance((cool, warm), SETTLED_S)
        for a, b in zip(cool.node.nvml.gpus, warm.node.nvml.gpus, strict=True):
            assert b.power_w == pytest.approx(a.power_w)
            assert b.temperature_c - a.temperature_c == pytest.approx(8.0, abs=0.05)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_inlet_warns_outside_the_class_envelope(profile: str) -> None:
    top = BMC_CLASSES[profile].inlet_max_c
    with nodes(profile, {"room_c": top - 1}, {"room_c": top + 1}, {"room_c": top + 6}) as made:
        states = [node.sensors()["Inlet Temp"].states for node in made]
    assert states[0] == 0
    assert states[1] == UPPER_NON_CRITICAL
    assert states[2] == UPPER_NON_CRITICAL | UPPER_CRITICAL


@pytest.mark.parametrize("profile", ["dgx1-v100", "dgx-a100", "dgx-h100", "inference-t4"])
def test_redundancy_is_lost_when_no_spare_supply_is_left(profile: str) -> None:
    supplies = BMC_CLASSES[profile].supplies
    failures = [[f"psu-failure@{n + 1},from=0" for n in range(k)] for k in range(supplies.count)]
    with nodes(profile, *({"scenarios": f} for f in failures)) as made:
        states = [node.sensors()["PSU Redundancy"].states or 0 for node in made]
    for failed, state in enumerate(states):
        working = supplies.count - failed
        assert bool(state & REDUNDANCY_LOST) == (working <= supplies.carry_max), failed
        assert bool(state & REDUNDANCY_DEGRADED) == (supplies.carry_max < working < supplies.count)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_sdr_describes_the_chassis_the_way_a_bmc_does(profile: str) -> None:
    chassis = BMC_CLASSES[profile]
    with nodes(profile, {}) as (node,):
        node.advance(60.0)
        reading = node.read()
        state = node.node.bmc.state
    sensors = {s.name: s for s in reading.sensors}
    assert len(sensors) == len(reading.sensors)
    assert len({s.record_id for s in reading.sensors}) == len(reading.sensors)
    assert sensors["Inlet Temp"].value == round(state.inlet_c)
    assert sensors["Inlet Temp"].entity_id == chassis.inlet_entity
    assert sensors["Exhaust Temp"].value == round(state.exhaust_c)
    fans = [s for name, s in sensors.items() if name.startswith("FAN")]
    assert [s.value is not None for s in fans] == [i < chassis.fans for i in range(len(fans))]
    for fan, rpm in zip(fans, state.fan_rpm, strict=False):
        assert fan.value is not None and abs(fan.value - rpm) <= 100
    power = sensors["Total Power"].value
    assert power is not None and power == pytest.approx(state.node_watts, abs=51)
    if chassis.dcmi:
        assert reading.dcmi_watts == round(state.node_watts)
    else:
        assert reading.dcmi_watts is None
    assert sum(name.endswith(" Status") for name in sensors) == chassis.supplies.count
    assert (sensors["Inlet Temp"].entity_id == ENTITY_AIR_INLET) == profile.startswith(
        ("dgx", "hgx")
    )


def test_a_bmc_nobody_answers_for_is_down_after_a_bounded_wait() -> None:
    waits: list[float] = []
    with nodes("dgx-h100", {}) as (node,):
        reader = SimulatedBmcReader({BMC_ADDRESS: node.node}, sleep=waits.append)
        for target in (Target("127.9.9.9"), Target(BMC_ADDRESS, 6230)):
            with pytest.raises(BmcError, match=f"no answer from {target}"):
                reader.read(target, BMC_MODULE)
        quick = replace(BMC_MODULE, timeout_s=0.2)
        with pytest.raises(BmcError):
            reader.read(Target("127.9.9.9"), quick)
    assert waits == [min(BMC_MODULE.timeout_s, NO_ANSWER_WAIT_CAP_S)] * 2 + [0.2]


def test_the_module_chooses_what_is_read() -> None:
    with nodes("dgx-h100", {}) as (node,):
        reader = SimulatedBmcReader({BMC_ADDRESS: node.node})
        target = Target(BMC_ADDRESS)
        everything = reader.read(target, BMC_MODULE)
        dcmi = reader.read(target, replace(BMC_MODULE, collectors=frozenset({"dcmi"})))
        sensors = reader.read(target, replace(BMC_MODULE, collectors=frozenset({"ipmi"})))
        skipped = {everything.sensors[0].record_id, everything.sensors[-1].record_id}
        fewer = reader.read(target, replace(BMC_MODULE, exclude_sensor_ids=frozenset(skipped)))
    assert dcmi.sensors == () and dcmi.dcmi_watts == everything.dcmi_watts
    assert sensors.dcmi_watts is None and sensors.sensors == everything.sensors
    assert fewer.sensors == everything.sensors[1:-1]
    assert 0 < everything.duration_s < 1


def test_a_seed_decides_every_reading() -> None:
    with nodes("dgx-a100", {"seed": 3}, {"seed": 3}, {"seed": 4}) as made:
        advance(made, 120.0)
        first, twin, other = (node.read() for node in made)
    assert first.sensors == twin.sensors and first.dcmi_watts == twin.dcmi_watts
    assert first.sensors != other.sensors


def test_serve_simulate_reaches_its_nodes_bmc_through_the_door() -> None:
    """`serve --simulate`'s node has a BMC: the one door gives its reader, its module and
    its address while the node runs, and nothing outside (a real agent has none)."""
    assert simulation.simulated_bmc() is None
    config = AgentConfig(simulate="dgx-a100", scenarios=(parse_scenario("psu-failure@4,from=0"),))
    with simulation.simulated_node(config):
        door = simulation.simulated_bmc()
        assert door is not None
        reader, module, address = door
        reading = reader.read(Target(address), module)
    assert simulation.simulated_bmc() is None
    sensors = {s.name: s for s in reading.sensors}
    assert sensors["PSU4 Status"].states == 0b11  # present, failed: the node's scenario
    assert reading.dcmi_watts is not None and reading.dcmi_watts > 0
