"""The agent's renderer against prometheus_client, byte for byte.

prometheus_client stays the definition of correct output. Every simulated profile runs
every scenario (a few nodes per profile, each scenario aimed at its own GPU or HCA, and
one node with the node-wide ones), polled before the faults, while they are active (a
GPU fallen off the bus, an HCA vanished, the NVML driver gone) and after their repair.
Each poll is rendered twice: by the agent (`build_exposition`: the slot table, text
0.0.4 and OpenMetrics) and by the old path kept here as the reference, the same
catalogue walk into prometheus_client's own families, rendered by its
`generate_latest`. The bytes must be identical. Processes that appear and leave, ports
that vanish and a GPU that comes back are edited into samples too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from nvwatch.agent.catalogue import Field, MetricSpec, MetricType, Scope, Series, of_scope
from nvwatch.agent.config import parse_scenario
from nvwatch.agent.exposition.gpu import totals
from nvwatch.agent.exposition.render import (
    Exposition,
    agent_families,
    build_exposition,
    prepare,
    registry_of,
)
from nvwatch.agent.poller import Poller, Snapshot, SourceStatus
from nvwatch.agent.sources import Source
from nvwatch.agent.sources.host import HostSample, HostSource
from nvwatch.agent.sources.infiniband import InfinibandSample, InfinibandSource
from nvwatch.agent.sources.nvml.samples import NvmlSample, ProcessSample
from nvwatch.agent.sources.nvml.source import NvmlSource
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.bmc.classes import bmc_class
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.profiles import PROFILES, Profile
from nvwatch.sim.scenario_names import (
    BMC_SCENARIOS,
    DRIVER_SCENARIOS,
    FAULT_SCENARIOS,
    HCA_SCENARIOS,
    HOST_SCENARIOS,
    IB_SCENARIOS,
    WORKLOAD_SCENARIOS,
    known_scenarios,
)

# simulated seconds of each poll: a baseline, the faults active (they begin at 30 s; a
# lost GPU stops answering 2 s later, an HCA vanishes at 30 s), and after REPAIR_S, when
# the simulator has reset the lost GPU, brought the HCA back and loaded the driver
POLLS_AT = (0.0, 60.0, 120.0)
REPAIR_S = 90.0
# the faults that take something away; the rest run on through every poll
REPAIRED = {"gpu-lost", "ecc-dbe", "nvml-driver-broken", "ib-hca-vanish"}


# --- the old path, kept as the reference: the catalogue walk as it was before the slot
# table (generic reading of each Series, object by object) into prometheus_client's own
# families, which its generate_latest renders ------------------------------------------


class ReferenceSet:
    """The old FamilySet: each sample straight into prometheus_client's families."""

    def __init__(self) -> None:
        self.families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}

    def add_sample(self, spec: MetricSpec, label_values: list[str], value: object) -> None:
        if value is None:
            return
        self.declare(spec)
        self.families[spec.name].add_metric(label_values, float(value))  # type: ignore[arg-type]

    def declare(self, spec: MetricSpec) -> None:
        if spec.name in self.families:
            return
        labels, unit = list(spec.labels), spec.unit
        if spec.type is MetricType.COUNTER:
            family = CounterMetricFamily(spec.name, spec.help, labels=labels, unit=unit)
        else:
            family = GaugeMetricFamily(spec.name, spec.help, labels=labels, unit=unit)
        self.families[spec.name] = family


def _read(obj: object, field: Field) -> object:
    value = obj
    for part in field.path.split("."):
        value = getattr(value, part)
    if field.key is None:
        return value
    return value.get(field.key) if isinstance(value, Mapping) else None


def _label_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _samples(series: Series, obj: object) -> Iterable[tuple[list[str], object]]:
    if series.present_if is not None and _read(obj, series.present_if) is None:
        return ()
    labels = [_label_text(_read(obj, x)) if isinstance(x, Field) else x for x in series.labels]
    value = _read(obj, series.value) if isinstance(series.value, Field) else series.value
    if not series.each:
        return ((labels, value),)
    entries = list(value.items()) if isinstance(value, Mapping) else []
    if series.sort:
        entries.sort()
    return (([*labels, str(key)], entry) for key, entry in entries)


