"""A bulk history read back by promtool: every node's series with its own identity and
its target labels, and values that hold together the way hardware's do (a GPU's energy
is its power added up, memory used and free make its total, counters only grow)."""

from __future__ import annotations

import itertools
import time
from collections import defaultdict

import pytest

from nvwatch.sim.bulk.write import BulkPlan, node_specs, write_bulk_history
from tests.conftest import require_tool
from tests.sim.test_tsdb_block import _dump

STEP_S = 60.0
Labels = tuple[tuple[str, str], ...]
Dumped = dict[Labels, list[tuple[int, float]]]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[BulkPlan, Dumped]:
    promtool = require_tool("promtool")
    data = tmp_path_factory.mktemp("bulk")
    plan = BulkPlan(nodes=3, end_s=time.time(), hours=2, step_s=STEP_S)
    result = write_bulk_history(plan, data)
    assert result.nodes == 3 and result.samples == result.series * 120
    return plan, _dump(promtool, data)


def _family(dumped: Dumped, name: str) -> dict[Labels, list[float]]:
    return {
        tuple(p for p in labels if p[0] != "__name__"): [v for _, v in samples]
        for labels, samples in dumped.items()
        if ("__name__", name) in labels
    }


def _by(series: dict[Labels, list[float]], *keys: str) -> dict[tuple[str, ...], list[float]]:
    return {tuple(dict(labels)[k] for k in keys): values for labels, values in series.items()}


def test_every_node_has_its_own_target_labels_and_gpu_identities(
    history: tuple[BulkPlan, Dumped],
) -> None:
    plan, dumped = history
    specs = {s.name: s for s in node_specs(plan)}
    info = _family(dumped, "nvwatch_gpu_info")
    per_node: dict[str, int] = defaultdict(int)
    for labels in info:
        own = dict(labels)
        spec = specs[own["instance"]]
        assert (own["rack"], own["node_class"], own["job"]) == (spec.rack, spec.profile, "nvwatch")
        per_node[own["instance"]] += 1
    assert per_node == {"dgx-000": 8, "dgx-001": 8, "dgx-002": 8}
    uuids = _by(info, "instance", "gpu", "uuid")
    assert len({uuid for _, _, uuid in uuids}) == 24  # no two GPUs of the fleet share one
    # a GPU's series all carry its one uuid: the power series join the info series
    power = _by(_family(dumped, "nvwatch_gpu_power_watts"), "instance", "gpu", "uuid")
    assert set(power) == set(uuids)


def test_energy_is_power_added_up(history: tuple[BulkPlan, Dumped]) -> None:
    _, dumped = history
    power = _by(_family(dumped, "nvwatch_gpu_power_watts"), "instance", "gpu")
    energy = _by(_family(dumped, "nvwatch_gpu_energy_joules_total"), "instance", "gpu")
    assert set(power) == set(energy) and power
    for gpu, watts in power.items():
        joules = energy[gpu]
        added = joules[-1] - joules[0]
        # each step adds its sample's power for a step; watts are rounded to milliwatts
        assert added == pytest.approx(sum(watts[1:]) * STEP_S, abs=0.001 * STEP_S * len(watts))
        assert added > 0 or max(watts) < 100  # an idle GPU still draws a tenth of its TDP


def test_memory_used_and_free_make_the_total(history: tuple[BulkPlan, Dumped]) -> None:
    _, dumped = history
    total = _by(_family(dumped, "nvwatch_gpu_memory_total_bytes"), "instance", "gpu")
    used = _by(_family(dumped, "nvwatch_gpu_memory_used_bytes"), "instance", "gpu")
    free = _by(_family(dumped, "nvwatch_gpu_memory_free_bytes"), "instance", "gpu")
    for gpu, totals in total.items():
        for t, u, f in zip(totals, used[gpu], free[gpu], strict=True):
            assert abs(u + f - t) <= 2 * 1024 * 1024  # each rounded to a MiB
            assert 0 <= u <= t


def test_counters_grow_and_ratios_stay_within_one(history: tuple[BulkPlan, Dumped]) -> None:
    _, dumped = history
    moved = 0
    for labels, samples in dumped.items():
        name = dict(labels)["__name__"]
        values = [v for _, v in samples]
        if name.endswith("_total"):
            assert all(b >= a for a, b in itertools.pairwise(values)), labels
            moved += values[-1] > values[0]
        if name.endswith("_ratio"):
            assert all(0.0 <= v <= 1.0 for v in values), labels
    assert moved > 0
    tdp = _by(_family(dumped, "nvwatch_gpu_power_tdp_watts"), "instance", "gpu")
    power = _by(_family(dumped, "nvwatch_gpu_power_watts"), "instance", "gpu")
    assert all(max(watts) <= tdp[gpu][0] for gpu, watts in power.items())
