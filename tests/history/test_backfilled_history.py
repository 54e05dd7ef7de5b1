"""The backfilled month in a real Prometheus says what the generator says it wrote.

Through promtool's backfill and PromQL: the power integral per node equals the ground
truth's kWh (and the simulator's own energy counter within 1 %), GPU-hours add up, every
node carries the series its class is expected to have (the mixin's node classes), each
episode shows on its node and target and in its week and nowhere else, and the alert
rules that page on a level find each fault while it lasts. The BMC's series join the GPU
series on the node's labels, node energy and inlet air match the ground truth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nvwatch.mixin.config import MixinConfig
from tests.history.backfill import HistoryPrometheus

# generating and backfilling the month (the session fixture's setup) takes ~30 s of CPU,
# far more wall time on a loaded machine
pytestmark = pytest.mark.timeout(400)
KWH = 3.6e6
WEEK_S = 7 * 86400.0
CFG = MixinConfig()
ALERTS = Path(__file__).parents[2] / "alerts" / "generated" / "nvwatch-alerts.yaml"


def _by_instance(result: list[dict[str, Any]]) -> dict[str, float]:
    return {r["metric"]["instance"]: float(r["value"][1]) for r in result}


def _nodes(history: HistoryPrometheus) -> dict[str, dict[str, Any]]:
    return {n["instance"]: n for n in history.truth["nodes"]}


def _episode(history: HistoryPrometheus, kind: str) -> dict[str, Any]:
    (episode,) = [e for e in history.truth["episodes"] if e["kind"] == kind]
    return episode


def test_power_integral_per_node_matches_the_ground_truth(
    history_prometheus: HistoryPrometheus,
) -> None:
    h = history_prometheus
    power = _by_instance(
        h.query(f"sum by (instance) (sum_over_time(nvwatch_gpu_power_watts[{h.range}]))")
    )
    nodes = _nodes(h)
    assert set(power) == set(nodes)
    for instance, node in nodes.items():
        assert power[instance] * h.step / KWH == pytest.approx(node["energy_kwh"], rel=1e-9)


def test_sampled_power_agrees_with_the_simulated_energy_counter(
    history_prometheus: HistoryPrometheus,
) -> None:
    """The simulator integrates power at its own sub-steps; the samples, one per step,
    must add up to the same energy within 1 % on every node scraped all month."""
    h = history_prometheus
    energy = "sum by (instance) (nvwatch_gpu_energy_joules_total{0})"
    counted = _by_instance(h.query(f"{energy.format('')} - {energy.format(' offset ' + h.range)}"))
    for instance, node in _nodes(h).items():
        assert counted[instance] / KWH == pytest.approx(node["energy_counter_kwh"], rel=1e-9)
        if node["missed_scrapes"] == 0:
            assert node["energy_kwh"] == pytest.approx(node["energy_counter_kwh"], rel=0.01)


def test_gpu_hours_add_up(history_prometheus: HistoryPrometheus) -> None:
    h = history_prometheus
    busy = _by_instance(
        h.query(f"sum by (instance) (sum_over_time(nvwatch_gpu_utilization_ratio[{h.range}]))")
    )
    up = _by_instance(h.query(f"sum by (instance) (sum_over_time(nvwatch_gpu_up[{h.range}]))"))
    hours = (h.end - h.start) / 3600
    for instance, node in _nodes(h).items():
        assert busy[instance] * h.step / 3600 == pytest.approx(node["gpu_hours_busy"], rel=1e-9)
        assert up[instance] * h.step / 3600 == pytest.approx(node["gpu_hours_up"], rel=1e-9)
        missed = node["missed_scrapes"] * h.step / 3600
        assert node["gpu_hours_up"] == pytest.approx(node["gpus"] * (hours - missed))


def test_every_node_has_the_series_its_class_expects(history_prometheus: HistoryPrometheus) -> None:
    h = history_prometheus
    classes = {c.name: c for c in CFG.node_classes}
    gpus = _by_instance(h.query("count by (instance) (nvwatch_gpu_up)"))
    ports = _by_instance(h.query("count by (instance) (nvwatch_ib_port_state)"))
    links = _by_instance(h.query("max by (instance) (nvwatch_nvlink_up)"))
    rates = _by_instance(h.query("max by (instance) (nvwatch_ib_port_rate_bytes_per_second)"))
    for instance, node in _nodes(h).items():
        expected = classes[node["node_class"]]
        assert gpus[instance] == expected.gpus == node["gpus"]
        assert ports[instance] == expected.ib_ports
        assert links[instance] == expected.nvlinks_per_gpu
        assert rates[instance] == expected.ib_rate_bytes_per_second
    # the families the capacity review and the alerts read, on every node
    for family in (
        "nvwatch_gpu_memory_used_bytes",
        "nvwatch_gpu_power_limit_watts",
        "nvwatch_gpu_power_tdp_watts",
        "nvwatch_gpu_temperature_celsius",
        "nvwatch_gpu_clock_event_active",
        "nvwatch_nvlink_transmit_bytes_total",
        "nvwatch_nvlink_speed_bytes_per_second",
        "nvwatch_ib_port_transmit_bytes_total",
        "nvwatch_ib_port_transmit_wait_total",
        "nvwatch_ib_port_errors_total",
    ):
        assert set(_by_instance(h.query(f"count by (instance) ({family})"))) == set(_nodes(h))
    hopper = [i for i, n in _nodes(h).items() if n["node_class"] == "dgx-h100"]
    gpm = _by_instance(h.query("count by (instance) (nvwatch_gpu_tensor_active_ratio)"))
    assert sorted(gpm) == sorted(hopper) and hopper


# kind -> (PromQL that is non-empty while the episode's signal is on, labels naming it)
def _signals(step: float) -> dict[str, tuple[str, tuple[str, ...]]]:
    congestion = (
        f"rate(nvwatch_ib_port_transmit_wait_total{{job='nvwatch'}}[{int(2 * step)}s])"
        f" * {CFG.ib_transmit_wait_tick_seconds:g} > {CFG.ib_transmit_wait_ratio:g}"
    )
    return {
        # the GPU's own cooling: slowdown on a node whose fans all turn (a stopped fan
        # slows the GPUs behind it too: that is the fan failure's episode)
        "thermal-runaway": (
            "nvwatch_gpu_clock_event_active{reason='sw_thermal_slowdown'} == 1"
            " unless on (cluster, instance) (nvwatch_bmc_fan_speed_rpm == 0)",
            ("instance", "gpu"),
        ),
        "power-capped": (
            "count by (instance) (nvwatch_gpu_power_limit_watts < nvwatch_gpu_power_tdp_watts)",
            ("instance",),
        ),
        "ib-congestion": (congestion, ("instance", "device")),
        "ecc-dbe": (
            "nvwatch_gpu_ecc_errors_total{type='uncorrected', scope='volatile'} > 0",
            ("instance", "gpu"),
        ),
        "agent-down": ("up{job='nvwatch'} == 0", ("instance",)),
        "idle": ("max by (instance) (nvwatch_gpu_utilization_ratio) == 0", ("instance",)),
        # every DGX class's envelope is 30 °C or more; the room is at 25
        "hot-aisle": (
            "max by (rack) (nvwatch_bmc_temperature_celsius{entity='inlet'}) > 30",
            ("rack",),
        ),
        "fan-failure": ("nvwatch_bmc_fan_speed_rpm == 0", ("instance", "sensor")),
        "psu-failure": ("nvwatch_bmc_power_supply_failed == 1", ("instance", "sensor")),
    }


def _identity(episode: dict[str, Any], labels: tuple[str, ...]) -> dict[str, str]:
    values = {
        "instance": episode["node"],
        "gpu": str(episode["gpu"]),
        "device": episode["device"],
        "rack": episode["rack"],
        "sensor": episode["fan"] or episode["supply"],
    }
    return {name: values[name] for name in labels}


EPISODES = ["thermal-runaway", "power-capped", "ib-congestion", "ecc-dbe", "agent-down", "idle"]


@pytest.mark.parametrize("kind", [*EPISODES, "hot-aisle", "fan-failure", "psu-failure"])
def test_each_episode_shows_on_its_node_in_its_week_and_nowhere_else(
    history_prometheus: HistoryPrometheus, kind: str
) -> None:
    h = history_prometheus
    expr, labels = _signals(h.step)[kind]
    episode = _episode(h, kind)
    result = h.query_range(expr, h.start, h.end, h.step)
    assert [{k: r["metric"].get(k) for k in labels} for r in result] == [
        _identity(episode, labels)
    ], f"{kind}: the signal must show on exactly its node and target"
    times = [float(t) for t, _ in result[0]["values"]]
    first, last = min(times), max(times)
    # seen from the first samples after it begins to the last before it ends (a thermal
    # runaway takes minutes to cross slowdown and cools for a while after the repair)
    assert episode["start"] <= first <= episode["start"] + 3 * h.step
    assert episode["end"] - 2 * h.step <= last <= episode["end"] + 4 * h.step
    assert int((first - h.start) // WEEK_S) + 1 == episode["week"]
    if kind == "power-capped":
        node = _nodes(h)[episode["node"]]
        assert {float(v) for _, v in result[0]["values"]} == {float(node["gpus"])}


def test_episode_magnitudes_match_the_ground_truth(history_prometheus: HistoryPrometheus) -> None:
    h = history_prometheus
    thermal = _episode(h, "thermal-runaway")
    slowdown = h.query(
        f"sum_over_time(nvwatch_gpu_clock_event_active{{instance='{thermal['node']}', "
        f"gpu='{thermal['gpu']}', reason='sw_thermal_slowdown'}}[{h.range}])"
    )
    assert float(slowdown[0]["value"][1]) * h.step >= thermal["measured"]["slowdown_seconds"] > 0
    hottest = h.query(
        f"max_over_time(nvwatch_gpu_temperature_celsius{{instance='{thermal['node']}', "
        f"gpu='{thermal['gpu']}', sensor='gpu'}}[{h.range}])"
    )
    assert float(hottest[0]["value"][1]) == thermal["measured"]["peak_temperature_celsius"]
    capped = _episode(h, "power-capped")
    limit = h.query(
        f"min_over_time(nvwatch_gpu_power_limit_watts[{h.range}])"
        " < 0.99 * nvwatch_gpu_power_tdp_watts"
    )
    assert {float(r["value"][1]) for r in limit} == {capped["measured"]["power_limit_watts"]}
    congested = _episode(h, "ib-congestion")
    span = congested["end"] - congested["start"]
    wait = h.query(
        f"increase(nvwatch_ib_port_transmit_wait_total{{instance='{congested['node']}', "
        f"device='{congested['device']}'}}[{int(span)}s]) / {int(span)} "
        f"* {CFG.ib_transmit_wait_tick_seconds:g}",
        at=congested["end"] - congested["end"] % h.step,
    )
    share = float(wait[0]["value"][1])
    assert share == pytest.approx(congested["measured"]["transmit_wait_share"], rel=0.05)
    assert share > CFG.ib_transmit_wait_ratio
    ecc = _episode(h, "ecc-dbe")
    xids = h.query(f"nvwatch_gpu_xid_errors_total{{instance='{ecc['node']}'}}")
    assert (
        {(r["metric"]["gpu"], r["metric"]["xid"]) for r in xids}
        == {(str(ecc["gpu"]), xid) for xid in ecc["measured"]["xids"]}
        == {(str(ecc["gpu"]), "48"), (str(ecc["gpu"]), "63")}
    )


@pytest.mark.parametrize(
    ("alert", "kind", "labels"),
    [
        ("NvwatchGpuThermalSlowdown", "thermal-runaway", ("instance", "gpu")),
        ("NvwatchGpuPowerCapped", "power-capped", ("instance",)),
        ("NvwatchGpuEccUncorrectable", "ecc-dbe", ("instance", "gpu")),
        ("NvwatchAgentDown", "agent-down", ("instance",)),
    ],
)
def test_level_alerts_find_each_fault_while_it_lasts(
    history_prometheus: HistoryPrometheus, alert: str, kind: str, labels: tuple[str, ...]
) -> None:
    """The rule's own expression (alerts/generated), evaluated at a sample in the middle of
    the episode and at one a day before it began. Rate-based rules need samples closer
    than a 15-minute step and are left to the live end-to-end tests."""
    h = history_prometheus
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    (expr,) = [r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert]
    episode = _episode(h, kind)
    middle = (episode["start"] + episode["end"]) / 2
    middle -= (middle - h.start) % h.step
    firing = {tuple(r["metric"].get(k) for k in labels) for r in h.query(expr, at=middle)}
    assert firing == {tuple(_identity(episode, labels).values())}
    before = episode["start"] - 86400
    before -= (before - h.start) % h.step
    assert h.query(expr, at=before) == []


def test_bmc_series_join_the_gpu_series_of_their_node(
    history_prometheus: HistoryPrometheus,
) -> None:
    h = history_prometheus
    share = h.query(
        "sum by (cluster, instance) (nvwatch_gpu_power_watts)"
        " / on (cluster, instance) nvwatch_bmc_power_watts{method='dcmi'}"
    )
    assert {r["metric"]["instance"] for r in share} == set(_nodes(h))
    assert all(0.1 < float(r["value"][1]) < 0.9 for r in share)  # the GPUs and the rest
    bmc = h.query("nvwatch_bmc_up")
    for r in bmc:
        node = _nodes(h)[r["metric"]["instance"]]
        assert r["metric"]["job"] == "nvwatch-bmc" and r["metric"]["bmc"] == node["bmc"]
        assert (r["metric"]["rack"], r["metric"]["node_class"]) == (
            node["rack"],
            node["node_class"],
        )
    # the agent-down node's BMC answered all along: node power has no gap
    down = _episode(h, "agent-down")
    samples = h.query(
        f"count_over_time(nvwatch_bmc_power_watts{{method='dcmi', instance='{down['node']}'}}"
        f"[{h.range}])"
    )
    assert float(samples[0]["value"][1]) == round((h.end - h.start) / h.step)


def test_node_energy_and_inlet_air_match_the_ground_truth(
    history_prometheus: HistoryPrometheus,
) -> None:
    h = history_prometheus
    energy = _by_instance(
        h.query(f"sum_over_time(nvwatch_bmc_power_watts{{method='dcmi'}}[{h.range}])")
    )
    for instance, node in _nodes(h).items():
        assert energy[instance] * h.step / KWH == pytest.approx(node["node_energy_kwh"], rel=1e-9)
        assert node["node_energy_kwh"] > node["energy_kwh"]
    inlet = "max by (rack) (nvwatch_bmc_temperature_celsius{entity='inlet'})"
    for key, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        found = h.query(f"quantile_over_time({q}, ({inlet})[{h.range}:{int(h.step)}s])")
        by_rack = {r["metric"]["rack"]: float(r["value"][1]) for r in found}
        truth = {r["rack"]: r["hottest_inlet_celsius"][key] for r in h.truth["racks"]}
        assert by_rack == pytest.approx(truth), key
    aisle = _episode(h, "hot-aisle")
    above = h.query(
        f"count_over_time((max by (rack) (nvwatch_bmc_temperature_celsius{{entity='inlet'}})"
        f" > 30)[{h.range}:{int(h.step)}s])"
    )
    assert {r["metric"]["rack"]: float(r["value"][1]) * h.step for r in above} == {
        aisle["rack"]: aisle["measured"]["seconds_above_envelope"]
    }


def test_scheduler_demand_and_fairness_as_promql_reads_them(
    history_prometheus: HistoryPrometheus,
) -> None:
    """The controller's scheduler series, read by Prometheus' own functions as a capacity
    review would (histogram_quantile, subqueries, counter differences), give the ground
    truth's demand, waits and GPU-hours."""
    h = history_prometheus
    sched, step = h.truth["scheduler"], int(h.step)
    wanted = (
        "(sum by (partition) (nvwatch_scheduler_pending_gpus{reason=~'resources|priority'})"
        " or 0 * sum by (partition) (nvwatch_scheduler_gpus{state='idle'}))"
    )
    idle = "sum by (partition) (nvwatch_scheduler_gpus{state='idle'})"
    unmet = f"clamp_min({wanted} - {idle}, 0)"
    peak = h.query(f"max_over_time({unmet}[{h.range}:{step}s])")
    above = h.query(f"avg_over_time(({wanted} > bool {idle})[{h.range}:{step}s])")
    typical = h.query(f"quantile_over_time(0.5, {unmet}[{h.range}:{step}s])")
    waits = "nvwatch_scheduler_wait_seconds_bucket"
    increase = f"sum by (partition, le) ({waits} - {waits} offset {h.range})"
    for row in sched["partitions"]:
        name = row["partition"]

        def of(result: list[dict[str, Any]], partition: str = name) -> float:
            (value,) = [
                float(r["value"][1]) for r in result if r["metric"]["partition"] == partition
            ]
            return value

        assert of(peak) == row["unmet_gpus_peak"]
        assert of(typical) == row["unmet_gpus_typical"]
        assert of(above) == pytest.approx(row["demand_above_capacity_share"], rel=1e-9)
        for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            found = h.query(f"histogram_quantile({q}, {increase})")
            expected = row["wait_seconds"][key]
            if expected is None:  # nothing started there: Prometheus says NaN
                assert str(of(found)) == "nan"
            else:
                assert of(found) == pytest.approx(expected, rel=1e-9), (name, key)
    used = "nvwatch_scheduler_allocated_gpu_seconds_total"
    hours = h.query(f"sum by (account) ({used} - {used} offset {h.range}) / 3600")
    share = h.query("nvwatch_scheduler_fairshare{kind='shares_norm'}")
    by_account = {r["metric"]["account"]: float(r["value"][1]) for r in hours}
    shares = {r["metric"]["account"]: float(r["value"][1]) for r in share}
    for row in sched["accounts"]:
        assert by_account[row["account"]] == pytest.approx(row["gpu_hours"], rel=1e-9)
        assert shares[row["account"]] == pytest.approx(row["shares_norm"], rel=1e-12)
    drained = _episode_of(h, "drained")
    count = h.query(
        f"count_over_time((nvwatch_scheduler_nodes_unavailable{{reason='drained'}} > 0)"
        f"[{h.range}:{step}s])"
    )
    assert float(count[0]["value"][1]) * h.step == drained["measured"]["drained_seconds"]


def _episode_of(history: HistoryPrometheus, kind: str) -> dict[str, Any]:
    (episode,) = [e for e in history.truth["scheduler"]["episodes"] if e["kind"] == kind]
    return episode
