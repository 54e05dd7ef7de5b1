"""A source stuck in one poll shows in /healthz and `doctor`, without a slow source flapping.

The poller reports a stuck source down at every poll ("still running the previous poll"),
but /healthz used to judge only the poll loop, so a readiness probe or a Slurm health
check saw "ok" while one source's series stood still for good.
"""

from __future__ import annotations

import threading
import time

from nvwatch.agent.app import Agent
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.poller import Poller
from tests.agent.fakes import CountingHostSource, HangingSource, host_sample


class SlowSource:
    """Answers every poll, each after `seconds`: late, never stuck."""

    name = "slow"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0

    def collect(self) -> object:
        self.calls += 1
        time.sleep(self.seconds)
        return host_sample()

    def close(self) -> None:
        pass


def _wait_until(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_source_stuck_past_the_bound_is_named_with_its_seconds() -> None:
    hung = HangingSource("nvml")
    poller = Poller([CountingHostSource(), hung], interval=0.1, timeout=0.05, stuck_after=0.4)
    try:
        poller.poll_once()
        assert hung.entered.wait(2)
        assert poller.stuck() == {}, "timed out once is late, not stuck"
        assert _wait_until(lambda: "nvml" in poller.stuck(), 5)
        assert poller.stuck()["nvml"] > 0.4
        assert "host" not in poller.stuck()
    finally:
        hung.release.set()
        poller.stop()


def test_a_stuck_source_stays_stuck_until_a_poll_is_answered_in_time() -> None:
    """Returning late once is not recovery: a source alternating between stuck and late
    would otherwise flip /healthz at every return."""
    hung = HangingSource("nvml")
    poller = Poller([hung], interval=0.1, timeout=0.05, stuck_after=0.3)
    try:
        poller.poll_once()
        assert _wait_until(lambda: "nvml" in poller.stuck(), 5)
        poller.poll_once()  # sees it stuck while it runs
        hung.release.set()
        assert _wait_until(lambda: poller._workers[0].busy_since is None, 5)
        assert "nvml" in poller.stuck(), "returned, but no poll was answered in time yet"
        poller.poll_once()  # answered at once: released
        assert poller.stuck() == {}
    finally:
        hung.release.set()
        poller.stop()


def test_a_slow_source_that_answers_every_poll_never_counts_as_stuck() -> None:
    """Late at every poll (timeout 0.05 s, each answer after 0.15 s), polled for about
    ten intervals: down each time, stuck never."""
    slow = SlowSource(0.15)
    poller = Poller([slow], interval=0.2, timeout=0.05, stuck_after=0.65)
    seen: list[dict[str, float]] = []
    try:
        for _ in range(10):
            snapshot = poller.poll_once()
            assert not snapshot.sources["slow"].up
            seen.append(poller.stuck())
            time.sleep(0.2)
            seen.append(poller.stuck())
    finally:
        poller.stop()
    assert slow.calls >= 5
    assert all(s == {} for s in seen), seen


def test_health_names_the_stuck_source_and_recovers() -> None:
    hung = HangingSource("nvml")
    config = AgentConfig(interval=0.1, source_timeout=0.05)
    agent = Agent(config, [CountingHostSource(), hung])  # type: ignore[list-item]
    stop = threading.Event()
    try:
        agent.poller.start(on_death=lambda _exc: stop.set())
        assert _wait_until(lambda: agent.poller.latest is not None, 5)
        assert agent.health().ok
        assert _wait_until(lambda: not agent.health().ok, 5)
        detail = agent.health().detail
        assert detail.startswith("source nvml stuck in one poll for "), detail
        assert f"(limit {config.stale_after:g}s)" in detail
        seconds = float(detail.split(" for ")[1].split("s ")[0])
        assert seconds > config.stale_after
        hung.release.set()
        assert _wait_until(lambda: agent.health().ok, 5), agent.health().detail
    finally:
        hung.release.set()
        agent.poller.stop()
    assert not stop.is_set()
