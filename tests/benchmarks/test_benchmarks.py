"""Smoke test of the benchmark code paths with tiny counts: shapes and positive numbers,
never timing thresholds (those are what the benchmark reports, not what CI asserts)."""

from __future__ import annotations

import contextlib
import re

import pynvml
import pytest

from benchmarks.poll_cost import PollCost, Quantiles, SeriesCount
from benchmarks.real_nvml import RealNvmlUnavailable, measure_real_nvml
from benchmarks.report import Machine, Results, render_markdown, verdicts
from benchmarks.report.model import (
    POLL_CPU_TARGET_S,
    SERIES_GPU_TARGET,
    SERIES_LINK_TARGET,
    TARGET_PROFILE,
)
from benchmarks.run import Settings, collect, main
from benchmarks.scrape import compare_expositions
from benchmarks.wrk import parse_wrk
from tests.conftest import require_tool

WRK_OUTPUT = """\
Running 1s test @ http://127.0.0.1:1234/metrics
  1 threads and 1 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   300.00us  100.00us   2.00ms   90.00%
    Req/Sec     3.00k   100.00     3.10k    80.00%
  Latency Distribution
     50%  263.00us
     75%  300.00us
     90%  400.00us
     99%    1.50ms
  3000 requests in 1.00s, 750.00MB read
Requests/sec:   2999.50
Transfer/sec:    750.00MB
"""

MACHINE = Machine(
    date="d",
    cpu="cpu",
    cores=1,
    kernel="k",
    python="3",
    packages={"nvwatch": "0"},
    tools={"wrk": "w"},
    command="python benchmarks/run.py --quick",
)


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    with contextlib.suppress(pynvml.NVMLError):
        pynvml.nvmlShutdown()
    return True


def test_parse_wrk() -> None:
    result = parse_wrk(WRK_OUTPUT, connections=1, gzip=True)
    assert result.p50_seconds == pytest.approx(263e-6)
    assert result.p99_seconds == pytest.approx(1.5e-3)
    assert result.requests == 3000
    assert result.requests_per_second == pytest.approx(2999.5)
    assert result.errors is None


def test_compare_expositions_reports_a_differing_value() -> None:
    ne = (
        "# TYPE node_infiniband_link_downed_total counter\n"
        'node_infiniband_link_downed_total{device="mlx5_0",port="1"} 3\n'
        "# TYPE node_infiniband_state_id gauge\n"
        'node_infiniband_state_id{device="mlx5_0",port="1"} 4\n'
    )
    nv = (
        "# TYPE nvwatch_ib_port_errors_total counter\n"
        'nvwatch_ib_port_errors_total{device="mlx5_0",port="1",type="link_downed"} 2\n'
        "# TYPE nvwatch_ib_port_state gauge\n"
        'nvwatch_ib_port_state{device="mlx5_0",port="1"} 4\n'
    )
    comparison = compare_expositions(ne, nv)
    assert comparison.compared == 2
    assert len(comparison.mismatches) == 1
    assert "link_downed" in comparison.mismatches[0]


def test_quick_run_produces_every_table_with_positive_numbers() -> None:
    require_tool("wrk")
    require_tool("prometheus-node-exporter")
    settings = Settings(
        profiles=("dgx-h100",),
        polls=3,
        poll_seconds=20.0,
        warmup=1,
        profile_polls=1,
        render_repeats=2,
        attribution_polls=3,
        connections=(1,),
        wrk_seconds=1.0,
        rss_polls=5,
        rss_warmup=1,
        rss_seconds=30.0,
        serve_cpu_seconds=2.0,
        serve_cpu_warmup=1.0,
        fleet_nodes=2,
        fleet_interval=0.5,
        fleet_periods=1,
        # three polls a window: one poll in a one-second window can fall outside it on a
        # loaded machine, and the tree's CPU then reads 0 in 10 ms ticks
        peer_seconds=3.0,
        peer_warmup=1.0,
    )
    results = collect(settings)
    text = render_markdown(results, MACHINE)

    for heading in (
        "## Targets",
        "## Poll cycle CPU",
        "## How much of the NVML cost is the simulator",
        "## Series per node",
        "## NVML calls per GPU per poll",
        "## /metrics latency (wrk)",
        "## Side by side: node_exporter's infiniband collector",
        "## Resident memory",
        "## Real GPUs",
        "## Whole process, simulator included",
        "## Attribution",
        "## Side by side: nvitop-exporter",
        "### The agent's own share of a dgx-h100 poll",
    ):
        assert heading in text

    # every target has a figure and a verdict
    judged = verdicts(results)
    # poll CPU median + p99, the agent's own share, build_exposition, samples to series,
    # InfiniBand collect, p99 at 1 connection x2 encodings, RSS size + trend, series x2,
    # NVML calls, serve process CPU, fleet CPU share, nvitop-exporter, attribution per poll
    assert len(judged) == 18
    targets = text.split("## Targets\n", 1)[1].split("\n## ", 1)[0]
    assert [f"| {v.target} | {v.figure} | {v.mark} |" for v in judged] == [
        line for line in targets.splitlines() if line.startswith("| ") and "---" not in line
    ][1:]  # the table's rows, its header left out

    (cost,) = results.poll_costs
    assert cost.polls == 3
    assert cost.total.median > 0
    for stage in ("collect nvml", "collect infiniband", "collect host", "build_exposition"):
        assert cost.stages[stage].median > 0
    row = next(line for line in text.splitlines() if line.startswith("| dgx-h100 | 3 |"))
    numbers = [float(n) for n in re.findall(r"\d+\.\d+", row)]
    assert len(numbers) >= 16 and all(n >= 0 for n in numbers)

    (series,) = results.series
    assert series.link_detail > series.gpu_detail > 0

    assert results.scrape is not None
    assert {(r.connections, r.gzip) for r in results.scrape.runs} == {(1, False), (1, True)}
    for run in results.scrape.runs:
        assert run.requests > 0 and 0 < run.p50_seconds <= run.p99_seconds

    sbs = results.side_by_side
    assert sbs is not None
    assert sbs.comparison.compared > 100
    assert sbs.comparison.mismatches == []  # both exporters read one tree: values agree
    assert [r.connections for r in sbs.node_exporter.runs] == [1]

    assert results.rss is not None
    assert results.rss.polls == 5
    trace = results.rss.trace
    assert trace is not None and trace.last_poll == 5 and trace.top
    assert "### Allocation sites, poll 1 vs poll 5" in text

    assert results.serve_cpu is not None and results.serve_cpu.cpu_ms_per_s > 0
    fleet = results.fleet_cpu
    assert fleet is not None and fleet.nodes == 2 and fleet.share_pct > 0 and fleet.polls > 0
    assert results.rss.final_mib > 0

    peer = results.peer
    assert peer is not None and len(peer.nvwatch) == 2
    assert all(e.samples > 0 and e.cpu_ms_per_s > 0 for e in peer.nvwatch)

    attribution = results.attribution
    assert attribution is not None and attribution.processes == 64
    # the 64 processes became owners: one allocation series per job, job labels on them
    assert attribution.allocations == 64 and attribution.labelled > 0
    assert attribution.refresh.median > 0 and all(v >= 0 for v in attribution.parts.values())


