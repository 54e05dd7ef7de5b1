"""The built-in sources' declarations (agent/sources/declaration.py) hold together: every
scope has one source, every sample type and renderer they name exists, each factory
builds the source it declares, and reading them loads none of the sources."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from nvwatch.agent.catalogue import CATALOGUE, IDENTITY, SOURCE_OF, Scope
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.sources.attribution.source import AttributionSource
from nvwatch.agent.sources.declaration import (
    SourceDeclaration,
    declarations,
    default_sources,
    load,
    selectable_sources,
)
from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.agent.sources.nvml.source import NvmlSource
from nvwatch.agent.sources.registry import build_sources

BUILT_IN = declarations()
NAMES = [d.name for d in BUILT_IN]


def test_every_scope_has_one_source() -> None:
    declared = [scope for d in BUILT_IN for scope in d.scopes]
    assert len(declared) == len(set(declared)), "a scope declared by two sources"
    assert all(isinstance(scope, Scope) for scope in declared)
    # the poller's own scopes are the only ones no source declares
    assert set(Scope) - set(declared) == {Scope.SOURCE, Scope.AGENT}
    assert set(SOURCE_OF) == set(Scope) == set(IDENTITY)
    assert {SOURCE_OF[spec.scope] for spec in CATALOGUE} == {*NAMES, "agent"}
    for declaration in BUILT_IN:
        assert all(SOURCE_OF[scope] == declaration.name for scope in declaration.scopes)
        # a built-in's families and identities are the catalogue's, not its own
        assert declaration.metrics == () and dict(declaration.identity) == {}


@pytest.mark.parametrize("declaration", BUILT_IN, ids=NAMES)
def test_its_sample_type_and_renderer_resolve(declaration: SourceDeclaration) -> None:
    assert declaration.sample is not None and declaration.renderer is not None
    sample = load(declaration.sample)
    assert inspect.isclass(sample)
    # render(sample, out): the declared sample into a FamilySet
    taken = list(inspect.signature(load(declaration.renderer)).parameters.values())
    assert [p.annotation for p in taken] == [sample.__name__, "FamilySet"]


def test_what_sources_selects_and_polls_by_default() -> None:
    assert selectable_sources() == ("nvml", "infiniband", "host", "scheduler")
    assert default_sources() == ("nvml", "infiniband", "host") == AgentConfig().sources
    not_polled = [d.name for d in BUILT_IN if d.factory is None]
    assert not_polled == ["bmc"]  # read at scrape time by /probe


def test_each_factory_builds_the_source_it_declares() -> None:
    def clock() -> float:
        return 0.0

    config = AgentConfig(
        sources=("infiniband", "scheduler", "nvml", "host"), attribution=("slurm",)
    )
    sources = build_sources(config, clock=clock)
    try:
        # --sources' order, then attribution, which --attribution turns on
        assert [s.name for s in sources] == [*config.sources, "attribution"]
        infiniband, _, nvml, _, attribution = sources
        assert isinstance(nvml, NvmlSource) and isinstance(infiniband, InfinibandSource)
        assert isinstance(attribution, AttributionSource)
        # built in declaration order: NVML's bus ids reach infiniband, the clock reaches
        # NVML, and one refresher labels NVML's processes and serves the allocations
        assert infiniband._gpu_bus_ids == nvml.gpu_bus_ids
        assert nvml._clock is clock
        assert nvml._attribution is attribution.refresher
    finally:
        for source in sources:
            source.close()


def test_without_nvml_infiniband_gets_no_bus_ids() -> None:
    (infiniband,) = build_sources(AgentConfig(sources=("infiniband",)))
    assert isinstance(infiniband, InfinibandSource) and infiniband._gpu_bus_ids is None


# what a declaration must not load: the sources' code and the libraries behind it
NOT_LOADED = (
    "pynvml",
    "psutil",
    "grpc",
    "pyipmi",
    "nvwatch.sim",
    "nvwatch.agent.exposition",
    "nvwatch.agent.sources.nvml.source",
    "nvwatch.agent.sources.host",
    "nvwatch.agent.sources.infiniband",
    "nvwatch.agent.sources.scheduler.source",
    "nvwatch.agent.sources.attribution.refresher",
    "nvwatch.agent.sources.bmc.ipmi",
)
_INSIDE = tuple(f"{name}." for name in NOT_LOADED)


def test_reading_the_declarations_loads_no_source() -> None:
    code = (
        "import sys\n"
        "from nvwatch.agent.config import AgentConfig, parse_sources\n"
        "from nvwatch.agent.catalogue import SOURCE_OF\n"
        "AgentConfig(), parse_sources('nvml,scheduler'), dict(SOURCE_OF)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    modules = done.stdout.split()
    assert "nvwatch.agent.sources.nvml.declaration" in modules
    assert [m for m in modules if m in NOT_LOADED or m.startswith(_INSIDE)] == []
