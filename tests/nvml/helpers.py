"""Shared helpers for the NVML tests: a simulated node under pynvml, and parsed output."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.gpu import render
from nvwatch.agent.exposition.render import registry_of
from nvwatch.agent.sources.nvml import NvmlSample, NvmlSource
from nvwatch.sim.clock import ManualClock

POLL_S = 5.0


@dataclass(frozen=True)
class Series:
    name: str  # sample name, with _total on counters
    labels: dict[str, str]
    value: float


def exposition(sample: NvmlSample) -> list[Series]:
    """Render through FamilySet and prometheus_client, then parse the text back."""
    out = FamilySet()
    render(sample, out)
    text = generate_latest(registry_of(out)).decode()
    return [
        Series(s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def select(series: list[Series], name: str, **labels: str) -> list[Series]:
    return [
        s for s in series if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def value(series: list[Series], name: str, **labels: str) -> float:
    found = select(series, name, **labels)
    assert len(found) == 1, f"{name}{labels}: {len(found)} series"
    return found[0].value


def names_for_gpu(series: list[Series], gpu: int) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """(name, labels without values that change) of every series of one GPU."""
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("pid",))))
        for s in series
        if s.labels.get("gpu") == str(gpu)
    }


def poll(
    source: NvmlSource, clock: ManualClock, polls: int, step: float = POLL_S
) -> list[NvmlSample]:
    samples = []
    for _ in range(polls):
        clock.advance(step)
        samples.append(source.collect())
    return samples


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Real-time wait for the XID listener thread, which runs on its own schedule."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class CountingNvml:
    """Wraps a library and counts calls per C function name, made by the creating thread.

    pynvml's library is process-global: a thread left over from another test (a poller
    finishing its last collect) would otherwise be counted here too.
    """

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}
        self._thread = threading.get_ident()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)
        if not callable(real):
            return real

        def counted(*args: Any) -> Any:
            if threading.get_ident() == self._thread:
                self.calls[name] = self.calls.get(name, 0) + 1
            return real(*args)

        counted.__name__ = name
        return counted
