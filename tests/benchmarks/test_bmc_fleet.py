"""benchmarks/bmc_fleet.py: a tiny real run (3 ipmi_sim, one agent, one burst interval)
measures sane figures and stops every process it started; its section of
docs/performance.md replaces itself, and benchmarks/run.py keeps it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import psutil
import pytest

from benchmarks.bmc_fleet import REFERENCE_BMCS, FleetCost, FleetSettings, measure, update
from benchmarks.bmc_fleet_section import BEGIN, END
from benchmarks.run import kept_sections
from tests.conftest import require_tool

pytestmark = pytest.mark.timeout(120)  # the run itself takes ~5 s


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[FleetCost, list[psutil.Process]]:
    """One quick run, and the processes started during it that are still alive after it
    (children counted from its start: another fixture's BMC may run in this process;
    one exited but not reaped would still be listed)."""
    for tool in ("ipmi_sim", "sdrcomp", "gcc"):
        require_tool(tool)
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    cost = measure(FleetSettings.quick(), tmp_path_factory.mktemp("bmc-fleet"))
    return cost, [p for p in me.children(recursive=True) if p.pid not in before]


def test_a_tiny_fleet_is_probed_and_every_process_it_started_is_gone(
    tiny_run: tuple[FleetCost, list[psutil.Process]],
) -> None:
    cost, left = tiny_run
    assert not left, f"still running: {[(p.pid, p.name()) for p in left]}"
    settings = FleetSettings.quick()
    assert cost.started == settings.bmcs and not cost.start_failures
    assert cost.bmcs_rss_mib > 1 and cost.start_s > 0
    probing = cost.probing
    assert probing.warmup_ok == settings.bmcs
    # the warm-up walks three SDRs and opens three sessions: CPU the kernel must count
    assert probing.warmup_cpu_s > 0
    assert 10 < probing.agent_rss_warm_mib <= probing.agent_rss_peak_mib < 500
    (burst,) = probing.modes
    assert (burst.mode, burst.rounds, burst.probes) == ("burst", 1, settings.bmcs)
    assert (burst.ok, burst.late, burst.failed) == (settings.bmcs, 0, 0), burst.reasons
    assert 0 < burst.wall_ms_p50 <= burst.wall_ms_p99 <= burst.wall_ms_max
    # every probe answered well inside the module's timeout, and the interval held them
    assert burst.wall_ms_max < settings.module_timeout_s * 1000
    assert burst.wall_ms_max / 1000 <= burst.last_answer_s < settings.interval_s
    # CPU is counted in 10 ms ticks: a few probes may round to none, never to a core
    cores = cost.cores or 1
    assert 0 <= burst.agent_cpu_s <= burst.agent_cpu_s_max <= settings.interval_s * cores
    assert 0 <= burst.cpu_ms_per_probe < 1000
    assert probing.idle_core_share <= burst.core_share <= burst.core_share_max <= cores
    assert cost.reference_label.startswith(f"extrapolated linearly from {settings.bmcs} BMCs")


def test_the_section_replaces_itself_and_run_py_keeps_it(
    tiny_run: tuple[FleetCost, list[psutil.Process]], tmp_path: Path
) -> None:
    cost, _ = tiny_run
    doc = tmp_path / "performance.md"
    doc.write_text("# head\n\ntext\n")
    update(doc, cost, "first")
    update(doc, cost, "second")
    text = doc.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert "`second`" in text and "`first`" not in text and text.startswith("# head\n\ntext\n")
    assert "**extrapolated**" in text
    # benchmarks/run.py rewrites the document around it and carries the section over
    rewritten = kept_sections(doc, "# nvwatch performance\n\nnew figures\n")
    assert rewritten.startswith("# nvwatch performance\n\nnew figures\n")
    assert rewritten[rewritten.index(BEGIN) :] == text[text.index(BEGIN) :]
    assert kept_sections(tmp_path / "absent.md", "only\n") == "only\n"


def test_the_reference_figure_is_measured_only_at_124_bmcs_every_30_s(
    tiny_run: tuple[FleetCost, list[psutil.Process]],
) -> None:
    cost, _ = tiny_run
    full = dataclasses.replace(cost, started=REFERENCE_BMCS, settings=FleetSettings())
    assert full.reference_label == "measured"
    fewer = dataclasses.replace(full, started=REFERENCE_BMCS - 1)
    assert fewer.reference_label.startswith(f"extrapolated linearly from {REFERENCE_BMCS - 1}")
    faster = dataclasses.replace(full, settings=FleetSettings(interval_s=10.0))
    assert faster.reference_label.endswith("every 10 s")
