"""The catalogue is the map: every path in it exists, and every entry shows up somewhere.

These tests read the catalogue against the sample classes and against real renders of the
simulated profiles; they do not compare the table with a copy of itself.
"""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.catalogue import BY_NAME, CATALOGUE, Field, MetricSpec, Scope
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.gpu import NvLinkTotals
from nvwatch.agent.exposition.render import AgentState
from nvwatch.agent.poller import Snapshot, SourceStatus
from nvwatch.agent.sources.attribution.model import Allocation
from nvwatch.agent.sources.host import HostSample
from nvwatch.agent.sources.infiniband import InfinibandDevice, InfinibandPort
from nvwatch.agent.sources.nvml.samples import (
    GpuSample,
    MigDeviceSample,
    NvLinkSample,
    ProcessSample,
)
from nvwatch.sim.profiles import PROFILES
from nvwatch.sim.series_budget import render_profile

# Every class an entry of each scope may be rendered from.
_CLASSES: dict[Scope, tuple[type, ...]] = {
    Scope.GPU: (GpuSample,),
    Scope.PROCESS: (ProcessSample,),
    Scope.ALLOCATION: (Allocation,),
    Scope.NVLINK: (NvLinkSample, NvLinkTotals),
    Scope.MIG: (MigDeviceSample,),
    Scope.IB_DEVICE: (InfinibandDevice,),
    Scope.IB_PORT: (InfinibandPort,),
    Scope.HOST: (HostSample,),
    Scope.SOURCE: (SourceStatus,),
    Scope.AGENT: (AgentState, Snapshot),
}


def _fields(spec: MetricSpec) -> list[Field]:
    found: list[Field] = []
    for series in spec.series:
        found += [
            x for x in (series.value, *series.labels, series.present_if) if isinstance(x, Field)
        ]
    return found


def _has_path(cls: type, path: str) -> bool:
    """Whether `cls` has the dotted attribute `path`, following dataclass field types."""
    head, _, rest = path.partition(".")
    names = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    if head not in names and not isinstance(getattr(cls, head, None), property):
        return False
    if not rest:
        return True
    nested = names[head].type
    resolved = getattr(__import__(cls.__module__, fromlist=["_"]), str(nested), None)
    return isinstance(resolved, type) and _has_path(resolved, rest)


@pytest.mark.parametrize("spec", CATALOGUE, ids=lambda s: s.name)
def test_every_field_exists_on_the_sample_class(spec: MetricSpec) -> None:
    classes = (AgentState,) if spec.scope is Scope.AGENT else _CLASSES[spec.scope]
    for field in _fields(spec):
        for cls in classes:
            assert _has_path(cls, field.path), f"{spec.name}: {cls.__name__} has no {field}"


@pytest.mark.parametrize("spec", CATALOGUE, ids=lambda s: s.name)
def test_series_fill_exactly_the_family_labels(spec: MetricSpec) -> None:
    assert spec.origin.strip(), f"{spec.name}: where does the value come from?"
    for series in spec.series:
        filled = len(series.labels) + (1 if series.each else 0)
        assert filled == len(spec.own_labels), spec.name


def test_a_misspelt_name_fails_even_when_the_value_is_absent() -> None:
    out = FamilySet()
    # hardware without the value (None) must not hide the typo until a GPU that has it
    with pytest.raises(KeyError):
        out.add("nvwatch_gpu_temprature_celsius", {"gpu": "0", "uuid": "x"}, None)
    with pytest.raises(ValueError, match="labels"):
        out.add("nvwatch_gpu_fan_speed_ratio", {"gpu": "0"}, None)


@pytest.fixture(scope="module")
def exported_families(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Names of the families with at least one sample, over every simulated profile."""
    names: set[str] = set()
    for profile in sorted(PROFILES):
        text = render_profile(profile, tmp_path_factory.mktemp(profile), with_host=True)
        for family in text_string_to_metric_families(text):
            if family.samples:
                names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


@pytest.mark.parametrize("spec", CATALOGUE, ids=lambda s: s.name)
def test_every_entry_is_exported_or_says_when_it_is_absent(
    spec: MetricSpec, exported_families: set[str]
) -> None:
    if spec.name in exported_families:
        return
    assert spec.when, (
        f"{spec.name} appears in no simulated profile's exposition and its catalogue entry "
        "does not say when it is absent"
    )


def test_every_exported_family_is_in_the_catalogue(exported_families: set[str]) -> None:
    assert exported_families <= set(BY_NAME)
