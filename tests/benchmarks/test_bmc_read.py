"""A short real run of the BMC read benchmark (benchmarks/bmc_read.py) against ipmi_sim:
sane numbers, every process it started gone, ipmi_exporter timed on the same BMC, and its
section of docs/performance.md replacing itself and kept by benchmarks/run.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import psutil
import pytest

from benchmarks.bmc_fleet_section import BEGIN as FLEET_BEGIN
from benchmarks.bmc_fleet_section import END as FLEET_END
from benchmarks.bmc_read import PEER_TOOLS, BmcReadCost, measure, update
from benchmarks.bmc_read_section import BEGIN, END
from benchmarks.run import kept_sections
from tests.conftest import require_tool

pytestmark = pytest.mark.timeout(120)  # the run itself takes a few seconds
READS, PEER_SCRAPES = 5, 3


@pytest.fixture(scope="module")
def short_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[BmcReadCost, list[psutil.Process]]:
    """One short run, and the processes started during it that are still alive after it
    (children counted from its start: another fixture's BMC may run in this process)."""
    for tool in ("ipmi_sim", "sdrcomp", "gcc"):
        require_tool(tool)
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    cost = measure(READS, tmp_path_factory.mktemp("bmc-read"), PEER_SCRAPES)
    return cost, [p for p in me.children(recursive=True) if p.pid not in before]


def test_a_short_run_times_reads_and_stops_what_it_started(
    short_run: tuple[BmcReadCost, list[psutil.Process]],
) -> None:
    cost, left = short_run
    assert not left, f"still running: {[(p.pid, p.name()) for p in left]}"
    assert cost.sensors == 11  # the test BMC's, a shared record counted per sensor
    for timing in (cost.kept_records, cost.walk_every_read):
        assert timing.reads == READS
        assert 0 < timing.cpu_ms_median <= timing.cpu_ms_p99
        assert 0 < timing.wall_ms_median <= timing.wall_ms_p99 <= timing.wall_ms_max
    # a silent BMC costs its timeout and a little, never a retry's worth more
    assert 0 <= cost.silent_overrun_ms < 250


def test_ipmi_exporter_is_timed_on_the_same_bmc(
    short_run: tuple[BmcReadCost, list[psutil.Process]],
) -> None:
    require_tool(PEER_TOOLS[0])
    require_tool(PEER_TOOLS[1])
    peer = short_run[0].peer
    assert peer is not None
    assert peer.scrapes == PEER_SCRAPES
    assert 0 < peer.wall_ms_median <= peer.wall_ms_p99 <= peer.wall_ms_max < 10_000
    # every scrape read the BMC (measure raises otherwise) by running FreeIPMI's tools
    assert peer.cpu_ms_mean > 0
    assert peer.version.startswith("ipmi_exporter ") and "unknown" not in peer.version


def test_the_section_replaces_itself_and_run_py_keeps_it(
    short_run: tuple[BmcReadCost, list[psutil.Process]], tmp_path: Path
) -> None:
    cost, _ = short_run
    doc = tmp_path / "performance.md"
    doc.write_text(f"# head\n\ntext\n\n{FLEET_BEGIN}\nfleet\n{FLEET_END}\n")
    update(doc, cost, "first")
    update(doc, cost, "second")
    text = doc.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert "`second`" in text and "`first`" not in text and text.startswith("# head\n\ntext\n")
    assert f"| {cost.kept_records.wall_ms_median:.1f} / " in text
    prose = " ".join(text.split())  # the paragraphs are wrapped
    assert f"{cost.silent_overrun_ms:.1f} ms after its module's timeout" in prose
    # benchmarks/run.py rewrites the document around it and carries both sections over
    rewritten = kept_sections(doc, "# nvwatch performance\n\nnew figures\n")
    assert rewritten.startswith("# nvwatch performance\n\nnew figures\n")
    for begin, end in ((BEGIN, END), (FLEET_BEGIN, FLEET_END)):
        section = text[text.index(begin) : text.index(end) + len(end)]
        assert rewritten.count(section) == 1


def test_without_ipmi_exporter_the_section_says_so(
    short_run: tuple[BmcReadCost, list[psutil.Process]], tmp_path: Path
) -> None:
    doc = tmp_path / "performance.md"
    doc.write_text("# head\n")
    update(doc, dataclasses.replace(short_run[0], peer=None), "cmd")
    text = doc.read_text()
    assert "ipmi_exporter's scrape" not in text
    assert "ipmi_exporter was not measured" in text
