"""Fuzz the scenario parsers: ConfigError (or DurationError) or a scenario, nothing else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nvwatch.agent.config import CONFIG_ERRORS, parse_scenario, split_scenarios

from .strategies import FUZZ, near

SCENARIOS = near(["idle", "ecc-dbe@2", "ib-congestion@mlx5_1", "ecc-dbe@2,from=30s,until=5m"])


@FUZZ
@given(SCENARIOS)
def test_parse_scenario(text: str) -> None:
    try:
        spec = parse_scenario(text)
    except CONFIG_ERRORS:
        return
    assert spec.name


@FUZZ
@given(SCENARIOS | st.lists(SCENARIOS, max_size=3))
def test_split_scenarios(value: str | list[str]) -> None:
    assert all(split_scenarios(value))
