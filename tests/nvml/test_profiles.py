"""Every hardware profile: which families are present and absent, and their units."""

from __future__ import annotations

from collections import Counter

import pytest

from nvwatch.agent.catalogue import BY_NAME
from nvwatch.agent.sources.nvml import NvmlSample
from nvwatch.sim.profiles import PROFILES, Profile
from tests.nvml.conftest import NodeFactory
from tests.nvml.helpers import Series, exposition, poll, select, value

Output = tuple[Profile, NvmlSample, list[Series]]

PER_GPU = {name for name, spec in BY_NAME.items() if spec.labels[:2] == ("gpu", "uuid")}


@pytest.fixture(params=sorted(PROFILES))
def profile_output(request: pytest.FixtureRequest, node: NodeFactory) -> Output:
    profile = PROFILES[str(request.param)]
    n = node(profile.name)
    samples = poll(n.source(), n.clock, 3)
    return profile, samples[-1], exposition(samples[-1])


def test_every_gpu_up_with_identity(profile_output: Output) -> None:
    profile, sample, series = profile_output
    assert len(sample.gpus) == profile.gpu_count
    for index, model in enumerate(profile.gpus):
        assert value(series, "nvwatch_gpu_up", gpu=str(index)) == 1
        (info,) = select(series, "nvwatch_gpu_info", gpu=str(index))
        assert info.labels["name"] == model.name
        assert info.labels["uuid"].startswith("GPU-")
        assert info.labels["driver_version"] == profile.driver_version
        assert info.labels["vbios"] == model.vbios_version
    for s in series:
        if s.name.removesuffix("_total") in PER_GPU or s.name in PER_GPU:
            assert s.labels["gpu"].isdigit() and s.labels["uuid"].startswith("GPU-"), s


def test_optional_families_follow_the_hardware(profile_output: Output) -> None:
    profile, _, series = profile_output
    for index, model in enumerate(profile.gpus):
        gpu = str(index)

        def has(name: str, _gpu: str = gpu, **labels: str) -> bool:
            return bool(select(series, name, gpu=_gpu, **labels))

        assert has("nvwatch_gpu_ecc_errors_total") == model.ecc
        assert has("nvwatch_gpu_fan_speed_ratio") == model.fan
        assert has("nvwatch_gpu_energy_joules_total") == model.energy_counter
        assert has("nvwatch_gpu_temperature_celsius", sensor="memory") == model.memory_temperature
        assert has("nvwatch_gpu_sm_active_ratio") == model.gpm
        assert has("nvwatch_gpu_tensor_active_ratio") == model.gpm
        assert has("nvwatch_gpu_remapped_rows") == model.row_remapping
        assert has("nvwatch_gpu_throttle_seconds_total") == model.violation_counters
        assert has("nvwatch_gpu_temperature_threshold_celsius", threshold="gpu_max") == (
            model.temp_gpu_max_c is not None
        )
        links = len(profile.nvlinks[index])
        assert len(select(series, "nvwatch_nvlink_up", gpu=gpu)) == links
        assert len(select(series, "nvwatch_nvlink_remote_info", gpu=gpu)) == links
        assert len(select(series, "nvwatch_nvlink_transmit_bytes_total", gpu=gpu)) == links
        if links:
            errors = select(series, "nvwatch_nvlink_errors_total", gpu=gpu, link="0")
            expected = {"replay", "recovery", "crc_flit", "crc_data"}
            if model.nvlink_version >= 3:
                expected.add("ecc")
            assert {s.labels["type"] for s in errors} == expected


def test_link_counts_of_the_flagship_profiles(node: NodeFactory) -> None:
    for name, per_gpu in (("dgx-h100", 18), ("dgx-a100", 12), ("inference-t4", 0)):
        n = node(name)
        sample = poll(n.source(), n.clock, 1)[-1]
        assert {len(gpu.nvlinks) for gpu in sample.gpus} == {per_gpu}, name
        n.sources[-1].close()


