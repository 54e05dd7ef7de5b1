"""Poll-cycle CPU per simulated profile, the simulator's share, and series per node."""

from __future__ import annotations

import cProfile
import gzip
import pstats
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from prometheus_client.exposition import generate_latest

from benchmarks.common import percentile, source_path
from benchmarks.harness import Harness, PollTimes, simulated_agent
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.render import (
    GZIP_LEVEL,
    Exposition,
    build_exposition,
    prepare,
    registry_of,
)
from nvwatch.agent.exposition.text import render_text
from nvwatch.agent.poller import Snapshot, SourceStatus

PROFILES = ("dgx1-v100", "dgx-a100", "dgx-h100", "dgx2")

# profiled file names are shown relative to the checkout


@dataclass(frozen=True)
class Quantiles:
    median: float
    p99: float
    count: int

    @staticmethod
    def of(values: Sequence[float]) -> Quantiles:
        return Quantiles(percentile(values, 50), percentile(values, 99), len(values))


@dataclass
class PollCost:
    profile: str
    polls: int
    total: Quantiles  # process CPU around poll_once (every thread)
    wall_median: float  # wall time of poll_once, for context: GIL hand-offs and I/O waits
    gpus: int = 0  # the simulated node's, so a target "for 8 HCAs" can be checked
    hcas: int = 0
    stages: dict[str, Quantiles] = field(default_factory=dict)  # "collect nvml", ...
    # every source's prepare summed poll by poll (samples to series); None when the
    # sources' lists do not line up poll for poll
    prepare_total: Quantiles | None = None