def test_real_nvml_code_path_on_the_simulated_library() -> None:
    from nvwatch.sim import nvml as sim_nvml
    from nvwatch.sim.nvml import SimulatedNvml

    sim_nvml.install(SimulatedNvml("dgx1-v100"))
    try:
        real = measure_real_nvml(polls=2, time_limit=20.0)
    finally:
        sim_nvml.uninstall()
    assert len(real.gpus) == 8
    assert all(links > 0 for links in real.links_per_gpu)
    for timing in (real.source_poll, real.batched, real.per_field, real.per_call):
        assert timing.count >= 1 and timing.median_wall > 0
    results = Results(settings={}, real_nvml=real)
    assert "batched field values" in render_markdown(results, MACHINE)


@pytest.mark.skipif(_driver_present(), reason="a real NVIDIA driver is present")
def test_real_nvml_without_a_driver_fails_with_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(RealNvmlUnavailable):
        measure_real_nvml(polls=1, time_limit=1.0)
    assert main(["--quick", "--real-nvml"]) == 2
    assert "NVML is not available" in capsys.readouterr().err


def _judged(poll_median_s: float, link_series: int, gpu_series: int) -> tuple[dict[str, bool], str]:
    """The verdicts and the report of a run that measured these figures alone."""
    results = Results(
        settings={},
        poll_costs=[PollCost(TARGET_PROFILE, 3, Quantiles(poll_median_s, poll_median_s, 3), 0.01)],
        series=[SeriesCount(TARGET_PROFILE, link_series, gpu_series, {}, {}, {})],
    )
    return {v.target: v.passed for v in verdicts(results)}, render_markdown(results, MACHINE)


@pytest.mark.parametrize(
    ("figures", "missed"),
    [
        ((POLL_CPU_TARGET_S, SERIES_LINK_TARGET, SERIES_GPU_TARGET), set()),
        ((POLL_CPU_TARGET_S * 1.01, SERIES_LINK_TARGET, SERIES_GPU_TARGET), {"poll CPU (median)"}),
        ((POLL_CPU_TARGET_S, SERIES_LINK_TARGET + 1, SERIES_GPU_TARGET), {"full NVLink detail"}),
        ((POLL_CPU_TARGET_S, SERIES_LINK_TARGET, SERIES_GPU_TARGET + 1), {"--nvlink-detail=gpu"}),
    ],
)
def test_a_figure_past_its_target_is_a_miss(
    figures: tuple[float, int, int], missed: set[str]
) -> None:
    """A target is met at its limit and missed just past it; the Targets table and the
    closing section say so."""
    judged, text = _judged(*figures)
    assert len(judged) == 4  # median and p99 poll CPU, series at both NVLink details
    misses = {target for target, passed in judged.items() if not passed}
    assert {next(m for m in missed if m in target) for target in misses} == missed
    assert len(misses) == len(missed)
    for target, passed in judged.items():
        assert f"| {target} | " in text
        row = next(line for line in text.splitlines() if line.startswith(f"| {target} | "))
        assert row.endswith("| PASS |" if passed else "| **MISS** |")
    closing = text.split("## Misses: why, and what would fix them", 1)[1]
    assert ("Every target was met in this run." in closing) == (not missed)