def _emit(spec: MetricSpec, obj: object, identity: Sequence[str], out: ReferenceSet) -> None:
    for series in spec.series:
        for label_values, value in _samples(series, obj):
            out.add_sample(spec, [*identity, *label_values], value)


def _emit_all(
    specs: Iterable[MetricSpec], objects: Sequence[tuple[Sequence[str], object]], out: ReferenceSet
) -> None:
    for spec in specs:
        for identity, obj in objects:
            _emit(spec, obj, identity, out)
        if spec.always_declared:
            out.declare(spec)


def _walk_nvml(sample: NvmlSample, out: ReferenceSet) -> None:
    for gpu in sample.gpus:
        ids = (str(gpu.index), gpu.uuid)
        for spec in of_scope(Scope.GPU, Scope.PROCESS, Scope.NVLINK):
            if not (gpu.up or spec.even_when_down):
                continue
            objects: list[tuple[Sequence[str], object]] = [(ids, gpu)]
            if spec.scope is Scope.PROCESS:
                objects = [(ids, process) for process in gpu.processes]
            elif spec.scope is Scope.NVLINK:
                links = gpu.nvlinks
                if sample.nvlink_detail == "gpu":
                    links = (totals(gpu.nvlinks),) if gpu.nvlinks else ()  # type: ignore[assignment]
                objects = [((*ids, str(x.link)), x) for x in links]
            for identity, obj in objects:
                _emit(spec, obj, identity, out)


def _walk_infiniband(sample: InfinibandSample, out: ReferenceSet) -> None:
    _emit_all(of_scope(Scope.IB_DEVICE), [((), device) for device in sample.devices], out)
    ports = [((p.device, p.port), p) for d in sample.devices for p in d.ports]
    _emit_all(of_scope(Scope.IB_PORT), ports, out)


def _walk_host(sample: HostSample, out: ReferenceSet) -> None:
    _emit_all(of_scope(Scope.HOST), [((), sample)], out)


WALKS: dict[str, Callable[[Any, ReferenceSet], None]] = {
    "nvml": _walk_nvml,
    "infiniband": _walk_infiniband,
    "host": _walk_host,
}


def reference_families(snapshot: Snapshot, samples: dict[str, object]) -> list[Metric]:
    """What build_exposition renders, as prometheus_client families: the agent's own
    (from its FamilySet) and each prepared source's, walked again the old way."""
    families = list(agent_families(snapshot))
    for name, status in snapshot.sources.items():
        if status.prepared is None:
            continue
        out = ReferenceSet()
        WALKS[name](samples[name], out)
        families.extend(out.families.values())
    return families


def assert_identical(exposition: Exposition, samples: dict[str, object], where: str) -> None:
    registry = registry_of(reference_families(exposition.snapshot, samples))
    assert exposition.text == generate_latest(registry), f"text 0.0.4 differs: {where}"
    expected = generate_openmetrics(registry)  # type: ignore[no-untyped-call]
    assert exposition.openmetrics(gzipped=False) == expected, f"OpenMetrics differs: {where}"


class Recorder:
    """The poller's prepare, keeping each source's raw sample for the reference."""

    def __init__(self) -> None:
        self.samples: dict[str, object] = {}

    def __call__(self, name: str, sample: object) -> object:
        self.samples[name] = sample
        return prepare(name, sample)


