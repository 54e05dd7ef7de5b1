"""The hot path's and nvitop-exporter's Target rows, judged from hand-built Results with
figures on either side of each threshold (no run: the rows' arithmetic and wording)."""

from __future__ import annotations

import pytest

from benchmarks.peer_cost import ExporterCost, PeerCost
from benchmarks.poll_cost import PollCost, ProfileSplit, Quantiles
from benchmarks.report import Machine, Results, Verdict, render_markdown, verdicts

MACHINE = Machine("d", "cpu", 1, "k", "3", {"nvwatch": "0"}, {}, "python benchmarks/run.py")
SIM = "simulator (sim)"


def _q(median_ms: float, p99_ms: float | None = None) -> Quantiles:
    return Quantiles(median_ms / 1e3, (p99_ms or median_ms * 1.5) / 1e3, 40)


def _cost(
    profile: str,
    total: tuple[float, float],
    *,
    build: float = 3.0,
    ib: float = 1.0,
    prepare: tuple[float, float, float] = (0.6, 0.3, 0.1),
    prepare_total: float | None = None,
    gpus: int = 8,
    hcas: int = 8,
    collect_nvml: float = 9.0,
) -> PollCost:
    cost = PollCost(profile, 40, _q(*total), total[0] * 1.1e-3, gpus=gpus, hcas=hcas)
    cost.stages = {
        "collect nvml": _q(collect_nvml),
        "collect infiniband": _q(ib),
        "collect host": _q(0.4),
        "prepare nvml": _q(prepare[0]),
        "prepare infiniband": _q(prepare[1]),
        "prepare host": _q(prepare[2]),
        "build_exposition": _q(build),
    }
    cost.prepare_total = None if prepare_total is None else _q(prepare_total)
    return cost


def _split(sim_share: float) -> ProfileSplit:
    return ProfileSplit("x", 5, {SIM: sim_share, "agent sources": 1 - sim_share}, [])


def _row(results: Results, key: str) -> Verdict:
    (row,) = [v for v in verdicts(results) if key in v.target]
    return row


@pytest.mark.parametrize(("p99", "passed"), [(21.7, True), (31.3, False)])
def test_poll_p99_row(p99: float, passed: bool) -> None:
    results = Results(settings={}, poll_costs=[_cost("dgx-h100", (11.0, p99))])
    row = _row(results, "simulated poll CPU (p99) <= 25.00 ms")
    assert row.passed is passed
    assert f"{p99:.2f} ms" in row.figure


@pytest.mark.parametrize(("median", "passed"), [(12.4, True), (18.9, False)])
def test_dgx2_median_row(median: float, passed: bool) -> None:
    dgx2 = _cost("dgx2", (median, median * 1.3), gpus=16)
    results = Results(settings={}, poll_costs=[_cost("dgx-h100", (10.0, 14.0)), dgx2])
    row = _row(results, "dgx2 (16 GPUs) simulated poll CPU (median) <= 15.00 ms")
    assert row.passed is passed
    assert row.figure.startswith(f"{median:.2f} ms")


@pytest.mark.parametrize(
    ("poll", "collect", "share", "own", "passed"),
    [(10.2, 7.0, 0.6, "6.00 ms", True), (19.0, 9.0, 0.3, "16.30 ms", False)],
)
def test_own_share_row_takes_the_simulator_out_of_the_nvml_collect(
    poll: float, collect: float, share: float, own: str, passed: bool
) -> None:
    results = Results(
        settings={},
        poll_costs=[_cost("dgx-h100", (poll, poll * 1.4), collect_nvml=collect)],
        nvml_split=_split(share),
        poll_split=_split(0.45),
    )
    row = _row(results, "agent's own poll CPU")
    assert row.passed is passed
    assert row.figure.startswith(f"{own} = {poll:.2f} ms poll - {collect * share:.2f} ms")
    assert f"the {collect:.2f} ms NVML collect" in row.figure
    # the whole-poll basis is printed beside it for comparison
    assert f"would leave {poll * 0.55:.2f} ms" in row.figure


def test_own_share_row_falls_back_to_the_whole_poll_split() -> None:
    results = Results(
        settings={}, poll_costs=[_cost("dgx-h100", (12.0, 15.0))], poll_split=_split(0.5)
    )
    row = _row(results, "agent's own poll CPU")
    assert row.passed  # 12 ms less half of it
    assert row.figure == (
        "6.00 ms = 12.00 ms poll less the simulator's 50 % cProfile share of a whole poll"
    )


@pytest.mark.parametrize(("build", "passed"), [(3.1, True), (5.6, False)])
def test_build_exposition_row(build: float, passed: bool) -> None:
    results = Results(settings={}, poll_costs=[_cost("dgx-h100", (10.0, 14.0), build=build)])
    row = _row(results, "build_exposition (text + gzip, median) <= 4.00 ms")
    assert row.passed is passed