def measure_poll_cost(profile: str, polls: int, warmup: int, time_limit: float) -> PollCost:
    with simulated_agent(profile) as harness:
        done = harness.run(polls, warmup=warmup, time_limit=time_limit)
        wall = _wall_median(harness, max(3, min(20, polls // 10)))
        node = harness.node.profile
    cost = _summarise(profile, done, harness.times, wall)
    cost.gpus, cost.hcas = node.gpu_count, len(node.nics)
    return cost


def _wall_median(harness: Harness, polls: int) -> float:
    walls = []
    for _ in range(polls):
        harness.advance()
        started = time.perf_counter()
        harness.poll(record=False)
        walls.append(time.perf_counter() - started)
    return percentile(walls, 50)


def _summarise(profile: str, polls: int, times: PollTimes, wall: float) -> PollCost:
    cost = PollCost(profile, polls, Quantiles.of(times.total), wall)
    for name, values in sorted(times.collect.items()):
        cost.stages[f"collect {name}"] = Quantiles.of(values)
    for name, values in sorted(times.prepare.items()):
        cost.stages[f"prepare {name}"] = Quantiles.of(values)
    cost.stages["build_exposition"] = Quantiles.of(times.build)
    cost.prepare_total = _per_poll_sum(list(times.prepare.values()), polls)
    return cost


def _per_poll_sum(stages: list[list[float]], polls: int) -> Quantiles | None:
    """Quantiles of the stages' sum in each poll. A recorded poll has every source up (the
    harness raises otherwise), so each list holds one entry per poll, in poll order."""
    if not stages or any(len(values) != polls for values in stages):
        return None
    return Quantiles.of([sum(values) for values in zip(*stages, strict=True)])


# --- where the time goes ----------------------------------------------------------------


@dataclass(frozen=True)
class ProfileSplit:
    """cProfile's own-time (tottime) of one stage split by where the code lives."""

    what: str
    polls: int
    shares: dict[str, float]  # category -> fraction of the stage's profiled time
    top: list[tuple[str, float]]  # "file:line(function)" -> seconds per poll (tottime)


def _category(filename: str, function: str) -> str:
    if "/sim/" in filename:
        return "simulator (sim)"
    if filename.endswith("pynvml.py"):
        return "pynvml bindings"
    if "/agent/sources/" in filename:
        return "agent sources"
    if "/agent/" in filename:
        return "agent exposition/poller"
    if "prometheus_client" in filename:
        return "prometheus_client"
    if filename == "~":
        if "zlib" in function or "compress" in function:
            return "gzip (zlib)"
        if any(k in function for k in ("posix.", "io.open", "os.", "read", "listdir", "scandir")):
            return "syscalls (file I/O)"
        if "ctypes" in function or "CField" in function or "byref" in function:
            return "pynvml bindings"
        return "builtins"
    if "ctypes" in filename:
        return "pynvml bindings"
    if "gzip" in filename:
        return "gzip (zlib)"
    if "psutil" in filename:
        return "psutil"
    return "stdlib"


def _split(profiler: cProfile.Profile, what: str, polls: int, top: int) -> ProfileSplit:
    stats = pstats.Stats(profiler)
    shares: dict[str, float] = {}
    rows: list[tuple[str, float]] = []
    entries = stats.stats  # type: ignore[attr-defined]
    for (filename, line, function), (_cc, _nc, tottime, _ct, _callers) in entries.items():
        category = _category(filename, function)
        shares[category] = shares.get(category, 0.0) + tottime
        short = filename if filename == "~" else source_path(filename)
        rows.append((f"{short}:{line}({function})", tottime / polls))
    total = sum(shares.values()) or 1.0
    rows.sort(key=lambda r: r[1], reverse=True)
    return ProfileSplit(
        what=what,
        polls=polls,
        shares={k: v / total for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
        top=rows[:top],
    )


def profile_poll(profile: str, polls: int, top: int = 12) -> tuple[ProfileSplit, ProfileSplit]:
    """Profile the NVML collect alone (for the simulator's share) and one whole poll (for
    the top costs), on the calling thread: cProfile sees only the thread it runs in."""
    nvml_profiler = cProfile.Profile()
    poll_profiler = cProfile.Profile()
    with simulated_agent(profile) as harness:
        harness.run(0, warmup=3, time_limit=60.0)
        nvml = [s for s in harness.raw_sources if s.name == "nvml"]
        # two passes: only one profiler can be active in a thread at a time
        for source in nvml:
            for _ in range(polls):
                harness.advance()  # outside the profiler, like the timed polls
                nvml_profiler.runcall(source.collect)
        for _ in range(polls):
            harness.advance()
            poll_profiler.runcall(_poll_on_this_thread, harness)
    return (
        _split(nvml_profiler, f"{profile} NVML collect()", polls, top),
        _split(poll_profiler, f"{profile} whole poll (collect + prepare + build)", polls, top),
    )


def _poll_on_this_thread(harness: Harness) -> None:
    statuses = {}
    for source in harness.raw_sources:
        prepared = prepare(source.name, source.collect())
        statuses[source.name] = SourceStatus(source.name, True, 0.0, 0, None, prepared)
    build_exposition(Snapshot(MappingProxyType(statuses), 0, time.time(), 0.0))


@dataclass(frozen=True)
class RenderSplit:
    """build_exposition's parts, timed on their own over one poll's families."""

    samples: int
    text_bytes: int
    gzip_bytes: int
    # prometheus_client over the same families: the definition of the bytes, and what
    # build_exposition spent on text before the slot table
    generate_latest: Quantiles
    gzip: Quantiles
    renderer: Quantiles | None  # the agent's text renderer (agent/exposition/text.py)
    identical: bool  # its bytes equal generate_latest's for this poll


def measure_render_split(profile: str, repeats: int) -> RenderSplit:
    with simulated_agent(profile) as harness:
        harness.run(0, warmup=3, time_limit=60.0)
        previous = harness.exposition
        harness.run(0, warmup=1, time_limit=60.0)
        exposition = harness.exposition
        assert previous is not None and exposition is not None
        # exposition.families: the agent's own families and every source's, as
        # prometheus_client Metric objects (built here, outside the timing)
        registry = registry_of(list(exposition.families))
        text_times, gzip_times = [], []
        text = b""
        for _ in range(repeats):
            started = time.thread_time()
            text = generate_latest(registry)
            text_times.append(time.thread_time() - started)
            started = time.thread_time()
            packed = gzip.compress(text, compresslevel=GZIP_LEVEL)
            gzip_times.append(time.thread_time() - started)
        identical = exposition.text == text
        renderer_times = _time_renderer(previous, exposition, repeats) if identical else []
        return RenderSplit(
            samples=harness.series(),
            text_bytes=len(text),
            gzip_bytes=len(packed),
            generate_latest=Quantiles.of(text_times),
            gzip=Quantiles.of(gzip_times),
            renderer=Quantiles.of(renderer_times) if renderer_times else None,
            identical=identical,
        )


def _time_renderer(previous: Exposition, latest: Exposition, repeats: int) -> list[float]:
    """The renderer over two consecutive polls' families in turn: each slot keeps its
    last line, so every value that changed between the polls is formatted again, as in a
    real poll (re-rendering one poll's families would find every line kept)."""
    times = []
    for i in range(repeats):
        parts = (previous if i % 2 == 0 else latest).parts
        started = time.thread_time()
        render_text(parts)
        times.append(time.thread_time() - started)
    return times


# --- cardinality -------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesCount:
    profile: str
    link_detail: int
    gpu_detail: int
    by_source_link: dict[str, int]
    by_source_gpu: dict[str, int]
    families_gpu: dict[str, int]  # family -> samples with --nvlink-detail=gpu, largest first


def count_series(profile: str) -> SeriesCount:
    counts: dict[str, int] = {}
    by_source: dict[str, dict[str, int]] = {}
    families: dict[str, int] = {}
    for detail in ("link", "gpu"):
        with simulated_agent(profile, nvlink_detail=detail) as harness:
            # two polls: rates and ratios need an interval before they are exported
            harness.run(0, warmup=2, time_limit=60.0)
            counts[detail] = harness.series()
            exposition = harness.exposition
            assert exposition is not None
            by_source[detail] = {
                name: status.prepared.series()
                for name, status in exposition.snapshot.sources.items()
                if isinstance(status.prepared, FamilySet)
            }
            if detail == "gpu":
                # a counter's samples are one family in prometheus_client; name it by the
                # exposed sample name so the table matches what a scrape shows
                for family in exposition.families:
                    if family.samples:
                        families[family.samples[0].name] = len(family.samples)
    ranked = dict(sorted(families.items(), key=lambda kv: -kv[1]))
    return SeriesCount(
        profile, counts["link"], counts["gpu"], by_source["link"], by_source["gpu"], ranked
    )
