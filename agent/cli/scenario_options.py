"""The simulator's --scenario and --onset: their help, read from the simulator only when
shown (defining the options loads no simulator), and what --onset does to the scenarios."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import click

from nvwatch.agent import simulation
from nvwatch.agent.config import ConfigError, ScenarioSpec
from nvwatch.common.durations import DurationError, parse_duration, prometheus_duration


class ScenarioOption(click.Option):
    """--scenario, whose help lists the simulator's scenarios: read when help is shown,
    so defining the option (every command that takes it) loads no simulator."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = f"{SCENARIO_HELP} Scenarios: {simulation.scenario_names()}."
        return super().get_help_record(ctx)


class OnsetOption(click.Option):
    """--onset, whose default (each scenario's own onset) is read from the simulator when
    help is shown, like --scenario's list."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        by_onset: dict[float, list[str]] = {}
        for name, seconds in simulation.default_onsets().items():
            by_onset.setdefault(seconds, []).append(name)
        # the most common onset alone, then the scenarios that begin otherwise
        common, *others = sorted(by_onset.items(), key=lambda item: -len(item[1]))
        self.show_default = "; ".join(
            [_onset_text(common[0])]
            + [f"{_onset_text(seconds)} for {', '.join(names)}" for seconds, names in others]
        )
        return super().get_help_record(ctx)


def _onset_text(seconds: float) -> str:
    return prometheus_duration(seconds) if seconds else "0"


SCENARIO_HELP = (
    "Simulation scenario on one GPU index or HCA (@TARGET), begun and repaired at "
    "simulated times since start (from=, until=); repeatable, or several space-separated."
)


def parse_onset(text: str) -> float:
    """--onset: 0 (at once) or a duration."""
    if text.strip() in ("0", "0s"):
        return 0.0
    try:
        return parse_duration(text, "onset")
    except DurationError as exc:
        raise ConfigError(str(exc)) from exc


def with_onset(specs: Sequence[ScenarioSpec], onset: float | None) -> tuple[ScenarioSpec, ...]:
    """`specs` with `onset` as the from= of every fault that gives none (workloads set
    what the GPUs run from the start; they take no from=)."""
    if onset is None:
        return tuple(specs)
    workloads = simulation.workloads()
    return tuple(
        dataclasses.replace(s, from_s=onset) if s.from_s is None and s.name not in workloads else s
        for s in specs
    )