def node_plans(profile: Profile) -> list[list[str]]:
    """Scenario specs of the nodes that run every scenario the simulator knows on
    `profile`: GPU scenarios each on its own GPU, port scenarios spread over the HCAs but
    the last, which vanishes; then one node with the node-wide ones (the NVML driver
    gone, every HCA gone). What is taken away comes back at REPAIR_S."""
    known = set(known_scenarios())
    gpu = [s for s in (*FAULT_SCENARIOS, *WORKLOAD_SCENARIOS) if s in known and _fits(profile, s)]
    devices = [nic.device for nic in profile.nics]
    vanish = [s for s in HCA_SCENARIOS if s in known] if devices else []
    nodes: list[list[str]] = []
    for start in range(0, len(gpu), profile.gpu_count):
        chunk = gpu[start : start + profile.gpu_count]
        nodes.append([f"{name}@{i}" for i, name in enumerate(chunk)])
    if devices:
        ports = devices[:-1] or devices
        port_scenarios = [s for s in IB_SCENARIOS if s in known]
        nodes[0] += [f"{s}@{ports[i % len(ports)]}" for i, s in enumerate(port_scenarios)]
        if len(devices) > 1:  # one HCA gone while the others stay: the source stays up
            nodes[0] += [f"{s}@{devices[-1]}" for s in vanish]
    nodes.append(["idle", *(s for s in DRIVER_SCENARIOS if s in known), *vanish])
    # the chassis's faults: a hot room and a stopped fan heat the GPUs; a lost supply and
    # a silent BMC change nothing /metrics shows, and must not
    nodes[-1] += [s for s in BMC_SCENARIOS if _chassis_fits(profile, s)]
    # a starved host: the simulated host's, which this poll's host source does not read
    nodes[-1] += [s for s in HOST_SCENARIOS if s in known]
    until = f",until={REPAIR_S:g}s"
    return [[s + until if s.partition("@")[0] in REPAIRED else s for s in n] for n in nodes]


def _chassis_fits(profile: Profile, scenario: str) -> bool:
    return scenario != "psu-failure" or bmc_class(profile).supplies.count > 1


def _fits(profile: Profile, scenario: str) -> bool:
    return scenario != "nvlink-degraded" or any(profile.nvlinks)


def poll_node(profile: str, specs: list[str], root: Path) -> Iterator[tuple[Exposition, Recorder]]:
    """Each poll of a simulated node running `specs`, with the raw samples behind it."""
    clock = ManualClock(0.0)
    node = SimulatedNode(
        profile, [parse_scenario(s) for s in specs], seed=7, clock=clock, sysfs_root=root
    )
    sim_nvml.install(node.nvml)
    nvml = NvmlSource(clock=clock)
    sources: list[Source] = [
        nvml,
        InfinibandSource(root, gpu_bus_ids=nvml.gpu_bus_ids),
        HostSource(),
    ]
    recorder = Recorder()
    poller = Poller(sources, interval=60, timeout=30, prepare=recorder)
    try:
        for at in POLLS_AT:
            clock.advance(at - clock())
            node.tick()
            recorder.samples.clear()
            yield build_exposition(poller.poll_once()), recorder
    finally:
        poller.stop(timeout=2)
        node.close()
        sim_nvml.uninstall()


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_scenario_renders_as_prometheus_client_does(profile: str, tmp_path: Path) -> None:
    plans = node_plans(PROFILES[profile])
    states: set[str] = set()
    for n, specs in enumerate(plans):
        root = tmp_path / str(n)
        root.mkdir()
        for exposition, recorder in poll_node(profile, specs, root):
            where = f"{profile} {specs} at {exposition.snapshot.completed_at}"
            assert_identical(exposition, recorder.samples, where)
            states |= {f"{s.name} {s.state}" for s in exposition.snapshot.sources.values()}
            states |= _faults_seen(PROFILES[profile], recorder.samples)
        # the last poll, after the repair: every source up, every GPU and HCA back
        up = all(s.up for s in exposition.snapshot.sources.values())
        if up and not _faults_seen(PROFILES[profile], recorder.samples):
            states.add(f"node {n} repaired")
    # the faults happened: a GPU off the bus, one HCA gone, InfiniBand gone node-wide
    nics = len(PROFILES[profile].nics)
    expected = {"gpu down", *(f"node {n} repaired" for n in range(len(plans)))}
    if nics and "ib-hca-vanish" in known_scenarios():
        expected |= {"infiniband down", "hca gone"} if nics > 1 else {"infiniband down"}
    assert expected <= states, states


def _faults_seen(profile: Profile, samples: dict[str, object]) -> set[str]:
    seen = set()
    nvml, ib = samples.get("nvml"), samples.get("infiniband")
    if isinstance(nvml, NvmlSample) and any(not gpu.up for gpu in nvml.gpus):
        seen.add("gpu down")
    if isinstance(ib, InfinibandSample) and len(ib.devices) < len(profile.nics):
        seen.add("hca gone")
    return seen


