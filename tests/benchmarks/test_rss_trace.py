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
    trace = _trace(_site("agent/sim/gpu_model.py:322", 100.0, 800.0))
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
