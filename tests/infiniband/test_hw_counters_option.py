"""--ib-hw-counters (NVWATCH_IB_HW_COUNTERS): from the command line to the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from nvwatch.agent.cli.options import build_config, source_options
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.agent.sources.registry import build_sources

from .sysfs_tree import add_device, healthy_port


def _parsed(args: list[str], env: dict[str, str] | None = None) -> AgentConfig:
    seen: list[AgentConfig] = []

    @click.command()
    @source_options
    def command(**params: Any) -> None:
        seen.append(build_config(params))

    result = CliRunner().invoke(command, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return seen[0]


def test_default_is_the_loss_and_congestion_set() -> None:
    assert _parsed([]).ib_hw_counters == "default"


def test_flag_and_environment() -> None:
    assert _parsed(["--ib-hw-counters", "all"]).ib_hw_counters == "all"
    assert _parsed([], env={"NVWATCH_IB_HW_COUNTERS": "all"}).ib_hw_counters == "all"


@pytest.mark.parametrize(
    ("choice", "expected"), [("default", set()), ("all", {"rx_read_requests"})]
)
def test_registry_passes_the_choice(tmp_path: Path, choice: str, expected: set[str]) -> None:
    extra = {"hw_counters/rx_read_requests": "9\n"}
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**extra)})
    config = AgentConfig(sources=("infiniband",), sysfs_root=tmp_path, ib_hw_counters=choice)
    (source,) = build_sources(config)
    assert isinstance(source, InfinibandSource)
    (device,) = source.collect().devices
    assert set(device.ports[0].hw_counters) & {"rx_read_requests"} == expected
