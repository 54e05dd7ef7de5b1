"""Every option's default lives in one place: AgentConfig's field for the agent's options
(the decorators show it as flag text, build_config adds none of its own), the decorator
for an option of one command (dump's --format and --settle).

For serve, dump, doctor and topology, each option's default as --help shows it is given
back as a flag, and the command must then do exactly what it does without the option:
a second copy of a default (a fallback in build_config, a decorator default, a help
text) that disagrees with the first fails here. And a command given no option uses
AgentConfig() itself, so a decorator cannot agree with its help but not the dataclass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import click
import pytest
from click.testing import CliRunner

import nvwatch.agent.cli as cli_module
import nvwatch.agent.cli.doctor_command as doctor_module
import nvwatch.agent.topology as topology_module
from nvwatch.agent import logs, simulation
from nvwatch.agent.cli import cli
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.doctor import Finding
from nvwatch.agent.sources.nvml.declaration import kmsg_path
from nvwatch.common.durations import parse_duration

COMMANDS = ("serve", "dump", "doctor", "topology")
# the AgentConfig field of an option, where its name differs
FIELD = {"scenario": "scenarios", "listen": "listen_host"}


def _command(name: str) -> click.Command:
    with click.Context(cli) as ctx:
        command = cli.get_command(ctx, name)
    assert command is not None
    return command


def _shown_default(command: click.Command, option: click.Option) -> str | None:
    """The default as `nvwatch COMMAND --help` prints it, None where it prints none."""
    with click.Context(command, info_name=command.name) as ctx:
        record = option.get_help_record(ctx)
    assert record is not None
    found = re.search(r"default: (.*)\]$", " ".join(record[1].split()))
    return None if found is None else found.group(1)


def _normalized(config: AgentConfig) -> AgentConfig:
    """`config` as the command acts on it: the kernel log the sources read (None: one
    that depends on --simulate) and the simulated time each scenario begins at."""
    from nvwatch.sim.node.scenarios import onset

    scenarios = tuple(
        dataclasses.replace(s, from_s=onset(s.name) if s.from_s is None else s.from_s)
        for s in config.scenarios
    )
    return dataclasses.replace(config, kmsg_path=kmsg_path(config), scenarios=scenarios)


@pytest.fixture
def what_it_does(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Runs `nvwatch COMMAND ARGS` with nothing behind the command: what it hands on."""
    for name in [n for n in os.environ if n.startswith("NVWATCH_")]:
        monkeypatch.delenv(name)
    seen: dict[str, Any] = {}

    @contextlib.contextmanager
    def runtime(config: AgentConfig) -> Iterator[AgentConfig]:
        seen["config"] = config
        yield config

    def poll_and_render(config: AgentConfig, sources: object, settle: float) -> Any:
        seen["settle"] = settle
        snapshot = SimpleNamespace(sources={})
        return SimpleNamespace(
            text=b"prometheus\n", openmetrics=lambda gzipped: b"openmetrics\n", snapshot=snapshot
        )

    for module in (cli_module, doctor_module):  # doctor's command lives in a module of its own
        monkeypatch.setattr(module, "runtime", runtime)
        monkeypatch.setattr(module, "build_sources", lambda config: [])
        monkeypatch.setattr(module, "poll_and_render", poll_and_render)
    monkeypatch.setattr(cli_module, "serve", lambda config, sources, stop, web, probe, listener: 0)
    monkeypatch.setattr(cli_module, "bind", lambda config: None)  # no socket for a default
    no_kmsg = Finding("xid-history", "up", "")
    monkeypatch.setattr(doctor_module, "_xid_history", lambda config: no_kmsg)
    monkeypatch.setattr(logs, "configure", lambda log_format, **quiet: None)
    monkeypatch.setattr(topology_module, "build_topology", lambda root, hcas: None)
    monkeypatch.setattr(topology_module, "format_matrix", lambda topology: "matrix\n")

    def run(command: str, args: list[str]) -> dict[str, Any]:
        seen.clear()
        result = CliRunner().invoke(cli, [command, *args])
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            result.exception
        )
        assert "config" in seen, result.output
        return {
            **seen,
            "config": _normalized(seen["config"]),
            "output": result.output,
            "exit_code": result.exit_code,
        }

    return run


@pytest.mark.parametrize("name", COMMANDS)
def test_each_default_in_help_is_what_the_command_uses(name: str, what_it_does: Any) -> None:
    command = _command(name)
    without = what_it_does(name, [])
    assert without["config"] == _normalized(AgentConfig())
    checked = []
    for option in command.params:
        if not isinstance(option, click.Option) or not option.expose_value:
            continue  # --config (its values come from the file) and --help
        shown = _shown_default(command, option)
        if shown is None:
            # no default shown: not given, the option is off
            field = FIELD.get(option.name or "", option.name or "")
            assert getattr(without["config"], field, None) in (None, ()), option.name
            continue
        # "(/dev/kmsg; with --simulate, ...)": the value, then what else it depends on
        value = shown.strip("()").split(";")[0]
        assert what_it_does(name, [option.opts[0], value]) == without, option.name
        checked.append(option.name)
    assert {"sysfs_root", "onset", "log_format"} <= set(checked)  # the walk saw them


def test_the_onset_in_help_is_when_each_scenario_begins(what_it_does: Any) -> None:
    """--onset's default names each scenario's onset; given as a flag, it changes nothing."""
    command = _command("dump")
    (option,) = [p for p in command.params if p.name == "onset"]
    shown = _shown_default(command, option)
    assert shown is not None
    common, *others = shown.strip("()").split("; ")
    told = {name: common for name in simulation.default_onsets()}
    for part in others:
        value, _, names = part.partition(" for ")
        told.update(dict.fromkeys(names.split(", "), value))
    assert set(told) == set(simulation.default_onsets())
    for scenario, value in told.items():
        without = what_it_does("dump", ["--scenario", scenario])
        given = what_it_does("dump", ["--scenario", scenario, "--onset", value])
        assert given == without, scenario
        seconds = 0.0 if value == "0" else parse_duration(value)
        assert without["config"].scenarios[0].from_s == seconds, scenario