def test_values_are_in_base_units(profile_output: Output) -> None:
    profile, _, series = profile_output
    for index, model in enumerate(profile.gpus):
        gpu = str(index)
        for name in ("nvwatch_gpu_utilization_ratio", "nvwatch_gpu_memory_utilization_ratio"):
            assert 0.0 <= value(series, name, gpu=gpu) <= 1.0
        total = value(series, "nvwatch_gpu_memory_total_bytes", gpu=gpu)
        assert total == pytest.approx(model.memory_bytes, rel=0.1)
        used = value(series, "nvwatch_gpu_memory_used_bytes", gpu=gpu)
        free = value(series, "nvwatch_gpu_memory_free_bytes", gpu=gpu)
        assert used + free <= total
        assert value(series, "nvwatch_gpu_power_tdp_watts", gpu=gpu) == model.tdp_watts
        limit = value(series, "nvwatch_gpu_power_limit_watts", gpu=gpu)
        assert 0 < value(series, "nvwatch_gpu_power_watts", gpu=gpu) <= limit * 1.05
        assert 10 < value(series, "nvwatch_gpu_temperature_celsius", gpu=gpu, sensor="gpu") < 100
        slowdown = value(
            series, "nvwatch_gpu_temperature_threshold_celsius", gpu=gpu, threshold="slowdown"
        )
        assert slowdown == model.temp_slowdown_c
        max_sm = value(series, "nvwatch_gpu_clock_max_hertz", gpu=gpu, clock="sm")
        assert max_sm == model.max_sm_clock_mhz * 1_000_000
        assert 0 < value(series, "nvwatch_gpu_clock_hertz", gpu=gpu, clock="sm") <= max_sm
        assert value(series, "nvwatch_gpu_pcie_link_generation", gpu=gpu, kind="max") == (
            model.pcie_generation
        )
        assert value(series, "nvwatch_gpu_pcie_link_width", gpu=gpu, kind="max") == (
            model.pcie_width
        )
        reasons = {
            s.labels["reason"] for s in select(series, "nvwatch_gpu_clock_event_active", gpu=gpu)
        }
        assert reasons and reasons <= {
            "idle", "applications_clocks", "sw_power_cap", "hw_slowdown", "sync_boost",
            "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake", "display_clocks",
        }  # fmt: skip
        for s in select(series, "nvwatch_gpu_clock_event_active", gpu=gpu):
            assert s.value in (0.0, 1.0)
        for s in select(series, "nvwatch_nvlink_speed_bytes_per_second", gpu=gpu):
            assert s.value == pytest.approx(model.nvlink_bytes_per_second, rel=0.01)
        if model.fan:
            assert 0 < value(series, "nvwatch_gpu_fan_speed_ratio", gpu=gpu) <= 1.0
        for s in select(series, "nvwatch_gpu_sm_active_ratio", gpu=gpu):
            assert 0 <= s.value <= 1


def test_dgx1_cube_mesh_peers_in_remote_info(node: NodeFactory) -> None:
    for name, doubled in (("dgx1-v100", True), ("dgx1-p100", False)):
        n = node(name)
        series = exposition(poll(n.source(), n.clock, 1)[-1])
        remote = select(series, "nvwatch_nvlink_remote_info", gpu="0")
        assert {s.labels["remote_type"] for s in remote} == {"gpu"}
        peers = Counter(int(s.labels["remote_gpu"]) for s in remote)
        assert peers == ({1: 1, 2: 1, 3: 2, 4: 2} if doubled else {1: 1, 2: 1, 3: 1, 4: 1})
        for s in remote:
            assert s.labels["remote_pci_bus_id"].startswith("00000000:")
        n.sources[-1].close()


def test_nvswitch_systems_point_links_at_switches(node: NodeFactory) -> None:
    n = node("dgx-h100")
    series = exposition(poll(n.source(), n.clock, 1)[-1])
    remote = select(series, "nvwatch_nvlink_remote_info")
    assert len(remote) == 8 * 18
    assert {s.labels["remote_type"] for s in remote} == {"switch"}
    assert {s.labels["remote_gpu"] for s in remote} == {""}


def test_gpu_level_nvlink_detail_aggregates(node: NodeFactory) -> None:
    n = node("dgx-h100")
    clock = n.clock
    per_link = n.source()
    per_gpu = n.source(nvlink_detail="gpu")
    clock.advance(5)
    links = exposition(per_link.collect())
    gpus = exposition(per_gpu.collect())
    up = select(gpus, "nvwatch_nvlink_up")
    assert {s.labels["link"] for s in up} == {"all"} and len(up) == 8
    assert all(s.value == 18 for s in up)
    assert not select(gpus, "nvwatch_nvlink_remote_info")
    summed = sum(s.value for s in select(links, "nvwatch_nvlink_transmit_bytes_total", gpu="0"))
    assert value(gpus, "nvwatch_nvlink_transmit_bytes_total", gpu="0") == summed
    assert value(gpus, "nvwatch_nvlink_speed_bytes_per_second", gpu="0") == pytest.approx(18 * 25e9)


def test_unknown_nvlink_detail_is_refused() -> None:
    from nvwatch.agent.sources.nvml import NvmlSource

    with pytest.raises(ValueError, match="nvlink_detail"):
        NvmlSource(nvlink_detail="lane")
