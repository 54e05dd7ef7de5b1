"""The tracemalloc comparison of benchmarks/rss.py: what counts as growing, and how the
memory section says it."""

from __future__ import annotations

from benchmarks.report.memory import rss_section
from benchmarks.report.model import Results
from benchmarks.rss import GROW_KIB, RssResult, SiteGrowth, TraceResult, trace_in_process


def _site(site: str, first: float, last: float) -> SiteGrowth:
    return SiteGrowth(site=site, first_kib=first, last_kib=last, count_diff=1)


def test_growing_needs_both_the_absolute_and_the_relative_step() -> None:
    assert _site("agent/a.py:1", 0.0, GROW_KIB + 1).growing  # a new site past the floor
    assert not _site("agent/a.py:1", 0.0, GROW_KIB - 1).growing
    # a big cache that moved by more than the floor but only a few percent: not growing
    assert not _site("agent/a.py:1", 4096.0, 4096.0 + GROW_KIB + 1).growing
    assert _site("agent/a.py:1", 100.0, 100.0 + GROW_KIB + 1).growing
    assert not _site("agent/a.py:1", 500.0, 100.0).growing  # shrinking


def _trace(*sites: SiteGrowth) -> TraceResult:
    growing = [s for s in sites if s.growing]
    return TraceResult(1000, 10000, 10000, 900.0, 950.0, list(sites), growing, 60.0)


def _section(trace: TraceResult) -> str:
    rss = RssResult("dgx-h100", 10000, 10000, 40.0, 40.5, 41.0, [(0, 40.0)], 100.0, trace)
    return rss_section(Results(settings={}, rss=rss))


def test_simulator_sites_are_listed_but_not_judged() -> None:
    trace = _trace(_site("sim/gpu/model.py:322", 100.0, 800.0))
    assert trace.flat
    text = _section(trace)
    assert "**no site growing**" in text and "yes (simulator)" in text


def test_an_agent_site_growing_is_the_verdict() -> None:
    trace = _trace(_site("agent/poller.py:10", 1.0, 500.0), _site("agent/x.py:2", 5.0, 5.0))
    assert not trace.flat
    assert "**GROWING**: `agent/poller.py:10`" in _section(trace)


def test_traced_run_compares_two_snapshots() -> None:
    raw = trace_in_process("inference-t4", polls=20, warmup=1, seconds=60.0)
    assert (raw["first_poll"], raw["last_poll"]) == (2, 20)
    assert isinstance(raw["top"], list) and raw["top"]


def test_a_one_time_step_before_the_middle_is_not_growth() -> None:
    """A site judged on three snapshots: growth that all came before the middle one (a
    hash table doubling once) is a step; growth that goes on after it is a leak."""
    step = 1000.0  # KiB, far past both thresholds from first to last
    table_doubled = SiteGrowth("pathlib.py:74", 0.0, step, count_diff=1, mid_kib=step)
    assert not table_doubled.growing
    steady_leak = SiteGrowth("agent/a.py:1", 0.0, step, count_diff=9000, mid_kib=step / 2)
    assert steady_leak.growing
    late_step = SiteGrowth("agent/a.py:2", 0.0, step, count_diff=1, mid_kib=0.0)
    assert late_step.growing  # cannot be told from a leak that began late: flagged
    # a little growth after the middle still counts once it is a quarter of the whole
    assert SiteGrowth("agent/a.py:3", 0.0, step, 1, mid_kib=step * 0.76).growing is False
    assert SiteGrowth("agent/a.py:3", 0.0, step, 1, mid_kib=step * 0.74).growing is True
