"""A history's BMC ground truth agrees with the BMC series it wrote, recomputed here from
the OpenMetrics file by the strict parser (node energy, the non-GPU share per class,
inlet percentiles per rack, each episode's window), and the same seed writes the same
file. Only the families read here are parsed: the strict parser takes minutes over all."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from nvwatch.sim.history.history import generate
from nvwatch.sim.history.plan import plan_history

END = 1772409600.0  # 2026-03-02T00:00Z
STEP_S = 300.0
KWH = 3.6e6
FAMILIES = (
    "up",
    "nvwatch_gpu_power_watts",
    "nvwatch_bmc_up",
    "nvwatch_bmc_power_watts",
    "nvwatch_bmc_temperature_celsius",
    "nvwatch_bmc_fan_speed_rpm",
    "nvwatch_bmc_power_supply_failed",
)

Sample = tuple[float, dict[str, str], float]  # time, labels, value


@pytest.fixture(scope="module")
def history(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, list[Sample]], dict[str, Any]]:
    """A day of six nodes at a 5-minute step: the samples by family, and the truth."""
    out = tmp_path_factory.mktemp("bmc-history") / "h.om"
    plan = plan_history(nodes=6, days=1, step=STEP_S, end=END, seed=5)
    generate(plan, out)
    by_family: dict[str, list[Sample]] = defaultdict(list)
    for family in text_string_to_metric_families(_families(out.read_text(), FAMILIES)):
        for s in family.samples:
            assert s.timestamp is not None
            by_family[s.name].append((float(s.timestamp.sec), dict(s.labels), s.value))
    truth = json.loads(out.with_name("h.truth.json").read_text())
    return by_family, truth


def _families(text: str, names: tuple[str, ...]) -> str:
    """The blocks of `names` in an OpenMetrics text (each starts at its `# HELP` line)."""
    blocks = text.removesuffix("# EOF\n").split("# HELP ")
    kept = [b for b in blocks if b.split(" ", 1)[0] in names]
    return "".join("# HELP " + b for b in kept) + "# EOF\n"


def _in_window(samples: list[Sample], truth: dict[str, Any]) -> list[Sample]:
    return [s for s in samples if s[0] > truth["start"]]


def test_node_energy_and_the_non_gpu_share(
    history: tuple[dict[str, list[Sample]], dict[str, Any]],
) -> None:
    by_family, truth = history
    node = defaultdict(float)
    for _, labels, value in _in_window(by_family["nvwatch_bmc_power_watts"], truth):
        if labels["method"] == "dcmi":
            assert labels["job"] == "nvwatch-bmc"
            node[labels["instance"]] += value * STEP_S / KWH
    gpus = defaultdict(float)
    for _, labels, value in _in_window(by_family["nvwatch_gpu_power_watts"], truth):
        gpus[labels["instance"]] += value * STEP_S / KWH
    nodes = {n["instance"]: n for n in truth["nodes"]}
    for instance, kwh in node.items():
        assert nodes[instance]["node_energy_kwh"] == pytest.approx(kwh, rel=1e-9)
        assert nodes[instance]["energy_kwh"] == pytest.approx(gpus[instance], rel=1e-9)
    for row in truth["classes"]:
        members = [n for n in nodes.values() if n["node_class"] == row["node_class"]]
        share = 1 - sum(gpus[m["instance"]] for m in members) / sum(
            node[m["instance"]] for m in members
        )
        assert row["non_gpu_share"] == pytest.approx(share, rel=1e-9)
        assert 0.2 < share < 0.8


def test_inlet_percentiles_per_rack(
    history: tuple[dict[str, list[Sample]], dict[str, Any]],
) -> None:
    by_family, truth = history
    racks: dict[str, list[float]] = defaultdict(list)
    for _, labels, value in _in_window(by_family["nvwatch_bmc_temperature_celsius"], truth):
        if labels["entity"] == "inlet":
            racks[labels["rack"]].append(value)
    for row in truth["racks"]:
        cuts = statistics.quantiles(racks[row["rack"]], n=100, method="inclusive")
        inlet = row["inlet_celsius"]
        assert (inlet["p50"], inlet["p95"], inlet["p99"]) == pytest.approx(
            (cuts[49], cuts[94], cuts[98])
        )
        assert inlet["max"] == max(racks[row["rack"]])


def _times(samples: list[Sample], **wanted: str) -> list[float]:
    return [t for t, labels, _ in samples if all(labels.get(k) == v for k, v in wanted.items())]


def test_each_bmc_fault_shows_in_its_window_only(
    history: tuple[dict[str, list[Sample]], dict[str, Any]],
) -> None:
    by_family, truth = history
    episodes = {e["kind"]: e for e in truth["episodes"]}
    fan, supply, aisle = episodes["fan-failure"], episodes["psu-failure"], episodes["hot-aisle"]
    stopped = [
        t for t, labels, v in by_family["nvwatch_bmc_fan_speed_rpm"]
        if v == 0 and labels["instance"] == fan["node"] and labels["sensor"] == fan["fan"]
    ]  # fmt: skip
    # a fault is on from its first instant (a sample at `start` sees it) to its end
    assert stopped and all(fan["start"] <= t < fan["end"] for t in stopped)
    inside = [t for t in stopped if fan["start"] < t <= fan["end"]]  # the truth's window
    assert len(inside) * STEP_S == fan["measured"]["stopped_seconds"]
    assert all(v > 0 for _, labels, v in by_family["nvwatch_bmc_fan_speed_rpm"]
               if labels["instance"] != fan["node"])  # fmt: skip
    failed = _times(
        [s for s in by_family["nvwatch_bmc_power_supply_failed"] if s[2] == 1],
        instance=supply["node"],
        sensor=supply["supply"],
    )
    assert failed and all(supply["start"] <= t < supply["end"] for t in failed)
    inside = [t for t in failed if supply["start"] < t <= supply["end"]]
    assert len(inside) * STEP_S == supply["measured"]["failed_seconds"]
    assert len(by_family["nvwatch_bmc_power_supply_failed"]) > len(failed)  # the healthy ones
    nodes = {n["instance"]: n for n in truth["nodes"]}
    hot = [
        (t, labels["instance"]) for t, labels, v in by_family["nvwatch_bmc_temperature_celsius"]
        if labels["entity"] == "inlet" and v > nodes[labels["instance"]]["inlet_envelope_celsius"]
    ]  # fmt: skip
    assert hot and {nodes[i]["rack"] for _, i in hot} == {aisle["rack"]}
    # the room warms and cools over minutes at each end of the window
    assert all(aisle["start"] < t <= aisle["end"] + 2 * STEP_S for t, _ in hot)
    inside = {t for t, _ in hot if aisle["start"] < t <= aisle["end"]}
    assert len(inside) * STEP_S == aisle["measured"]["seconds_above_envelope"]
    (rack,) = [r for r in truth["racks"] if r["rack"] == aisle["rack"]]
    assert len({t for t, _ in hot}) * STEP_S == rack["seconds_above_envelope"]
    assert len(hot) * STEP_S == rack["node_seconds_above_envelope"]


def test_the_bmc_answers_while_the_agent_is_down(
    history: tuple[dict[str, list[Sample]], dict[str, Any]],
) -> None:
    by_family, truth = history
    (down,) = [e for e in truth["episodes"] if e["kind"] == "agent-down"]
    agent_down = _times(
        [s for s in by_family["up"] if s[2] == 0], instance=down["node"], job="nvwatch"
    )
    bmc = set(_times(by_family["nvwatch_bmc_up"], instance=down["node"]))
    assert agent_down and set(agent_down) <= bmc
    assert len(bmc) == round((truth["end"] - truth["start"]) / STEP_S) + 1


def test_the_same_seed_writes_the_same_history(tmp_path: Path) -> None:
    plans = [plan_history(nodes=6, days=0.25, step=STEP_S, end=END, seed=s) for s in (5, 5, 6)]
    texts = []
    for index, plan in enumerate(plans):
        out = tmp_path / f"h{index}.om"
        generate(plan, out)
        texts.append((out.read_bytes(), out.with_name(f"h{index}.truth.json").read_text()))
    assert texts[0] == texts[1]
    assert texts[0][0] != texts[2][0]
