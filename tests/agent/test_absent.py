"""Absent is not down: the poller, the self-metrics, the landing page and `nvwatch doctor`.

The acceptance cases serve simulated nodes exactly as `nvwatch serve --simulate PROFILE`
does (the default sources, built by the registry from the node's sysfs tree) and read
what a scrape and an operator would read.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.app import Agent, make_server
from nvwatch.agent.cli import cli
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.exposition.render import build_exposition, prepare
from nvwatch.agent.poller import Poller
from nvwatch.agent.runtime import runtime
from nvwatch.agent.sources import SourceAbsent, SourceUnavailable
from nvwatch.agent.sources.presence import scan_pci
from nvwatch.agent.sources.registry import build_sources

DEFAULT_SOURCES = ("nvml", "infiniband", "host")
NO_HCA = "no InfiniBand or RoCE HCA on this node"


class SwitchingSource:
    """Absent until told otherwise; then down with a reason."""

    name = "infiniband"

    def __init__(self) -> None:
        self.failure: Exception = SourceAbsent(f"{NO_HCA} (no PCI function with vendor 0x15b3)")

    def collect(self) -> object:
        raise self.failure

    def close(self) -> None:
        pass


def _values(text: str, name: str) -> dict[str, float]:
    """{source label: value} of one agent family."""
    return {
        s.labels["source"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_absent_is_up_counts_no_error_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    source = SwitchingSource()
    poller = Poller([source], interval=1.0, timeout=2.0, prepare=prepare)
    try:
        with caplog.at_level(logging.INFO, logger="nvwatch.agent.poller"):
            for _ in range(3):
                snapshot = poller.poll_once()
        status = snapshot.sources["infiniband"]
        assert (status.up, status.absent, status.state) == (True, True, "absent")
        assert status.error is None and status.errors_total == 0 and status.prepared is None
        assert status.absent_reason == f"{NO_HCA} (no PCI function with vendor 0x15b3)"
        logged = [
            (r.levelno, r.getMessage()) for r in caplog.records if r.name == "nvwatch.agent.poller"
        ]
        assert logged == [(logging.INFO, f"source infiniband is absent: {status.absent_reason}")]
        text = build_exposition(snapshot).text.decode()
        assert _values(text, "nvwatch_agent_source_up") == {"infiniband": 1.0}
        assert _values(text, "nvwatch_agent_source_absent") == {"infiniband": 1.0}
        assert _values(text, "nvwatch_agent_source_errors_total") == {"infiniband": 0.0}

        # the same source going down afterwards is counted, logged as a warning, and pages
        source.failure = SourceUnavailable("InfiniBand devices gone: mlx5_0")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="nvwatch.agent.poller"):
            status = poller.poll_once().sources["infiniband"]
        assert (status.up, status.absent, status.state) == (False, False, "down")
        assert status.errors_total == 1 and status.error == "InfiniBand devices gone: mlx5_0"
        assert [r.levelno for r in caplog.records if r.name == "nvwatch.agent.poller"] == [
            logging.WARNING
        ]
    finally:
        poller.stop()


@dataclass(frozen=True)
class Served:
    metrics: str
    landing: str


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read()).decode()


@contextmanager
def _served(profile: str, polls: int = 3) -> Iterator[Served]:
    """A simulated node behind a real agent and HTTP server, after `polls` polls."""
    config = AgentConfig(simulate=profile, listen_host="127.0.0.1", listen_port=0, interval=10.0)
    assert config.sources == DEFAULT_SOURCES
    with runtime(config) as effective:
        agent = Agent(effective, build_sources(effective))
        server = make_server(agent)
        server.start()
        try:
            for _ in range(polls):
                agent.poller.poll_once()
            url = f"http://127.0.0.1:{server.port}"
            yield Served(_get(url + "/metrics"), _get(url + "/"))
        finally:
            server.stop()
            agent.poller.stop(timeout=2.0)


@pytest.mark.parametrize("profile", ["dgx-station", "geforce-workstation"])
def test_a_node_without_infiniband_has_nothing_down(profile: str) -> None:
    with _served(profile) as served:
        up = _values(served.metrics, "nvwatch_agent_source_up")
        assert up == dict.fromkeys(DEFAULT_SOURCES, 1.0), served.landing
        errors = _values(served.metrics, "nvwatch_agent_source_errors_total")
        assert errors == dict.fromkeys(DEFAULT_SOURCES, 0.0)
        absent = _values(served.metrics, "nvwatch_agent_source_absent")
        assert absent == {"nvml": 0.0, "infiniband": 1.0, "host": 0.0}
        assert "nvwatch_gpu_up{" in served.metrics  # the GPUs are served all the same
        assert f"absent: {NO_HCA}" in served.landing
        assert "down" not in served.landing


def test_a_node_with_everything_has_nothing_absent() -> None:
    with _served("dgx-h100") as served:
        up = _values(served.metrics, "nvwatch_agent_source_up")
        assert up == dict.fromkeys(DEFAULT_SOURCES, 1.0), served.landing
        absent = _values(served.metrics, "nvwatch_agent_source_absent")
        assert absent == dict.fromkeys(DEFAULT_SOURCES, 0.0)
        errors = _values(served.metrics, "nvwatch_agent_source_errors_total")
        assert errors == dict.fromkeys(DEFAULT_SOURCES, 0.0)
        assert "nvwatch_ib_port_state{" in served.metrics


def _doctor(*args: str) -> tuple[int, dict[str, tuple[str, str]]]:
    """Exit code and {source: (state, detail)} from `nvwatch doctor`."""
    result = CliRunner().invoke(cli, ["doctor", "--sources", ",".join(DEFAULT_SOURCES), *args])
    lines = {}
    for line in result.output.splitlines():
        name, state, detail = [*line.split(None, 2), "", ""][:3]
        lines[name] = (state, detail)
    return result.exit_code, lines


def test_doctor_says_absent_with_the_reason_on_a_simulated_workstation() -> None:
    code, lines = _doctor("--simulate", "geforce-workstation")
    assert code == 0
    assert lines["nvml"][0] == "up" and "series in" in lines["nvml"][1]
    assert lines["infiniband"] == ("absent", lines["infiniband"][1])
    assert lines["infiniband"][1].startswith(NO_HCA)
    assert lines["host"][0] == "up"


@pytest.mark.skipif(
    bool(scan_pci(Path("/sys")).nvidia_gpus() or scan_pci(Path("/sys")).infiniband_hcas()),
    reason="this machine has NVIDIA GPUs or HCAs",
)
def test_doctor_on_this_gpu_less_machine_says_absent_not_missing() -> None:
    code, lines = _doctor()
    assert code == 0  # the host source works
    assert lines["nvml"][0] == "absent"
    assert lines["nvml"][1].startswith("no NVIDIA GPU on this node (no PCI function")
    assert lines["infiniband"][0] == "absent"
    assert lines["host"][0] == "up"
