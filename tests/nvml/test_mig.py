"""MIG through the agent: what it exports per instance is the simulator's own state, values
NVML does not give under MIG are absent (never 0), and the per-poll cost stays small.

The node is polled twice a minute apart on a manual clock, as in
test_exported_equals_simulated.py; each instance's state is read after the poll, with
the clock standing still, from the simulator's `GpuMig` (never from what its NVML said).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvwatch.agent.exposition.render import build_exposition, prepare
from nvwatch.agent.poller import Poller
from nvwatch.agent.sources.attribution.refresher import gpu_ref
from nvwatch.agent.sources.nvml.source import NvmlSource
from nvwatch.agent.topology import build_topology, format_matrix
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.gpu.mig_layout import parse_layout
from nvwatch.sim.gpu.mig_state import GpuMig
from nvwatch.sim.gpu.state import Activity
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.nvml import SimulatedNvml, install, uninstall
from tests.nvml.test_exported_equals_simulated import BYTE, Comparison

POLL_S = 60.0
H100_LAYOUT = "0-3:3g.40gb,2g.20gb,1g.10gb*2;4:7g.80gb;5:pending;6:none"
RATIO = 1e-9  # GPM ratios are computed in floating point on both sides


@dataclass
class Polled:
    node: SimulatedNode
    check: Comparison
    # (GPU index, GPU instance id) -> the instance's GPM integrals at the two polls
    activity: dict[tuple[int, int], tuple[Activity, Activity]]
    source: NvmlSource
    clock: ManualClock


def _poll(profile: str, layout: str | None, tmp_path: Path) -> Iterator[Polled]:
    clock = ManualClock(0.0)
    node = SimulatedNode(profile, seed=7, clock=clock, sysfs_root=tmp_path, mig=layout)
    install(node.nvml)
    source = NvmlSource(clock=clock)
    poller = Poller([source], interval=POLL_S, timeout=30, prepare=prepare)
    try:
        poller.poll_once()
        before = _activity(node)
        clock.advance(POLL_S)
        snapshot = poller.poll_once()
        after = _activity(node)
        exposition = build_exposition(snapshot).text.decode()
        pairs = {key: (before[key], after[key]) for key in after}
        yield Polled(node, Comparison(exposition), pairs, source, clock)
    finally:
        poller.stop(timeout=2)
        node.close()
        uninstall()


def _activity(node: SimulatedNode) -> dict[tuple[int, int], Activity]:
    return {
        (index, d.gpu_instance_id): state.activity(d)
        for index, state in node.nvml.mig.items()
        for d in state.devices
    }


@pytest.fixture
def h100(tmp_path: Path) -> Iterator[Polled]:
    yield from _poll("dgx-h100", H100_LAYOUT, tmp_path)


def _compare_instances(polled: Polled, index: int, state: GpuMig) -> None:
    check = polled.check
    gpu = state.gpu
    ids = {"gpu": str(index), "uuid": gpu.uuid}
    exported = check.find("nvwatch_mig_info", **ids)
    assert len(exported) == len(state.devices)
    for device in state.devices:
        labels = {
            **ids,
            "gpu_instance_id": str(device.gpu_instance_id),
            "compute_instance_id": str(device.compute_instance_id),
        }
        info = {"mig_uuid": device.uuid, "profile": device.profile_name}
        check.equal(1.0, 0.0, "nvwatch_mig_info", **labels, **info)
        profile = device.placed.profile
        check.equal(profile.memory_bytes, BYTE, "nvwatch_mig_memory_total_bytes", **labels)
        used = state.memory_used_bytes(device)
        check.equal(used, BYTE, "nvwatch_mig_memory_used_bytes", **labels)
        if gpu.model.gpm:
            a, b = polled.activity[(index, device.gpu_instance_id)]
            dt = b.time - a.time
            for name, field in (
                ("sm_active", "sm_active"),
                ("sm_occupancy", "sm_occupancy"),
                ("tensor_active", "tensor_active"),
                ("dram_active", "dram_active"),
            ):
                ratio = (getattr(b, field) - getattr(a, field)) / dt
                check.equal(ratio, RATIO, f"nvwatch_mig_{name}_ratio", **labels)
        else:
            check.absent("nvwatch_mig_sm_active_ratio", **labels)


def test_every_instance_is_exported_as_the_simulator_holds_it(h100: Polled) -> None:
    mig = h100.node.nvml.mig
    for index, state in mig.items():
        _compare_instances(h100, index, state)
    assert not h100.check.problems, "\n".join(h100.check.problems)
    # 4 GPUs x 4 instances + one 7g: each with info, 2 memory series and 4 GPM ratios
    assert h100.check.compared == 17 * 7


def test_mig_mode_per_gpu_and_absent_not_zero_under_mig(h100: Polled) -> None:
    check = h100.check
    nvml = h100.node.nvml
    for gpu in nvml.gpus:
        ids = {"gpu": str(gpu.index), "uuid": gpu.uuid}
        state = nvml.mig.get(gpu.index)
        current = state is not None and state.current
        pending = state is not None and state.pending
        check.equal(float(current), 0.0, "nvwatch_gpu_mig_mode", kind="current", **ids)
        check.equal(float(pending), 0.0, "nvwatch_gpu_mig_mode", kind="pending", **ids)
        if current:
            # NVML has no utilization rates on a MIG-enabled GPU: absent, never 0
            check.absent("nvwatch_gpu_utilization_ratio", **ids)
            check.absent("nvwatch_gpu_memory_utilization_ratio", **ids)
            # nor per-process utilization, while the processes' memory is there
            check.absent("nvwatch_gpu_process_sm_utilization_ratio", **ids)
            check.absent("nvwatch_gpu_process_memory_utilization_ratio", **ids)
            used = state.memory_used_total_bytes() if state is not None else 0
            check.equal(used, BYTE, "nvwatch_gpu_memory_used_bytes", **ids)
        else:
            check.equal(gpu.utilization, 0.01, "nvwatch_gpu_utilization_ratio", **ids)
            check.absent("nvwatch_mig_info", **ids)
            check.absent("nvwatch_mig_memory_used_bytes", **ids)
        # GPU-wide readings stay: the board still has one power draw and temperature
        check.equal(gpu.power_w, 1e-3, "nvwatch_gpu_power_watts", **ids)
    # the absences above are NVML's, not for want of processes: GPU 0's instances run jobs
    assert check.find("nvwatch_gpu_process_memory_bytes", gpu="0")
    # GPU 6 is in MIG mode with no instances: a mode, and no instance series
    assert check.find("nvwatch_gpu_mig_mode", gpu="6", kind="current")[0].value == 1.0
    assert not check.find("nvwatch_mig_info", gpu="6")
    assert not check.problems, "\n".join(check.problems)


def test_a100_instances_have_memory_but_no_gpm(tmp_path: Path) -> None:
    for polled in _poll("dgx-a100", "all:3g.20gb,2g.10gb,1g.5gb*2", tmp_path):
        for index, state in polled.node.nvml.mig.items():
            _compare_instances(polled, index, state)
        assert not polled.check.problems, "\n".join(polled.check.problems)
        assert not polled.check.find("nvwatch_mig_sm_active_ratio")


def test_boards_without_mig_have_no_mig_series(tmp_path: Path) -> None:
    for polled in _poll("dgx1-v100", None, tmp_path):
        assert not polled.check.find("nvwatch_gpu_mig_mode")
        assert not polled.check.find("nvwatch_mig_info")
        assert len(polled.check.find("nvwatch_gpu_utilization_ratio")) == 8


def test_a_poll_costs_one_memory_call_per_instance_and_no_relisting(h100: Polled) -> None:
    nvml = h100.node.nvml
    before = nvml.call_counts.copy()
    h100.clock.advance(POLL_S)
    h100.source.collect()
    calls = nvml.call_counts - before
    instances = sum(len(state.devices) for state in nvml.mig.values())
    named = [
        n for n in ("nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetUUID") if calls[(n, 0)]
    ]
    assert not named, f"the static MIG layout was listed again: {named}"
    memory = sum(c for (name, _), c in calls.items() if name == "nvmlDeviceGetMemoryInfo_v2")
    assert memory == instances + len(nvml.gpus)  # each instance, and each GPU itself
    mig_gpm = sum(c for (name, _), c in calls.items() if name == "nvmlGpmMigSampleGet")
    assert mig_gpm == instances


def test_a_repartitioned_gpu_is_listed_again(h100: Polled) -> None:
    nvml = h100.node.nvml
    with nvml._lock:  # the administrator destroys the instances and makes one 7g
        nvml.mig[0] = GpuMig(nvml.gpus[0], parse_layout("0:7g.80gb", 8)[0], seed=7)
    samples = []
    for _ in range(2):
        h100.clock.advance(POLL_S)
        samples.append(h100.source.collect())
    first, second = (s.gpus[0].mig_devices for s in samples)
    assert len(first) <= 1  # the vanished instances answer no more: dropped at once
    assert [(d.profile, d.mig_uuid) for d in second] == [("7g.80gb", nvml.mig[0].devices[0].uuid)]


def test_topology_shows_each_gpu_partitioning(tmp_path: Path) -> None:
    layout = parse_layout("0:3g.40gb,2g.20gb,1g.10gb;1:pending;2:none", 8)
    lib = SimulatedNvml("dgx-h100", mig=layout)
    install(lib)
    try:
        text = format_matrix(build_topology(tmp_path))
    finally:
        uninstall()
    section = text.split("MIG partitioning", 1)[1].splitlines()
    gpu0 = section[section.index("  GPU0   MIG enabled") + 1 :][: len(lib.mig[0].devices)]
    for line, device in zip(gpu0, lib.mig[0].devices, strict=True):
        start, size = device.placed.start, device.placed.profile.placement_size
        slices = str(start) if size == 1 else f"{start}-{start + size - 1}"
        assert line.split() == [
            "GI", str(device.gpu_instance_id), "CI", "0", device.profile_name, "slices",
            slices, device.uuid,
        ]  # fmt: skip
    used = {
        i
        for d in lib.mig[0].devices
        for i in range(d.placed.start, d.placed.start + d.placed.profile.placement_size)
    }
    free = [str(i) for i in range(8) if i not in used]
    assert free and f"         free slices: {','.join(free)}" in section  # one free: 7 of 8
    assert "  GPU1   enabled after the next reset" in section
    assert "  GPU2   MIG enabled, no instances" in section
    assert "  GPU3   MIG disabled" in section


def test_topology_of_a_board_without_mig_has_no_mig_section(tmp_path: Path) -> None:
    install(SimulatedNvml("dgx1-v100"))
    try:
        assert "MIG" not in format_matrix(build_topology(tmp_path))
    finally:
        uninstall()


def test_processes_carry_their_instance_and_attribution_sees_each_instance(h100: Polled) -> None:
    h100.clock.advance(POLL_S)
    sample = h100.source.collect()
    for index, state in h100.node.nvml.mig.items():
        if not state.current:
            continue
        gpu = sample.gpus[index]
        busy = {d.gpu_instance_id: state.process_pid(d) for d in state.devices if d.load}
        expected = {
            d.mig_uuid: ((busy[d.gpu_instance_id],) if d.gpu_instance_id in busy else ())
            for d in gpu.mig_devices
        }
        assert {d.mig_uuid: d.pids for d in gpu.mig_devices} == expected
        assert {p.pid: p.gpu_instance_id for p in gpu.processes} == {
            pid: gi for gi, pid in busy.items()
        }
        ref = gpu_ref(gpu)
        assert ref.pids == ()  # every process of a MIG GPU runs in an instance
        assert {(i.uuid, i.pids) for i in ref.instances} == set(expected.items())
