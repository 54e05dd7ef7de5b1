"""What a report is made of: the run's results, the targets they are judged against, and
the number formats every section shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmarks.attribution_cost import AttributionCost
from benchmarks.nvml_calls import NvmlCalls
from benchmarks.peer_cost import PeerCost
from benchmarks.poll_cost import PollCost, ProfileSplit, Quantiles, RenderSplit, SeriesCount
from benchmarks.real_nvml import RealNvmlResult
from benchmarks.rss import RssResult
from benchmarks.scrape import ScrapeResult, SideBySide
from benchmarks.sim_cost import FleetCpu, ServeCpu
from benchmarks.startup import Startup
from benchmarks.wrk import WrkResult

# The targets; each figure is judged against one of these.
POLL_CPU_TARGET_S = 0.015  # a simulated dgx-h100 poll, simulator included
P99_ONE_CONNECTION_TARGET_S = 0.002
RSS_TARGET_MB = 45.0  # the agent is the cheapest thing on the node
SERIES_LINK_TARGET = 2500
SERIES_GPU_TARGET = 800
TARGET_PROFILE = "dgx-h100"
MB = 1_000_000


@dataclass(frozen=True)
class Machine:
    date: str
    cpu: str
    cores: int
    kernel: str
    python: str
    packages: dict[str, str]
    tools: dict[str, str]
    command: str


@dataclass
class Results:
    settings: dict[str, Any]
    poll_costs: list[PollCost] = field(default_factory=list)
    nvml_split: ProfileSplit | None = None
    poll_split: ProfileSplit | None = None
    render_split: RenderSplit | None = None
    series: list[SeriesCount] = field(default_factory=list)
    rss: RssResult | None = None
    scrape: ScrapeResult | None = None
    side_by_side: SideBySide | None = None
    real_nvml: RealNvmlResult | None = None
    nvml_calls: list[NvmlCalls] = field(default_factory=list)
    serve_cpu: ServeCpu | None = None
    fleet_cpu: FleetCpu | None = None
    attribution: AttributionCost | None = None
    peer: PeerCost | None = None  # nvitop-exporter side by side
    startup: list[Startup] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class Verdict:
    target: str
    figure: str
    passed: bool

    @property
    def mark(self) -> str:
        return "PASS" if self.passed else "**MISS**"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 10 else f"{seconds:.1f} s"


def q(quantiles: Quantiles) -> str:
    return f"{quantiles.median * 1e3:.2f} / {quantiles.p99 * 1e3:.2f}"


def pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def target_cost(results: Results) -> PollCost | None:
    """The poll cost of the profile the targets are about, if it was measured."""
    return cost_of(results, TARGET_PROFILE)


def cost_of(results: Results, profile: str) -> PollCost | None:
    return next((c for c in results.poll_costs if c.profile == profile), None)


def target_series(results: Results) -> SeriesCount | None:
    return next((c for c in results.series if c.profile == TARGET_PROFILE), None)


def find_run(runs: list[WrkResult], connections: int, gzip: bool) -> WrkResult | None:
    return next((r for r in runs if r.connections == connections and r.gzip == gzip), None)
