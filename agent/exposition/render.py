"""Snapshot -> Prometheus exposition bytes, rendered once per poll and cached.

Scrapes only copy cached bytes: a scrape never calls a source, and two scrapes between
polls return identical bodies (HA Prometheus pairs scrape twice; NVML calls are costly).
The bytes come from the slot table (agent/exposition/text.py), byte for byte what
prometheus_client would write for the same families (agent/exposition/client.py).
"""

from __future__ import annotations

import dataclasses
import gzip
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import (
    CONTENT_TYPE_LATEST as OPENMETRICS_CONTENT_TYPE,
)

from nvwatch.agent import __version__
from nvwatch.agent.catalogue import Scope, of_scope
from nvwatch.agent.exposition.client import registry_of as registry_of
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import compiled_families, emit_all
from nvwatch.agent.exposition.text import render_openmetrics, render_text
from nvwatch.agent.poller import Snapshot
from nvwatch.agent.sources.declaration import declared, load

if TYPE_CHECKING:
    from nvwatch.agent.server.limits import HttpState

# Explicit, not prometheus_client's CONTENT_TYPE_LATEST (1.0.0 in recent releases), so
# Prometheus 2.x servers keep parsing us; names and labels are ASCII, so the bytes are
# the same in both versions of the text format.
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TYPE = OPENMETRICS_CONTENT_TYPE

Renderer = Callable[[object, FamilySet], None]

_AGENT_PLANS = compiled_families(of_scope(Scope.AGENT, Scope.SOURCE))

# Paid once per poll, for every scrape of it. Measured on a dgx-h100 body (250 KB of
# text, docs/performance.md): level 1 gives 17 KB in 0.5 ms, level 6 15 KB in 1.6 ms.
# Text this repetitive compresses well at any level; the CPU is the agent's budget.
GZIP_LEVEL = 1


def _renderer(source: str) -> tuple[type, Renderer]:
    """The sample type and renderer `source` declares (agent/sources/declaration.py),
    imported on use, so a broken import in one source's code only fails that source."""
    declaration = declared(source)
    if declaration.sample is None or declaration.renderer is None:
        raise TypeError(f"source {source} declares no sample type and renderer")
    sample_type: type = load(declaration.sample)
    render: Renderer = load(declaration.renderer)
    return sample_type, render


def prepare(source: str, sample: object) -> FamilySet:
    """Render one source's sample into families; raises for a sample of the wrong shape.

    The poller calls this inside the source's isolation, so a source returning garbage
    is marked down like one that raised, and the other sources are still served.
    """
    expected, renderer = _renderer(source)
    if not isinstance(sample, expected):
        raise TypeError(f"source returned {type(sample).__name__}, expected {expected.__name__}")
    out = FamilySet()
    renderer(sample, out)
    return out


@dataclass(frozen=True)
class AgentState:
    """What the agent-scope families read: the build, the end of the poll cycle and, when
    the agent serves HTTP, its server's counts at that moment (none for `nvwatch dump`)."""

    version: str
    completed_at: float
    http_refused: Mapping[str, int] = field(default_factory=dict)
    http_connections_open: int | None = None
    http_connections_limit: int | None = None
    # the profile of the simulated node the agent reads; None on real hardware
    simulated_profile: str | None = None


def agent_families(
    snapshot: Snapshot, http: HttpState | None = None, simulated: str | None = None
) -> FamilySet:
    out = FamilySet()
    state = AgentState(__version__, snapshot.completed_at, simulated_profile=simulated)
    if http is not None:
        state = dataclasses.replace(
            state,
            http_refused=http.refused,
            http_connections_open=http.connections_open,
            http_connections_limit=http.connections_limit,
        )
    agent = [((), state)]
    sources = [((name,), status) for name, status in snapshot.sources.items()]
    for compiled in _AGENT_PLANS:
        emit_all((compiled,), agent if compiled[0].scope is Scope.AGENT else sources, out)
    return out


@dataclass
class Exposition:
    """One poll's output in every form a scrape can ask for."""

    snapshot: Snapshot
    parts: tuple[FamilySet, ...]  # the agent's own families, then each source's
    text: bytes
    text_gzip: bytes
    # the simulated profile behind this exposition (the landing page says so); None: real
    simulated: str | None = None
    _openmetrics: dict[bool, bytes] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def families(self) -> Iterator[Metric]:
        """prometheus_client's Metric of every family, built now (tests, benchmarks)."""
        for part in self.parts:
            yield from part

    def openmetrics(self, gzipped: bool) -> bytes:
        # OpenMetrics is asked for rarely (Prometheus prefers it only when configured):
        # render on first request and keep it with this poll's bytes.
        with self._lock:
            if gzipped not in self._openmetrics:
                body = render_openmetrics(self.parts)
                self._openmetrics[False] = body
                self._openmetrics[True] = gzip.compress(body, compresslevel=GZIP_LEVEL)
            return self._openmetrics[gzipped]


def build_exposition(
    snapshot: Snapshot, http: HttpState | None = None, simulated: str | None = None
) -> Exposition:
    """One poll's exposition; `simulated`: the profile when the node is simulated."""
    parts = [agent_families(snapshot, http, simulated)]
    for status in snapshot.sources.values():
        if isinstance(status.prepared, FamilySet):
            parts.append(status.prepared)
    text = render_text(parts)
    return Exposition(
        snapshot=snapshot,
        parts=tuple(parts),
        text=text,
        text_gzip=gzip.compress(text, compresslevel=GZIP_LEVEL),
        simulated=simulated,
    )