@pytest.mark.parametrize(("total", "passed"), [(1.7, True), (2.6, False)])
def test_samples_to_series_row_uses_the_per_poll_sum(total: float, passed: bool) -> None:
    cost = _cost("dgx-h100", (10.0, 14.0), prepare=(0.1, 0.1, 0.1), prepare_total=total)
    row = _row(Results(settings={}, poll_costs=[cost]), "samples to series")
    assert row.passed is passed
    assert row.figure == (f"{total:.2f} ms (median of the per-poll sum of nvml, infiniband, host)")


@pytest.mark.parametrize(("prepare", "passed"), [((0.9, 0.4, 0.1), True), ((1.6, 0.7, 0.2), False)])
def test_samples_to_series_row_without_a_per_poll_sum(
    prepare: tuple[float, float, float], passed: bool
) -> None:
    cost = _cost("dgx-h100", (10.0, 14.0), prepare=prepare)
    row = _row(Results(settings={}, poll_costs=[cost]), "samples to series")
    assert row.passed is passed
    assert row.figure == f"{sum(prepare):.2f} ms (sum of the medians of nvml, infiniband, host)"


@pytest.mark.parametrize(
    ("ib", "hcas", "passed"), [(1.1, 8, True), (2.3, 8, False), (1.1, 4, False)]
)
def test_infiniband_row_needs_eight_hcas(ib: float, hcas: int, passed: bool) -> None:
    cost = _cost("dgx-h100", (10.0, 14.0), ib=ib, hcas=hcas)
    row = _row(Results(settings={}, poll_costs=[cost]), "InfiniBand collect for 8 HCAs")
    assert row.passed is passed
    assert f"{hcas} HCAs" in row.figure


def _exporter(name: str, ms_per_s: float, samples: int) -> ExporterCost:
    return ExporterCost(name, 10.0, ms_per_s, samples, 10)


@pytest.mark.parametrize(
    ("nvwatch", "peer", "interval", "passed"),
    [
        ((20.0, 600), (30.0, 500), 1.0, True),  # 33.3 vs 60 µs/s per sample
        ((30.0, 500), (20.0, 600), 1.0, False),
        ((20.0, 600), (30.0, 500), 5.0, False),  # cheaper, but not at the target's 1 s
    ],
)
def test_peer_row(
    nvwatch: tuple[float, int], peer: tuple[float, int], interval: float, passed: bool
) -> None:
    cost = PeerCost(
        "dgx-h100",
        interval,
        _exporter("nvitop-exporter 1.7.9", *peer),
        [_exporter("nvwatch --sources=nvml", *nvwatch), _exporter("nvwatch (default)", 24, 2400)],
    )
    results = Results(settings={}, peer=cost)
    row = _row(results, "per exported sample")
    assert row.passed is passed
    ours, theirs = (1e3 * ms / n for ms, n in (nvwatch, peer))
    assert f"nvwatch --sources=nvml: {ours:.1f} µs/s per sample" in row.figure
    assert f"vs nvitop-exporter 1.7.9: {theirs:.1f} µs/s per sample" in row.figure
    assert "nvwatch (default): 10.0 µs/s per sample" in row.figure
    text = render_markdown(results, MACHINE)
    assert "## Side by side: nvitop-exporter" in text
    assert f"| nvitop-exporter 1.7.9 | {peer[0]:.1f} ms | {peer[1]:,} |" in text


def test_peer_row_says_why_when_nvitop_exporter_was_not_run() -> None:
    cost = PeerCost("dgx-h100", 1.0, None, [_exporter("nvwatch", 20.0, 600)], "pip failed: x")
    results = Results(settings={}, peer=cost)
    row = _row(results, "per exported sample")
    assert not row.passed
    assert row.figure == "not measured: pip failed: x"
    text = render_markdown(results, MACHINE)
    assert "**nvitop-exporter was not measured**: pip failed: x" in text
    assert "- **nvitop-exporter**: not measured: pip failed: x." in text  # in the misses


def test_missed_hot_path_rows_are_explained_and_kept_out_of_the_series_line() -> None:
    results = Results(
        settings={},
        poll_costs=[
            _cost("dgx-h100", (10.0, 14.0), build=6.5, prepare_total=3.3),
            _cost("dgx2", (17.5, 22.0), gpus=16, collect_nvml=12.0),
        ],
    )
    text = render_markdown(results, MACHINE)
    (line,) = [x for x in text.splitlines() if x.startswith("- **Hot path**")]
    assert "dgx2 (16 GPUs) simulated poll CPU" in line
    assert "collect nvml 9.00 ms -> 12.00 ms" in line
    assert "build_exposition (text + gzip, median) <= 4.00 ms: 6.50 ms" in line
    assert "samples to series" in line
    assert not any(x.startswith("- **Series**") for x in text.splitlines())