def test_scenario_plans_cover_every_scenario() -> None:
    for profile in PROFILES.values():
        planned = {s.partition("@")[0].partition(",")[0] for n in node_plans(profile) for s in n}
        missing = set(known_scenarios()) - planned
        if not any(profile.nvlinks):
            missing.discard("nvlink-degraded")
        if not profile.nics:
            missing -= {*IB_SCENARIOS, *HCA_SCENARIOS}
        if not _chassis_fits(profile, "psu-failure"):
            missing.discard("psu-failure")
        # healthy-training is every node's default workload; here it also runs on a GPU
        assert not missing, f"{profile.name}: {missing}"


# --- edits the simulator does not make: processes coming and going, a port vanishing --


def render_samples(samples: dict[str, object], sequence: int) -> Exposition:
    statuses = {
        name: SourceStatus(name, True, 0.01, 0, None, prepare(name, sample))
        for name, sample in samples.items()
    }
    return build_exposition(Snapshot(MappingProxyType(statuses), sequence, 1.7e9, 0.0))


def with_process(sample: NvmlSample, gpu: int, process: ProcessSample) -> NvmlSample:
    gpus = list(sample.gpus)
    gpus[gpu] = dataclasses.replace(gpus[gpu], processes=(*gpus[gpu].processes, process))
    return dataclasses.replace(sample, gpus=tuple(gpus))


def with_gpu_down(sample: NvmlSample, gpu: int) -> NvmlSample:
    gpus = list(sample.gpus)
    gpus[gpu] = dataclasses.replace(gpus[gpu], up=False)
    return dataclasses.replace(sample, gpus=tuple(gpus))


def without_port(sample: InfinibandSample, device: int) -> InfinibandSample:
    devices = list(sample.devices)
    devices[device] = dataclasses.replace(devices[device], ports=devices[device].ports[1:])
    return dataclasses.replace(sample, devices=tuple(devices))


def unordered(sample: NvmlSample, ib: InfinibandSample) -> tuple[NvmlSample, InfinibandSample]:
    """Mappings the exposition sorts, handed over unsorted (the simulator's come sorted)."""
    gpus = list(sample.gpus)
    gpus[0] = dataclasses.replace(gpus[0], xid_counts={79: 1, 13: 4, 31: 2})
    port = ib.devices[0].ports[0]
    backwards = dict(reversed(list(port.hw_counters.items())))
    device = dataclasses.replace(
        ib.devices[0], ports=(dataclasses.replace(port, hw_counters=backwards),)
    )
    return (
        dataclasses.replace(sample, gpus=tuple(gpus)),
        InfinibandSample(devices=(device, *ib.devices[1:])),
    )


def test_processes_and_ports_coming_and_going(tmp_path: Path) -> None:
    polls = list(poll_node("dgx-h100", [], tmp_path))
    samples = polls[-1][1].samples
    nvml, ib = samples["nvml"], samples["infiniband"]
    assert isinstance(nvml, NvmlSample) and isinstance(ib, InfinibandSample)
    # a name that needs every escape, as a process's command may
    odd = ProcessSample(pid=31337, memory_bytes=2**33 + 1, name='a "b"\\c\nd', user="ü")
    nvml_unordered, ib_unordered = unordered(nvml, ib)
    edits: list[dict[str, object]] = [
        {**samples, "nvml": with_process(nvml, 0, odd)},
        dict(samples),  # it left
        {**samples, "infiniband": without_port(ib, 0)},  # a port vanished
        {**samples, "infiniband": InfinibandSample(devices=ib.devices[1:])},  # an HCA
        dict(samples),  # both back
        {**samples, "nvml": with_gpu_down(nvml, 1)},  # fallen off the bus
        dict(samples),  # and back
        # --nvlink-detail gpu: one link="all" total per GPU, no remote_info
        {**samples, "nvml": dataclasses.replace(nvml, nvlink_detail="gpu")},
        {**samples, "nvml": nvml_unordered, "infiniband": ib_unordered},
    ]
    for sequence, edited in enumerate(edits):
        assert_identical(render_samples(edited, sequence), edited, f"edit {sequence}")
