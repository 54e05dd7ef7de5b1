"""Every energy, GPU-hour and percentage stat of the fleet dashboards against the same
figure worked out here from the raw samples, over ranges the data covers in full and in
part.

Six hours of a simulated six-node fleet (nvwatch.sim.history.history, one sample every 5
minutes) are backfilled into a real Prometheus, with the mixin's recording rules over
them as the README's backfill flow makes them. Each panel's queries run as Grafana
sends them, `$__range` and the other built-ins substituted by the preview's own code
(nvwatch.dashboards.preview), at three windows: a 24-hour range over the six hours (the
dashboard of a fleet first scraped this morning), three hours inside the data, and a
24-hour range that ends three hours into it.

The expected values come from the OpenMetrics file, read with the strict parser and
integrated here: GPU energy from each GPU's counter (its increments, a reset counted
from zero), node energy as each BMC power sample times the step it stands for,
GPU-hours as utilization samples times the step, peaks and means over the samples in
the window. A sample stands for the step that ends at it, so the history's first sample
adds nothing. And the GPUs of the power & cooling panel never draw more than the nodes
they sit in, over the same nodes and range.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from nvwatch.alerts.backfill import backfill_config
from nvwatch.common.durations import parse_duration
from nvwatch.dashboards.build import build_all
from nvwatch.dashboards.preview import (
    Prometheus,
    Window,
    panels_of,
    query_panel,
    resolve_variables,
    unit_of,
)
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.history.history import generate
from nvwatch.sim.history.plan import DAY_S, plan_history
from tests.history.backfill import backfill, backfill_recording_rules, serve_tsdb

pytestmark = pytest.mark.timeout(300)

END = 1772409600.0  # 2026-03-02T00:00Z
STEP_S = 300.0
HOURS = 6.0
HOUR_S = 3600.0
KWH = 3.6e6
CFG = MixinConfig()
FLEET = (
    "nvwatch-cluster-overview.json",
    "nvwatch-thermal-power.json",
    "nvwatch-power-cooling.json",
    "nvwatch-capacity-review.json",
)
CHECKED_UNITS = ("kwatth", "h", "percentunit")
FAMILIES = (
    "nvwatch_gpu_up",
    "nvwatch_gpu_energy_joules_total",
    "nvwatch_gpu_power_watts",
    "nvwatch_gpu_power_tdp_watts",
    "nvwatch_gpu_utilization_ratio",
    "nvwatch_gpu_memory_used_bytes",
    "nvwatch_gpu_memory_total_bytes",
    "nvwatch_bmc_power_watts",
)
# How far an integral of recorded series may fall from the samples', in steps of the
# scope's mean (power, GPUs busy): the rules are evaluated at an offset of up to a step
# into each step (by the group's hash, as Prometheus does), so a recorded gauge starts
# up to a step after the data; a recorded rate also lags the counter by its window, two
# steps in the backfilled rules, and the steps of the data's last window are not in it.
GAUGE_EDGE_STEPS = 1.0
RATE_EDGE_STEPS = 3.0
# A mean or a peak over the window: the recorded series at one step a sample match the
# raw samples, but Prometheus 2 also takes the sample on the window's left edge.
RATIO_ABS = 0.01
# Rules are evaluated at an offset into each step (as Prometheus does, by the group's
# hash): at a step's end the latest recorded value may still be the step before's.
LATEST_STEPS_BACK = (0, 1)
WINDOWS = {
    "24h over 6h of data": (0.0, 24 * HOUR_S),
    "3h inside the data": (0.0, 3 * HOUR_S),
    "24h ending 3h into the data": (-3 * HOUR_S, 24 * HOUR_S),
}

# the recorded rates' window over this history (`alerts backfill-rules --step 5m`)
RATE_WINDOW_S = parse_duration(backfill_config(CFG, STEP_S).rate_window)
AGENT_DOWN_NODE = "dgx-000"  # its agent is not scraped for a while (nvwatch.sim.history.plan)

Sample = tuple[float, dict[str, str], float]  # time, labels, value
Points = list[tuple[float, float]]


@dataclass(frozen=True)
class History:
    url: str
    start: float  # the first sample
    end: float  # the last sample
    samples: dict[str, list[Sample]]

    def series(self, family: str) -> list[tuple[dict[str, str], Points]]:
        """Each series of `family`: its labels and its (time, value) points in order."""
        by_key: dict[tuple[tuple[str, str], ...], Points] = defaultdict(list)
        for t, labels, value in self.samples[family]:
            by_key[tuple(sorted(labels.items()))].append((t, value))
        return [(dict(key), sorted(points)) for key, points in by_key.items()]

    def at(self, family: str, t: float) -> list[tuple[dict[str, str], float]]:
        return [(labels, v) for time, labels, v in self.samples[family] if time == t]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    workdir = tmp_path_factory.mktemp("dashboard-truth")
    days = HOURS * HOUR_S / DAY_S
    plan = plan_history(nodes=6, days=days, step=STEP_S, end=END, seed=3)
    om = workdir / "history.om"
    generate(plan, om)
    samples = _parse(om)
    tsdb = workdir / "tsdb"
    backfill(om, tsdb, days)
    with serve_tsdb(tsdb, workdir, step=STEP_S) as url:
        # promtool evaluates at start + k steps up to `end`, the last sample's step included
        end = plan.end + STEP_S / 2
        backfill_recording_rules(url, tsdb, workdir, start=plan.start, end=end, step=STEP_S)
    with serve_tsdb(tsdb, workdir, step=STEP_S) as url:
        yield History(url, plan.start, plan.end, samples)


def _parse(path: Path) -> dict[str, list[Sample]]:
    """The samples of FAMILIES (the strict parser over only these: all would take long)."""
    blocks = path.read_text(encoding="utf-8").removesuffix("# EOF\n").split("# HELP ")
    # a counter's family is named without its samples' `_total`
    names = {f.removesuffix("_total") for f in FAMILIES}
    kept = "".join("# HELP " + b for b in blocks if b.split(" ", 1)[0] in names)
    by_family: dict[str, list[Sample]] = defaultdict(list)
    for family in text_string_to_metric_families(kept + "# EOF\n"):
        for s in family.samples:
            assert s.timestamp is not None
            by_family[s.name].append((float(s.timestamp.sec), dict(s.labels), s.value))
    assert set(by_family) == set(FAMILIES)
    return by_family


# --- what the samples say, window (lo, hi] -------------------------------------------


@dataclass(frozen=True)
class Span:
    h: History
    lo: float
    hi: float

    def holds(self, t: float) -> bool:
        """A sample counts if it is in the window and ends a step of the data."""
        return self.lo < t <= self.hi and t > self.h.start

    @property
    def covered_s(self) -> float:
        return min(self.hi, self.h.end) - max(self.lo, self.h.start)


def gpu_joules(span: Span, counted: Callable[[str, float], bool] | None = None) -> dict[str, float]:
    """Per node: its GPUs' energy counters' increments in the window (a counter that went
    down was reset and counts from zero); `counted(instance, t)` picks the steps.

    Not the increment across a gap in the scrapes as long as the rules' rate window (the
    agent-down episode): no rate spans it, so the dashboards cannot know that energy
    (the README's dashboards section says so)."""
    out: dict[str, float] = defaultdict(float)
    for labels, points in span.h.series("nvwatch_gpu_energy_joules_total"):
        node = labels["instance"]
        for (before_t, before), (t, value) in pairwise(points):
            if t - before_t >= RATE_WINDOW_S:
                assert node == AGENT_DOWN_NODE, f"a gap in {node}'s scrapes at {t}"
                continue
            if span.holds(t) and (counted is None or counted(node, t)):
                out[node] += value - before if value >= before else value
    return out


def node_watts(h: History) -> dict[tuple[str, float], float]:
    """(node, time) -> the node's input power: its BMC's DCMI reading, else its largest
    power sensor (a BMC that also reports each supply has the total as its largest)."""
    dcmi: dict[tuple[str, float], float] = {}
    sensors: dict[tuple[str, float], float] = {}
    for t, labels, value in h.samples["nvwatch_bmc_power_watts"]:
        key = (labels["instance"], t)
        if labels["method"] == "dcmi":
            dcmi[key] = value
        else:
            sensors[key] = max(sensors.get(key, 0.0), value)
    return sensors | dcmi


def node_joules(span: Span) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for (node, t), watts in node_watts(span.h).items():
        if span.holds(t):
            out[node] += watts * STEP_S
    return out


def gpu_seconds(span: Span) -> tuple[float, float]:
    """(busy, idle) GPU-seconds: each GPU up at a sample, its utilization (and the rest)
    times the step."""
    util = {
        (labels["uuid"], t): v
        for t, labels, v in span.h.samples["nvwatch_gpu_utilization_ratio"]
        if span.holds(t)
    }
    busy = idle = 0.0
    for t, labels, up in span.h.samples["nvwatch_gpu_up"]:
        if span.holds(t) and up == 1:
            busy += util[(labels["uuid"], t)] * STEP_S
            idle += (1 - util[(labels["uuid"], t)]) * STEP_S
    return busy, idle


def per_time(span: Span, family: str, key: str) -> dict[str, dict[float, float]]:
    """Sums of `family` per `key` label value and sample time, in the window."""
    out: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for t, labels, v in span.h.samples[family]:
        if span.lo < t <= span.hi:
            out[labels[key]][t] += v
    return out


def share_peak(span: Span, used: str, total: str, key: str) -> dict[str, float]:
    u, tot = per_time(span, used, key), per_time(span, total, key)
    return {k: max(u[k][t] / tot[k][t] for t in u[k]) for k in u}


def mean_util_per_node(span: Span) -> dict[str, float]:
    by_time: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for t, labels, v in span.h.samples["nvwatch_gpu_utilization_ratio"]:
        if span.lo < t <= span.hi:
            by_time[labels["instance"]][t].append(v)
    return {
        node: statistics.fmean(statistics.fmean(vs) for vs in times.values())
        for node, times in by_time.items()
    }


# --- each panel's expected values, by legend -------------------------------------------

Expected = dict[str, tuple[float, float]]  # legend -> (value, absolute tolerance)


def _integral(value: float, span: Span, steps: float) -> tuple[float, float]:
    """`value` with a tolerance of `steps` steps at its mean over the covered time."""
    return value, value / span.covered_s * steps * STEP_S


def _ratio(value: float) -> tuple[float, float]:
    return value, RATIO_ABS


def gpu_energy_kwh(span: Span) -> Expected:
    return {"energy": _integral(sum(gpu_joules(span).values()) / KWH, span, RATE_EDGE_STEPS)}


def energy_nodes_vs_gpus(span: Span) -> Expected:
    watts = node_watts(span.h)
    # the GPUs of the nodes with BMC data, at the steps their BMC was read
    gpus = gpu_joules(span, lambda node, t: (node, t) in watts)
    return {
        "nodes": _integral(sum(node_joules(span).values()) / KWH, span, GAUGE_EDGE_STEPS),
        "GPUs": _integral(sum(gpus.values()) / KWH, span, RATE_EDGE_STEPS),
    }


def energy_per_node(span: Span) -> Expected:
    return {node: _integral(j / KWH, span, RATE_EDGE_STEPS) for node, j in gpu_joules(span).items()}


def gpu_hours(span: Span) -> Expected:
    busy, idle = gpu_seconds(span)
    return {
        "busy": _integral(busy / HOUR_S, span, GAUGE_EDGE_STEPS),
        "idle": _integral(idle / HOUR_S, span, GAUGE_EDGE_STEPS),
    }


def hbm_headroom(span: Span) -> Expected:
    peak = share_peak(
        span, "nvwatch_gpu_memory_used_bytes", "nvwatch_gpu_memory_total_bytes", "cluster"
    )
    return {"headroom": _ratio(1 - peak["sim"])}


def node_hbm_headroom(span: Span) -> Expected:
    peak = share_peak(
        span, "nvwatch_gpu_memory_used_bytes", "nvwatch_gpu_memory_total_bytes", "instance"
    )
    return {node: _ratio(1 - p) for node, p in peak.items()}


def node_power_headroom_at_peak(span: Span) -> Expected:
    peak = share_peak(span, "nvwatch_gpu_power_watts", "nvwatch_gpu_power_tdp_watts", "instance")
    return {node: _ratio(1 - p) for node, p in peak.items()}


def node_mean_util(span: Span) -> Expected:
    return {node: _ratio(u) for node, u in mean_util_per_node(span).items()}


# the panels that show the latest value: the samples at the window's end (LATEST)


def fleet_utilization(span: Span) -> Expected:
    values = [v for _, v in span.h.at("nvwatch_gpu_utilization_ratio", span.hi)]
    return {"sim": _ratio(statistics.fmean(values))}


def power_headroom_now(span: Span) -> Expected:
    now = Span(span.h, span.hi - STEP_S / 2, span.hi)
    share = share_peak(now, "nvwatch_gpu_power_watts", "nvwatch_gpu_power_tdp_watts", "instance")
    return {node: _ratio(1 - s) for node, s in share.items()}


def node_power_vs_class_max(span: Span) -> Expected:
    classes = {nc.name: nc for nc in CFG.node_classes}
    node_class = {
        labels["instance"]: labels["node_class"]
        for _, labels, _ in span.h.samples["nvwatch_bmc_power_watts"]
    }
    out = {}
    for (node, t), watts in node_watts(span.h).items():
        if t == span.hi:
            maximum = classes[node_class[node]].max_power_watts
            assert maximum
            out[node] = _ratio(watts / maximum)
    return out


def non_gpu_share(span: Span) -> Expected:
    watts = node_watts(span.h)
    nodes: dict[str, float] = defaultdict(float)
    gpus: dict[str, float] = defaultdict(float)
    for labels, v in span.h.at("nvwatch_gpu_power_watts", span.hi):
        if (labels["instance"], span.hi) in watts:
            gpus[labels["node_class"]] += v
    for labels, _ in span.h.at("nvwatch_bmc_power_watts", span.hi):
        if labels["method"] == "dcmi":
            nodes[labels["node_class"]] += watts[(labels["instance"], span.hi)]
    return {nc: _ratio(1 - gpus[nc] / nodes[nc]) for nc in nodes}


LATEST = (fleet_utilization, power_headroom_now, node_power_vs_class_max, non_gpu_share)
TRUTH: dict[tuple[str, str], Callable[[Span], Expected]] = {
    ("nvwatch-cluster-overview.json", "Fleet GPU utilization"): fleet_utilization,
    ("nvwatch-thermal-power.json", "Power headroom per node (least first)"): power_headroom_now,
    ("nvwatch-thermal-power.json", "GPU energy in the time range"): gpu_energy_kwh,
    ("nvwatch-power-cooling.json", "Node power vs class maximum (highest first)"): (
        node_power_vs_class_max
    ),
    ("nvwatch-power-cooling.json", "Non-GPU share of node power, per node class"): non_gpu_share,
    ("nvwatch-power-cooling.json", "Energy in the time range: nodes vs GPUs"): (
        energy_nodes_vs_gpus
    ),
    ("nvwatch-capacity-review.json", "GPU-hours busy / idle"): gpu_hours,
    ("nvwatch-capacity-review.json", "GPU energy"): gpu_energy_kwh,
    ("nvwatch-capacity-review.json", "Cluster HBM headroom (peak use)"): hbm_headroom,
    ("nvwatch-capacity-review.json", "Idlest nodes"): node_mean_util,
    ("nvwatch-capacity-review.json", "Busiest nodes"): node_mean_util,
    ("nvwatch-capacity-review.json", "HBM headroom per node (least first)"): node_hbm_headroom,
    ("nvwatch-capacity-review.json", "Power headroom per node at peak (least first)"): (
        node_power_headroom_at_peak
    ),
    ("nvwatch-capacity-review.json", "Energy per node"): energy_per_node,
}


@pytest.fixture(scope="module")
def dashboards() -> dict[str, dict[str, Any]]:
    return build_all(CFG)


def test_every_energy_hours_and_share_stat_has_a_truth(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    """A new stat of these units on a fleet dashboard needs its own line in TRUTH."""
    stats = {
        (name, panel["title"])
        for name in FLEET
        for panel in panels_of(dashboards[name])
        if panel["type"] in ("stat", "gauge", "bargauge") and unit_of(panel) in CHECKED_UNITS
    }
    assert stats == set(TRUTH)


def _shown(
    h: History, dashboard: dict[str, Any], title: str, at: float, range_s: float
) -> dict[str, float]:
    """The panel's values by legend, its queries sent as Grafana sends them."""
    prometheus = Prometheus(h.url)
    window = Window(at, range_s, STEP_S)
    variables = resolve_variables(dashboard, prometheus, window, {})
    (panel,) = [p for p in panels_of(dashboard) if p["title"] == title]
    result = query_panel(panel, prometheus, window, variables)
    shown: dict[str, float] = {}
    for series in result.series:
        assert series.legend not in shown, f"{title}: two series named {series.legend!r}"
        shown[series.legend] = series.last
    return shown


@pytest.mark.parametrize("window", list(WINDOWS))
@pytest.mark.parametrize(("dashboard", "title"), list(TRUTH))
def test_stat_matches_the_samples(
    history: History,
    dashboards: dict[str, dict[str, Any]],
    dashboard: str,
    title: str,
    window: str,
) -> None:
    back, range_s = WINDOWS[window]
    at = history.end + back
    truth = TRUTH[(dashboard, title)]
    back_steps = LATEST_STEPS_BACK if truth in LATEST else (0,)
    shown = _shown(history, dashboards[dashboard], title, at, range_s)
    misses = []
    for steps in back_steps:
        end = at - steps * STEP_S
        expected = truth(Span(history, end - range_s, end))
        assert set(shown) == set(expected), title
        misses = [
            f"{title} / {legend}: {shown[legend]:.4g}, samples say {value:.4g}"
            for legend, (value, tolerance) in expected.items()
            if shown[legend] != pytest.approx(value, abs=tolerance)
        ]
        if not misses:
            return
    raise AssertionError("\n".join(misses))


@pytest.mark.parametrize("window", list(WINDOWS))
def test_gpus_draw_less_than_their_nodes(
    history: History, dashboards: dict[str, dict[str, Any]], window: str
) -> None:
    back, range_s = WINDOWS[window]
    at = history.end + back
    title = "Energy in the time range: nodes vs GPUs"
    shown = _shown(history, dashboards["nvwatch-power-cooling.json"], title, at, range_s)
    assert 0 < shown["GPUs"] < shown["nodes"]
    # and so do the samples, node by node
    span = Span(history, at - range_s, at)
    nodes = node_joules(span)
    for node, joules in gpu_joules(span).items():
        assert 0 < joules < nodes[node], node
