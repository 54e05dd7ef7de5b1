"""A source declared in this module alone is a source like the built-in ones.

Registered for a test and removed after it (agent/sources/declaration.py), it is listed in
--sources' help and accepted by its check, built by the registry, polled by the real
poller, rendered by its own renderer into /metrics, and its families are in the
catalogue's lookups with their own scope: nothing outside this module names it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from nvwatch.agent.app import poll_and_render
from nvwatch.agent.catalogue import (
    SOURCE_OF,
    Field,
    MetricSpec,
    MetricType,
    Scope,
    Series,
    every_spec,
    of_scope,
    spec,
)
from nvwatch.agent.cli import cli
from nvwatch.agent.cli.options import build_config
from nvwatch.agent.config import AgentConfig, ConfigError, parse_sources
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import compiled_families, emit_all
from nvwatch.agent.sources.declaration import (
    BuildContext,
    SourceDeclaration,
    declarations,
    register,
    unregister,
)
from nvwatch.agent.sources.registry import build_sources

WIDGET = "toy_widget"  # the toy's own scope: one series per widget
TEMPERATURE = "nvwatch_toy_widget_temperature_celsius"
BUILT_IN_DEFAULT = "nvml,infiniband,host"


@dataclass(frozen=True)
class Widget:
    name: str
    temperature_celsius: float | None  # None: this widget has no sensor (absent, not 0)


@dataclass(frozen=True)
class ToySample:
    widgets: tuple[Widget, ...]


class ToySource:
    name = "toy"

    def __init__(self) -> None:
        self.polls = 0

    def collect(self) -> ToySample:
        self.polls += 1
        return ToySample((Widget("a", 41.5), Widget("b", None)))

    def close(self) -> None:
        pass


def render(sample: ToySample, out: FamilySet) -> None:
    emit_all(compiled_families(of_scope(WIDGET)), [((w.name,), w) for w in sample.widgets], out)


def build(config: AgentConfig, context: BuildContext) -> ToySource:
    return ToySource()


TOY = SourceDeclaration(
    name="toy",
    scopes=(WIDGET,),
    factory=build,
    sample=f"{__name__}:ToySample",
    renderer=f"{__name__}:render",
    note="a test's widgets",
    identity={WIDGET: ("widget",)},
    metrics=(
        MetricSpec(
            TEMPERATURE,
            MetricType.GAUGE,
            "Temperature of a toy widget.",
            WIDGET,
            "ToySource.collect",
            (Series(Field("temperature_celsius")),),
        ),
    ),
)


@pytest.fixture
def toy() -> Iterator[SourceDeclaration]:
    register(TOY)
    try:
        yield TOY
    finally:
        unregister(TOY.name)


def _help(command: str) -> str:
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


@pytest.mark.usefixtures("toy")
def test_sources_lists_and_accepts_it() -> None:
    shown = _help("dump")
    assert "of nvml, infiniband, host, scheduler, toy (scheduler: " in shown
    assert "(toy: a test's widgets)." in shown
    assert f"default: {BUILT_IN_DEFAULT}]" in shown  # not on by default: not declared so
    assert parse_sources("host,toy") == ("host", "toy")
    assert build_config({"sources": "toy"}).sources == ("toy",)


@pytest.mark.usefixtures("toy")
def test_the_real_poller_polls_it_and_its_renderer_fills_metrics() -> None:
    config = AgentConfig(sources=("toy", "host"))
    sources = build_sources(config)
    # config order, although the toy is declared after host
    assert [s.name for s in sources] == ["toy", "host"]
    exposition = poll_and_render(config, sources, settle=0)
    status = exposition.snapshot.sources["toy"]
    assert status.up and isinstance(status.prepared, FamilySet)
    assert status.prepared.names() == [TEMPERATURE]
    text = exposition.text.decode()
    assert f"# HELP {TEMPERATURE} Temperature of a toy widget.\n" in text
    assert f'{TEMPERATURE}{{widget="a"}} 41.5\n' in text
    assert 'widget="b"' not in text
    assert 'nvwatch_agent_source_up{source="toy"} 1.0' in text
    # the sources' families in the sources' order
    assert text.index(TEMPERATURE) < text.index("nvwatch_host_")


@pytest.mark.usefixtures("toy")
def test_dump_serves_it_from_the_command_line() -> None:
    result = CliRunner().invoke(cli, ["dump", "--sources", "toy", "--settle", "0"])
    assert result.exit_code == 0, result.output
    assert f'{TEMPERATURE}{{widget="a"}} 41.5' in result.output


@pytest.mark.usefixtures("toy")
def test_the_catalogue_knows_its_families_and_scope() -> None:
    (family,) = TOY.metrics
    assert spec(TEMPERATURE) is family
    assert of_scope(WIDGET) == (family,)
    assert family in every_spec()
    assert family.labels == ("widget",)
    assert family.source == "toy" and SOURCE_OF[WIDGET] == "toy"
    # the built-in scopes keep their sources
    assert SOURCE_OF[Scope.HOST] == "host"


def test_removing_it_leaves_nothing_behind() -> None:
    register(TOY)
    unregister(TOY.name)
    assert "toy" not in [d.name for d in declarations()]
    with pytest.raises(ConfigError, match="unknown source toy: choose from nvml, "):
        parse_sources("toy")
    with pytest.raises(KeyError):
        spec(TEMPERATURE)
    assert WIDGET not in SOURCE_OF
    assert "toy" not in _help("dump")


def test_declared_on_by_default_it_is_polled_unless_told() -> None:
    register(dataclasses.replace(TOY, default=True))
    try:
        assert AgentConfig().sources == (*BUILT_IN_DEFAULT.split(","), "toy")
        assert f"default: {BUILT_IN_DEFAULT},toy]" in _help("serve")
    finally:
        unregister(TOY.name)
    assert AgentConfig().sources == tuple(BUILT_IN_DEFAULT.split(","))


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"name": "host"}, "source 'host' is declared already"),
        ({"name": "agent"}, "source 'agent' is declared already"),
        ({"scopes": (Scope.GPU,)}, "scope 'gpu' is another source's"),
        ({"identity": {}}, "scope 'toy_widget' has no identity labels"),
        (
            {"metrics": (dataclasses.replace(TOY.metrics[0], name="nvwatch_gpu_up"),)},
            "nvwatch_gpu_up: the catalogue has a family of that name",
        ),
        (
            {"metrics": (dataclasses.replace(TOY.metrics[0], scope=Scope.HOST),)},
            "scope 'host' is not 'toy''s",
        ),
    ],
)
def test_a_clash_is_refused_and_changes_nothing(change: dict[str, object], refusal: str) -> None:
    before = declarations()
    with pytest.raises(ValueError) as refused:
        register(dataclasses.replace(TOY, **change))  # type: ignore[arg-type]
    assert refusal in str(refused.value)
    assert declarations() == before
