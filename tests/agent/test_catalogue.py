"""The catalogue is the map: every path in it exists, and every entry shows up somewhere.

These tests read the catalogue against the sample classes and against real renders of the
simulated profiles; they do not compare the table with a copy of itself.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.catalogue import BY_NAME, CATALOGUE, Field, MetricSpec, MetricType, Scope
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.gpu import NvLinkTotals
from nvwatch.agent.exposition.render import AgentState
from nvwatch.agent.poller import Snapshot, SourceStatus
from nvwatch.agent.sources.attribution.model import Allocation
from nvwatch.agent.sources.bmc.interpret import BmcProbe, BmcSensor
from nvwatch.agent.sources.host import HostSample
from nvwatch.agent.sources.infiniband import InfinibandDevice, InfinibandPort
from nvwatch.agent.sources.nvml.samples import (
    GpuSample,
    MigDeviceSample,
    NvLinkSample,
    ProcessSample,
)
from nvwatch.agent.sources.scheduler.model import (
    AccountShare,
    AccountWait,
    DemandSample,
    PartitionSample,
    UserDemand,
)
from nvwatch.sim.profiles import PROFILES
from nvwatch.sim.series_budget import MIG_LAYOUTS, render_profile

REPO = Path(__file__).resolve().parents[2]

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
    Scope.BMC: (BmcProbe,),
    Scope.BMC_SENSOR: (BmcSensor,),
    Scope.SCHEDULER_PARTITION: (PartitionSample,),
    Scope.SCHEDULER_DEMAND: (DemandSample,),
    Scope.SCHEDULER_USER: (UserDemand,),
    Scope.SCHEDULER_ACCOUNT: (AccountShare,),
    Scope.SCHEDULER_ACCOUNT_WAIT: (AccountWait,),
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
    # a histogram's mapping fills one more: each series' sample (a bucket's le, _count, _sum)
    sample_label = 1 if spec.type is MetricType.HISTOGRAM else 0
    for series in spec.series:
        filled = len(series.labels) + (1 if series.each else 0)
        assert filled == len(spec.own_labels) + sample_label, spec.name


def test_a_misspelt_name_fails_even_when_the_value_is_absent() -> None:
    out = FamilySet()
    # hardware without the value (None) must not hide the typo until a GPU that has it
    with pytest.raises(KeyError):
        out.add("nvwatch_gpu_temprature_celsius", {"gpu": "0", "uuid": "x"}, None)
    with pytest.raises(ValueError, match="labels"):
        out.add("nvwatch_gpu_fan_speed_ratio", {"gpu": "0"}, None)


@pytest.fixture(scope="module")
def exported_families(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Metric]:
    """The families with at least one sample, by catalogue name, over every simulated
    profile (the host source included) and the MIG boards split seven ways."""
    renders = [
        render_profile(profile, tmp_path_factory.mktemp(profile), with_host=True)
        for profile in sorted(PROFILES)
    ]
    renders += [
        render_profile(profile, tmp_path_factory.mktemp(f"{profile}-mig"), mig=layout)
        for profile, layout in sorted(MIG_LAYOUTS.items())
    ]
    found: dict[str, Metric] = {}
    for text in renders:
        for family in text_string_to_metric_families(text):
            if family.samples:
                found.setdefault(
                    family.name + ("_total" if family.type == "counter" else ""), family
                )
    return found


# What no healthy simulated node exports, the condition that brings it, and the test
# that renders it under that condition.
NOT_IN_A_HEALTHY_RENDER = {
    "nvwatch_gpu_xid_errors_total": "a GPU that raised an XID (tests/agent/test_xid_history.py)",
    "nvwatch_gpu_allocation_info": "a job on a GPU (tests/attribution/test_agent.py)",
    "nvwatch_ib_port_reading_saturated": "a counter pinned at its maximum "
    "(tests/infiniband/test_render.py)",
    "nvwatch_agent_simulated": "serve --simulate (tests/agent/test_simulated_marker.py)",
    "nvwatch_agent_http_requests_refused_total": "the HTTP server "
    "(tests/agent/test_server_metrics.py)",
    "nvwatch_agent_http_connections_open": "the HTTP server (tests/agent/test_server_metrics.py)",
    "nvwatch_agent_http_connections_limit": "the HTTP server (tests/agent/test_server_metrics.py)",
    # one agent per cluster reads Slurm: a real slurmctld's queue renders them
    **{
        spec.name: "the scheduler source (tests/slurm/test_scheduler_source.py)"
        for spec in CATALOGUE
        if spec.source == "scheduler"
    },
    # BMC series come from /probe, not /metrics: a real BMC's probe renders them
    **{
        name: "a probe of a BMC (tests/bmc/test_exposition.py)"
        for name in (
            "nvwatch_bmc_up",
            "nvwatch_bmc_collector_up",
            "nvwatch_bmc_read_duration_seconds",
            "nvwatch_bmc_power_watts",
            "nvwatch_bmc_temperature_celsius",
            "nvwatch_bmc_fan_speed_rpm",
            "nvwatch_bmc_power_supply_present",
            "nvwatch_bmc_power_supply_failed",
            "nvwatch_bmc_sensor_state",
        )
    },
}


def test_the_renders_leave_out_only_what_needs_another_condition(
    exported_families: dict[str, Metric],
) -> None:
    """A family the renderer stops writing fails here, and so does one listed above
    that a healthy node now exports."""
    absent = {spec.name for spec in CATALOGUE} - set(exported_families)
    assert absent == set(NOT_IN_A_HEALTHY_RENDER)


@pytest.mark.parametrize("name", sorted(NOT_IN_A_HEALTHY_RENDER))
def test_what_a_healthy_node_leaves_out_says_when_and_is_rendered_elsewhere(name: str) -> None:
    assert BY_NAME[name].when, f"{name}: its entry does not say when it is absent"
    found = re.search(r"\((tests/\S+\.py)\)", NOT_IN_A_HEALTHY_RENDER[name])
    assert found is not None
    assert name in (REPO / found.group(1)).read_text(), f"{found.group(1)} never renders {name}"


def test_every_exported_family_is_written_as_the_catalogue_declares_it(
    exported_families: dict[str, Metric],
) -> None:
    """The exposition as a scraper parses it: each family's TYPE and HELP are its
    entry's, and every sample carries exactly the entry's labels."""
    for name, family in exported_families.items():
        spec = BY_NAME[name]
        assert (family.type, family.documentation) == (spec.type.value, spec.help), name
        for sample in family.samples:
            assert sorted(sample.labels) == sorted(spec.labels), (name, sample.labels)
