from __future__ import annotations

import pynvml
import pytest

from nvwatch.agent.app import poll_and_render
from nvwatch.agent.config import AgentConfig, ConfigError, ScenarioSpec
from nvwatch.agent.runtime import runtime
from nvwatch.agent.sources.registry import build_sources


def test_simulate_wires_nvml_and_fabric_with_gpu_affinity() -> None:
    config = AgentConfig(sources=("nvml", "infiniband", "host"), simulate="dgx-a100")
    with runtime(config) as effective:
        assert effective.sysfs_root != config.sysfs_root
        exposition = poll_and_render(effective, build_sources(effective), settle=0.2)
    text = exposition.text.decode()
    for source in ("nvml", "infiniband", "host"):
        assert f'nvwatch_agent_source_up{{source="{source}"}} 1.0' in text
    assert 'nvwatch_ib_port_info{device="mlx5_7",link_layer="InfiniBand",nearest_gpus="6,7"' in text
    assert text.count("nvwatch_gpu_up{") == 8
    # leaving the runtime removes the simulated library again: nothing fake lingers
    assert pynvml.nvmlLib is None


def test_without_simulate_nothing_is_faked() -> None:
    config = AgentConfig(sources=("nvml",))
    with runtime(config) as effective:
        exposition = poll_and_render(effective, build_sources(effective), settle=0)
    status = exposition.snapshot.sources["nvml"]
    # this machine has no NVIDIA PCI function: absent, read from the real /sys, and no
    # GPU sample of any kind
    assert status.absent and status.prepared is None
    assert "no NVIDIA GPU on this node" in (status.absent_reason or "")


def test_unknown_scenario_is_bad_input() -> None:
    config = AgentConfig(
        sources=("nvml",), simulate="dgx1-v100", scenarios=(ScenarioSpec("meltdown"),)
    )
    with pytest.raises(ConfigError, match="unknown scenario 'meltdown'"), runtime(config):
        pass
