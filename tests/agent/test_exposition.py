from __future__ import annotations

import gzip

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.catalogue import BY_NAME, CATALOGUE, MetricType
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.render import build_exposition, prepare
from nvwatch.agent.poller import Poller
from tests.agent.fakes import CountingHostSource, host_sample


def test_catalogue_names_follow_conventions() -> None:
    for spec in CATALOGUE:
        assert spec.name.startswith("nvwatch_"), spec.name
        assert spec.help.strip(), spec.name
        assert (spec.type is MetricType.COUNTER) == spec.name.endswith("_total"), spec.name
        if spec.name.startswith(("nvwatch_gpu_", "nvwatch_nvlink_")):
            assert spec.labels[:2] == ("gpu", "uuid"), spec.name
    assert len(BY_NAME) == len(CATALOGUE), "duplicate names in the catalogue"


def test_unit_comes_from_the_name() -> None:
    assert BY_NAME["nvwatch_gpu_energy_joules_total"].unit == "joules"
    assert BY_NAME["nvwatch_gpu_pcie_throughput_bytes_per_second"].unit == "bytes_per_second"
    assert BY_NAME["nvwatch_gpu_up"].unit == ""


def test_family_set_rejects_unknown_names_and_wrong_labels() -> None:
    out = FamilySet()
    with pytest.raises(KeyError):
        out.add("nvwatch_not_in_catalogue", {}, 1)
    with pytest.raises(ValueError, match="labels"):
        out.add("nvwatch_gpu_up", {"gpu": "0"}, 1)
    with pytest.raises(ValueError):
        out.add("nvwatch_host_load1", {}, "not a number")  # type: ignore[arg-type]


def test_none_is_absent_not_zero() -> None:
    out = FamilySet()
    out.add("nvwatch_gpu_fan_speed_ratio", {"gpu": "0", "uuid": "GPU-a"}, None)
    assert out.names() == []


def _snapshot_text() -> str:
    poller = Poller([CountingHostSource()], interval=1, timeout=1, prepare=prepare)
    try:
        snapshot = poller.poll_once()
    finally:
        poller.stop()
    return build_exposition(snapshot).text.decode()


def test_exposition_parses_and_matches_the_catalogue() -> None:
    text = _snapshot_text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # the parser strips _total from counter family names
    for name, family in families.items():
        spec = BY_NAME.get(name) or BY_NAME[name + "_total"]
        assert family.documentation == spec.help
        assert family.type == spec.type.value
    assert families["nvwatch_host_load1"].samples[0].value == 1.0
    assert families["nvwatch_agent_source_up"].samples[0].labels == {"source": "host"}


def test_openmetrics_carries_units_and_eof() -> None:
    poller = Poller([CountingHostSource()], interval=1, timeout=1, prepare=prepare)
    try:
        exposition = build_exposition(poller.poll_once())
    finally:
        poller.stop()
    body = exposition.openmetrics(gzipped=False).decode()
    assert body.endswith("# EOF\n")
    families = {f.name: f for f in parse_om(body)}
    assert families["nvwatch_host_memory_total_bytes"].unit == "bytes"
    assert families["nvwatch_agent_source_errors"].type == "counter"
    assert gzip.decompress(exposition.openmetrics(gzipped=True)).decode() == body
    assert gzip.decompress(exposition.text_gzip) == exposition.text


def test_prepare_refuses_a_sample_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="expected HostSample"):
        prepare("host", {"load1": 3})
    assert "nvwatch_host_load1" in prepare("host", host_sample()).names()


class _Scripted:
    """A source answering one fixed sample."""

    def __init__(self, name: str, sample: object) -> None:
        self.name = name
        self.sample = sample

    def collect(self) -> object:
        return self.sample

    def close(self) -> None:
        pass


def _bad_gpu_samples() -> list[object]:
    from nvwatch.agent.sources.nvml.samples import GpuInfo, GpuSample, NvmlSample

    info = GpuInfo(name="H100", uuid="GPU-x")
    return [
        # a value that is no number: float() fails while the series is made
        NvmlSample(gpus=(GpuSample(0, "GPU-x", info, up=True, power_watts="300 W"),)),  # type: ignore[arg-type]
        # a label that is no text: escaping fails while its prefix is made
        NvmlSample(gpus=(GpuSample(0, None, info, up=True, power_watts=300.0),)),  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize("sample", _bad_gpu_samples(), ids=["value", "label"])
def test_a_render_error_fails_only_that_source(sample: object) -> None:
    poller = Poller(
        [CountingHostSource(), _Scripted("nvml", sample)], interval=1, timeout=1, prepare=prepare
    )
    try:
        snapshot = poller.poll_once()
    finally:
        poller.stop()
    assert not snapshot.sources["nvml"].up and snapshot.sources["nvml"].error
    exposition = build_exposition(snapshot)
    text = exposition.text.decode()
    assert "nvwatch_host_load1 1.0" in text and "nvwatch_gpu_" not in text
    assert 'nvwatch_agent_source_up{source="nvml"} 0.0' in text
    assert exposition.openmetrics(gzipped=False).endswith(b"# EOF\n")
