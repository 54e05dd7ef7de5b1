"""The jobs a history places (sim/history/jobs.py): what it wrote while each ran, read back
from the OpenMetrics file, against the job's plan, the simulator and the ground truth.

Each job's allocation exists exactly over its life on exactly its GPUs; the GPUs it holds
idle read 0 and the one it uses reads busy; a quarter-duty job reads a quarter of a busy
one; the small-memory job's HBM peak is its stated share of the board plus the CUDA
context; the power-capped job sits at the cap from the episode's start to its end; the
ports of the job that does not use InfiniBand move only their management traffic while
the one that does moves gigabytes a second; and the truth's figures are the file's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from nvwatch.sim.fabric.ib_port import SimulatedPort
from nvwatch.sim.history.plan import plan_history
from nvwatch.sim.profiles import MIB, get_profile
from nvwatch.sim.workload import Workload
from tests.history.written_history import Written, write_and_read

END = 1772409600.0  # 2026-03-02T00:00Z
STEP_S = 900.0
DAYS = 2.0


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    out = tmp_path_factory.mktemp("jobs") / "h.om"
    return write_and_read(plan_history(nodes=6, days=DAYS, step=STEP_S, end=END), out)


def test_each_allocation_exists_exactly_over_its_life_on_exactly_its_gpus(
    written: Written,
) -> None:
    allocations = written.series["nvwatch_gpu_allocation_info"]
    assert {dict(k)["job_id"] for k in allocations} == {j.job_id for j in written.plan.job_episodes}
    for job in written.plan.job_episodes:
        mine = written.of("nvwatch_gpu_allocation_info", job_id=job.job_id)
        held = {(dict(k)["instance"], int(dict(k)["gpu"])) for k in mine}
        assert held == {(node, gpu) for node in job.nodes for gpu in job.gpus}, job.kind
        life = round((job.end - job.start) / STEP_S)
        assert life >= 1
        expected = {job.start + (i + 1) * STEP_S for i in range(life)}
        for key, points in mine.items():
            labels = dict(key)
            assert (labels["user"], labels["account"]) == (job.user, job.account)
            assert set(points) == expected, f"{job.kind}: samples in (start, end] only"


def test_held_idle_gpus_read_zero_and_the_used_one_reads_busy(written: Written) -> None:
    job = written.job("idle-gpus")
    (node,) = [n["instance"] for n in job["nodes"]]
    used = written.during(job, "nvwatch_gpu_utilization_ratio", instance=node, gpu="0")
    assert min(used) > 0.85
    for gpu in range(1, 8):
        idle = written.during(job, "nvwatch_gpu_utilization_ratio", instance=node, gpu=str(gpu))
        assert len(idle) == job["seconds"] / STEP_S and set(idle) == {0.0}
        assert set(
            written.during(job, "nvwatch_gpu_memory_used_bytes", instance=node, gpu=str(gpu))
        ) == {0.0}
    healthy = written.job("healthy")
    busy = written.during(
        healthy, "nvwatch_gpu_utilization_ratio", instance=healthy["nodes"][0]["instance"]
    )
    low = written.job("low-utilization")
    low_values = [
        v
        for gpu in low["nodes"][0]["gpus"]
        for v in written.during(
            low, "nvwatch_gpu_utilization_ratio", instance=low["nodes"][0]["instance"], gpu=str(gpu)
        )
    ]
    # a quarter of the time computing: a quarter of a busy GPU's utilization
    assert sum(low_values) / len(low_values) == pytest.approx(0.25, abs=0.02)
    assert sum(busy) / len(busy) > 0.9


def test_hbm_peak_is_the_stated_share_of_the_board(written: Written) -> None:
    job = written.job("small-memory")
    node = job["nodes"][0]["instance"]
    spec = next(s for s in written.plan.nodes if s.name == node)
    board = get_profile(spec.profile).gpus[0].memory_bytes
    # 6 % of the board in whole MiB, plus the CUDA context and cuBLAS workspace
    expected = (board * 6 // 100) // MIB * MIB + 512 * MIB
    for gpu in job["nodes"][0]["gpus"]:
        peak = max(
            written.during(job, "nvwatch_gpu_memory_used_bytes", instance=node, gpu=str(gpu))
        )
        assert peak == pytest.approx(expected, abs=MIB)
    assert job["memory_peak_bytes"] == pytest.approx(expected, abs=MIB)
    assert {g["memory_total_bytes"] for g in job["gpus"]} == {float(board)}
    assert job["memory_peak_bytes"] / board < 0.1
    healthy = written.job("healthy")
    assert healthy["memory_peak_bytes"] / healthy["gpus"][0]["memory_total_bytes"] > 0.8


def test_the_power_capped_job_sits_at_the_cap_from_the_episodes_start(written: Written) -> None:
    job = written.job("power-capped")
    node = job["nodes"][0]["instance"]
    (cap,) = [e for e in written.plan.episodes if e.kind == "power-capped"]
    assert cap.node == node and job["start"] < cap.start < job["end"] <= cap.end
    # a fault due within a sub-step takes effect for it: the first sample at or after the
    # cap's start reads capped
    first_capped = job["start"] + math.ceil((cap.start - job["start"]) / STEP_S) * STEP_S
    expected_share = (job["end"] - first_capped + STEP_S) / job["seconds"]
    for gpu in job["nodes"][0]["gpus"]:
        reason = written.of(
            "nvwatch_gpu_clock_event_active", instance=node, gpu=str(gpu), reason="sw_power_cap"
        )
        (points,) = reason.values()
        active = [t for t, v in points.items() if job["start"] < t <= job["end"] and v == 1.0]
        assert len(active) * STEP_S / job["seconds"] == pytest.approx(expected_share)
        assert len(active) * STEP_S / job["seconds"] > 0.6
        truth = next(g for g in job["gpus"] if g["instance"] == node and g["gpu"] == gpu)
        assert truth["clock_event_share"]["sw_power_cap"] == len(active) * STEP_S / job["seconds"]
        power = written.of("nvwatch_gpu_power_watts", instance=node, gpu=str(gpu))
        limit = written.of("nvwatch_gpu_power_limit_watts", instance=node, gpu=str(gpu))
        (watts,), (limits,) = power.values(), limit.values()
        for t in active:
            assert watts[t] == pytest.approx(limits[t], rel=1e-6)  # at the limit


def _port_bytes(written: Written, job: dict[str, Any]) -> dict[tuple[str, str, str], float]:
    moved = {}
    for node in job["nodes"]:
        for family in (
            "nvwatch_ib_port_transmit_bytes_total",
            "nvwatch_ib_port_receive_bytes_total",
        ):
            for key, points in written.of(family, instance=node["instance"]).items():
                moved[node["instance"], dict(key)["device"], family] = (
                    points[job["end"]] - points[job["start"]]
                )
    return moved


def test_infiniband_idle_for_one_multi_node_job_and_busy_for_the_other(written: Written) -> None:
    idle, busy = written.job("idle-infiniband"), written.job("multi-node")
    assert len(idle["nodes"]) == len(busy["nodes"]) == 2
    specs = {s.name: s for s in written.plan.nodes}
    for (instance, device, _), moved in _port_bytes(written, idle).items():
        spec = specs[instance]
        (nic,) = [n for n in get_profile(spec.profile).nics if n.device == device]
        # the port as the simulator built it: its subnet-management traffic alone
        background = SimulatedPort(nic, Workload(), spec.seed).background_bytes_per_second
        assert moved == pytest.approx(background * idle["seconds"], rel=0.01, abs=8)
    for key, moved in _port_bytes(written, busy).items():
        assert moved / busy["seconds"] > 1e9, key
    for job in (idle, busy):
        assert job["ib_bytes"] == pytest.approx(sum(_port_bytes(written, job).values()), rel=1e-12)


def test_energy_from_samples_and_from_the_counter_agree(written: Written) -> None:
    """The counter integrates power at the simulator's sub-steps; the samples, one a
    step, read its last: they agree within 1 % (a GPU whose cap arrives within a step
    draws more in that step than its sample shows), to 0.01 % on a steady load."""
    for job in written.truth["jobs"]:
        for gpu in job["gpus"]:
            power = written.during(
                job, "nvwatch_gpu_power_watts", instance=gpu["instance"], gpu=str(gpu["gpu"])
            )
            assert gpu["energy_joules"] == pytest.approx(sum(power) * STEP_S, rel=1e-12)
            (counter,) = written.of(
                "nvwatch_gpu_energy_joules_total", instance=gpu["instance"], gpu=str(gpu["gpu"])
            ).values()
            assert gpu["energy_counter_joules"] == pytest.approx(
                counter[job["end"]] - counter[job["start"]], abs=1e-3
            )
            steady = job["kind"] != "power-capped"
            assert gpu["energy_joules"] == pytest.approx(
                gpu["energy_counter_joules"], rel=1e-4 if steady else 0.01
            )


def test_a_shared_node_is_split_by_gpus_held_and_an_exclusive_one_is_whole(
    written: Written,
) -> None:
    low, small = written.job("low-utilization"), written.job("small-memory")
    assert low["nodes"][0]["instance"] == small["nodes"][0]["instance"]
    assert low["nodes"][0]["shared_with"] == [small["job_id"]]
    assert low["nodes"][0]["share"] == small["nodes"][0]["share"] == 4 / 8
    for job in written.truth["jobs"]:
        for node in job["nodes"]:
            dcmi = written.of("nvwatch_bmc_power_watts", instance=node["instance"], method="dcmi")
            (points,) = dcmi.values()
            joules = sum(v for t, v in points.items() if job["start"] < t <= job["end"]) * STEP_S
            assert node["node_energy_joules"] == pytest.approx(joules, rel=1e-12)
            assert node["job_energy_joules"] == node["share"] * node["node_energy_joules"]
            if job["kind"] not in ("low-utilization", "small-memory"):
                assert node["share"] == 1.0 and node["shared_with"] == []


def test_each_job_names_the_notes_it_should_draw(written: Written) -> None:
    notes = {job["kind"]: job["notes"] for job in written.truth["jobs"]}
    assert notes == {
        "healthy": ["none"],
        "idle-gpus": ["idle-gpus"],
        "low-utilization": ["low-utilization"],
        "small-memory": ["small-memory"],
        "power-capped": ["power-capped"],
        "idle-infiniband": ["idle-infiniband"],
        "multi-node": ["none"],
    }
    ids = [job["job_id"] for job in written.truth["jobs"]]
    assert len(set(ids)) == len(ids)


def test_a_history_with_static_jobs_places_none(tmp_path: Path) -> None:
    from nvwatch.sim.fleet.jobs import parse_job

    plan = plan_history(nodes=6, days=DAYS, step=STEP_S, end=END, jobs=[parse_job("0-1:all", 0)])
    assert plan.job_episodes == ()
