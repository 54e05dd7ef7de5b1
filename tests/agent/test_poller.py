from __future__ import annotations

import threading
import time

import pytest

from nvwatch.agent.exposition.render import build_exposition, prepare
from nvwatch.agent.poller import Poller
from nvwatch.agent.sources import SourceUnavailable
from tests.agent.fakes import (
    CountingHostSource,
    GarbageSource,
    HangingSource,
    RaisingSource,
    UnavailableSource,
)


def _poller(*sources: object, timeout: float = 0.3) -> Poller:
    return Poller(list(sources), interval=0.2, timeout=timeout, prepare=prepare)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "broken",
    [
        RaisingSource("nvml", RuntimeError("NVML exploded")),
        UnavailableSource("nvml", "NVML library not found"),
        GarbageSource("infiniband", "definitely not a sample"),
        GarbageSource("host", None),
    ],
    ids=["raises", "unavailable", "garbage", "none"],
)
def test_a_failing_source_leaves_the_others_served(broken: object) -> None:
    good = CountingHostSource()
    sources = [broken] if getattr(broken, "name", "") == "host" else [good, broken]
    poller = _poller(*sources)
    try:
        snapshot = poller.poll_once()
        snapshot = poller.poll_once()
    finally:
        poller.stop()
    bad = snapshot.sources[broken.name]  # type: ignore[attr-defined]
    assert not bad.up
    assert bad.errors_total == 2
    assert bad.error
    if good in sources:
        assert snapshot.sources["host"].up
        text = build_exposition(snapshot).text.decode()
        assert "nvwatch_host_load1 2.0" in text
        assert f'nvwatch_agent_source_up{{source="{bad.name}"}} 0.0' in text


def test_unavailable_reason_is_reported_verbatim() -> None:
    poller = _poller(UnavailableSource("nvml", "NVML library not found: is the driver loaded?"))
    try:
        status = poller.poll_once().sources["nvml"]
    finally:
        poller.stop()
    assert status.error == "NVML library not found: is the driver loaded?"


def test_a_hanging_source_times_out_and_is_not_piled_up() -> None:
    hung = HangingSource("nvml")
    good = CountingHostSource()
    poller = _poller(good, hung, timeout=0.2)
    try:
        started = time.monotonic()
        first = poller.poll_once()
        assert time.monotonic() - started < 1.0, "the poll waited for the stuck source"
        assert not first.sources["nvml"].up
        assert "timed out" in (first.sources["nvml"].error or "")
        assert first.sources["host"].up
        second = poller.poll_once()
        assert "still running the previous poll" in (second.sources["nvml"].error or "")
        assert hung.calls == 1, "a stuck source must not be asked again"
        assert second.sources["host"].up and good.calls == 2
        assert second.sources["nvml"].errors_total == 2
        # once the native call returns, the source is polled again
        hung.release.set()
        deadline = time.monotonic() + 5
        while poller._workers[1].busy_since is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        poller.poll_once()
        assert hung.calls == 2
    finally:
        hung.release.set()
        poller.stop()


def test_background_loop_polls_on_interval_and_stops_promptly() -> None:
    good = CountingHostSource()
    poller = _poller(good)
    poller.start()
    time.sleep(0.7)
    started = time.monotonic()
    poller.stop(timeout=1.0)
    assert time.monotonic() - started < 1.0
    assert 2 <= good.calls <= 6
    assert not poller.alive()


def test_stop_is_prompt_even_with_a_stuck_source() -> None:
    hung = HangingSource("nvml")
    poller = _poller(CountingHostSource(), hung, timeout=0.1)
    poller.start()
    assert hung.entered.wait(2)
    started = time.monotonic()
    poller.stop(timeout=0.5)
    assert time.monotonic() - started < 1.0
    hung.release.set()


def test_duplicate_source_names_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        _poller(CountingHostSource(), CountingHostSource())


def test_source_unavailable_marks_only_that_source_down_with_its_message() -> None:
    good = CountingHostSource()
    poller = _poller(good, RaisingSource("nvml", SourceUnavailable("no NVIDIA driver loaded")))
    try:
        poller.poll_once()
        snapshot = poller.poll_once()
    finally:
        poller.stop()
    nvml = snapshot.sources["nvml"]
    # the operator reads the source's own words, without an exception type in front
    assert (nvml.up, nvml.error, nvml.errors_total, nvml.prepared) == (
        False,
        "no NVIDIA driver loaded",
        2,
        None,
    )
    host = snapshot.sources["host"]
    assert host.up and host.error is None and host.errors_total == 0
    text = build_exposition(snapshot).text.decode()
    assert "nvwatch_host_load1 2.0" in text
    assert 'nvwatch_agent_source_up{source="nvml"} 0.0' in text
    assert 'nvwatch_agent_source_up{source="host"} 1.0' in text


def test_any_other_exception_is_reported_with_its_type() -> None:
    poller = _poller(RaisingSource("nvml", KeyError("gpu")))
    try:
        status = poller.poll_once().sources["nvml"]
    finally:
        poller.stop()
    assert status.error == "KeyError: 'gpu'"


def test_constructing_a_poller_starts_no_thread() -> None:
    before = set(threading.enumerate())
    poller = _poller(CountingHostSource(), HangingSource("nvml"))
    assert set(threading.enumerate()) == before
    assert not poller.alive()


def test_stop_after_start_leaves_no_thread_running() -> None:
    before = set(threading.enumerate())
    good = CountingHostSource()
    poller = _poller(good, RaisingSource("nvml", SourceUnavailable("absent")))
    poller.start()
    deadline = time.monotonic() + 5
    while good.calls < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    started = {t.name for t in set(threading.enumerate()) - before}
    assert started == {"nvwatch-poller", "nvwatch-source-host", "nvwatch-source-nvml"}
    poller.stop(timeout=1.0)
    assert set(threading.enumerate()) - before == set()
