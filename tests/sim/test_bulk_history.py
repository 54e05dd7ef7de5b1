"""A bulk history read back by promtool: every node's series with its own identity and
its target labels, its BMC's under the probe job's, and values that hold together the
way hardware's do (a GPU's energy is its power added up, memory used and free make its
total, counters only grow, a node's power at its BMC rises and falls with its GPUs')."""

from __future__ import annotations

import itertools
import math
import time
from collections import defaultdict

import numpy as np
import pytest

from nvwatch.sim.bulk.write import BulkPlan, node_specs, write_bulk_history
from nvwatch.sim.series_budget import measure_bmc
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
    dumped = _dump(promtool, data)
    assert result.nodes == 3 and result.series == len(dumped)
    assert result.samples == sum(len(samples) for samples in dumped.values())
    return plan, dumped


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


def test_every_node_has_its_bmc_under_the_probe_job(
    history: tuple[BulkPlan, Dumped], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A BMC's series carry the `nvwatch-bmc` job and its node's labels with its address
    (`bmc`), as `nvwatch inventory`'s targets give them, as many as one probe of the
    profile's simulated BMC exports."""
    plan, dumped = history
    specs = {s.name: s for s in node_specs(plan)}
    per_node: dict[str, int] = defaultdict(int)
    for labels in dumped:
        own = dict(labels)
        if not own["__name__"].startswith("nvwatch_bmc_"):
            continue
        spec = specs[own["instance"]]
        assert (own["job"], own["bmc"], own["rack"], own["node_class"]) == (
            "nvwatch-bmc",
            spec.bmc,
            spec.rack,
            spec.profile,
        )
        per_node[spec.name] += 1
    probed = {
        name: measure_bmc(spec.profile, tmp_path_factory.mktemp("bmc")).series
        for name, spec in specs.items()
    }
    assert per_node == probed
    assert len({spec.bmc for spec in specs.values()}) == len(specs)


def test_a_node_s_power_at_its_bmc_follows_its_gpus(history: tuple[BulkPlan, Dumped]) -> None:
    _, dumped = history
    gpus: dict[str, np.ndarray] = {}
    for (node, _gpu), watts in _by(
        _family(dumped, "nvwatch_gpu_power_watts"), "instance", "gpu"
    ).items():
        gpus[node] = gpus.get(node, np.zeros(len(watts))) + np.array(watts)
    dcmi = {
        node: np.array(watts)
        for (node, method), watts in _by(
            _family(dumped, "nvwatch_bmc_power_watts"), "instance", "method"
        ).items()
        if method == "dcmi"
    }
    assert dcmi, "no DCMI power in the fleet"
    for node, watts in dcmi.items():
        assert watts.min() < watts.max()  # it moves with the node's load
        assert np.corrcoef(watts, gpus[node])[0, 1] > 0.99, node
        assert np.all(watts > gpus[node])  # the node draws more than its GPUs


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


def test_a_job_holds_its_node_s_gpus_exactly_while_they_are_busy(
    history: tuple[BulkPlan, Dumped],
) -> None:
    """An allocation series per GPU per job, as the agent's Slurm attribution exports
    it: present at the steps the GPU is busy and no other, ending stale; one job id for
    the node's GPUs at a time, never another node's; the GPU's own uuid."""
    _, dumped = history
    busy: dict[tuple[str, str], set[int]] = defaultdict(set)
    uuid = {}
    for labels, samples in dumped.items():
        own = dict(labels)
        if own["__name__"] == "nvwatch_gpu_utilization_ratio":
            busy[(own["instance"], own["gpu"])] = {t for t, v in samples if v > 0}
        if own["__name__"] == "nvwatch_gpu_up":
            uuid[(own["instance"], own["gpu"])] = own["uuid"]
    held: dict[tuple[str, str], set[int]] = defaultdict(set)
    jobs_of: dict[str, set[str]] = defaultdict(set)
    at: dict[tuple[str, int], set[str]] = defaultdict(set)
    for labels, samples in dumped.items():
        own = dict(labels)
        if own["__name__"] != "nvwatch_gpu_allocation_info":
            continue
        gpu = (own["instance"], own["gpu"])
        assert own["uuid"] == uuid[gpu] and own["scheduler"] == "slurm" and own["user"]
        times = {t for t, v in samples if not math.isnan(v)}
        assert not times & held[gpu]  # one job at a time
        held[gpu] |= times
        jobs_of[own["instance"]].add(own["job_id"])
        for t in times:
            at[(own["instance"], t)].add(own["job_id"])
    assert held, "no job in two hours of three nodes"
    assert {gpu: held.get(gpu, set()) for gpu in busy} == busy
    assert all(len(jobs) == 1 for jobs in at.values())
    nodes = list(jobs_of.values())
    assert all(not a & b for a, b in itertools.combinations(nodes, 2))
