"""The whole agent with attribution: a simulated node whose NVML reports real pids, the
pids described by a fixture /proc, the exposition read back as Prometheus would."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.app import Agent
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.runtime import runtime
from nvwatch.agent.sources.registry import build_sources
from tests.attribution.conftest import ProcTree, Spawn
from tests.attribution.kubelet_server import Pod, fake_kubelet
from tests.attribution.test_kubernetes import SYSTEMD_CGROUP
from tests.attribution.test_slurm import LAYOUTS, NOBODY

Series = dict[str, list[tuple[dict[str, str], float]]]
PROCESS_UTILIZATION = (
    "nvwatch_gpu_process_sm_utilization_ratio",
    "nvwatch_gpu_process_memory_utilization_ratio",
)


def series_of(text: str) -> Series:
    found: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


@contextmanager
def running_agent(config: AgentConfig) -> Iterator[Agent]:
    with runtime(config) as effective:
        agent = Agent(effective, build_sources(effective))
        try:
            yield agent
        finally:
            agent.poller.stop(timeout=2)


def poll_until(agent: Agent, done: object, limit: float = 60.0) -> Series:
    """Poll until `done(series)` holds (the refresher runs on its own thread), bounded:
    generous, as a loaded machine may starve the refresher's thread for seconds.

    `done` should name every part of the exposition a test then asserts on: the NVML
    source (process labels) and the attribution source (allocations) read the cache
    concurrently within one poll, so a refresh landing between the two reads shows up
    in one of them a poll before the other."""
    deadline = time.monotonic() + limit
    while True:
        agent.poller.poll_once()
        exposition = agent.exposition()
        assert exposition is not None
        series = series_of(exposition.text.decode())
        if done(series) or time.monotonic() > deadline:  # type: ignore[operator]
            return series
        time.sleep(0.1)


def _config(tmp_path: Path, proc_tree: ProcTree, **extra: object) -> AgentConfig:
    return AgentConfig(
        simulate="dgx-h100",
        sources=("nvml",),
        sim_process_file=tmp_path / "gpu-processes",
        attribution=("slurm",),
        attribution_interval=1.0,
        proc_root=proc_tree.root,
        **extra,  # type: ignore[arg-type]
    )


def test_a_job_on_a_gpu_is_an_allocation_and_labels_its_process(
    tmp_path: Path, proc_tree: ProcTree, spawn: Spawn
) -> None:
    pid = spawn().pid
    proc_tree.add(pid, LAYOUTS["v1-slurm_host"], uid=NOBODY)
    (tmp_path / "gpu-processes").write_text(f"5 {pid} 1024\n")
    with running_agent(_config(tmp_path, proc_tree)) as agent:
        series = poll_until(
            agent, lambda s: "nvwatch_gpu_allocation_info" in s and _job_of(s, pid) == "4242"
        )
    [(labels, value)] = series["nvwatch_gpu_allocation_info"]
    gpu5 = next(x for x, _ in series["nvwatch_gpu_info"] if x["gpu"] == "5")
    assert value == 1
    assert labels == {
        "gpu": "5",
        "uuid": gpu5["uuid"],
        "scheduler": "slurm",
        "job_id": "4242",
        "user": "nobody",
        "account": "",
        "pod": "",
        "namespace": "",
        "container": "",
    }
    process = [x for x, _ in series["nvwatch_gpu_process_memory_bytes"] if x["pid"] == str(pid)]
    assert [(x["gpu"], x["job"], x["pod"]) for x in process] == [("5", "4242", "")]
    # its utilization series carry the same owner (the process runs no kernels: 0)
    for family in PROCESS_UTILIZATION:
        rows = [(x, v) for x, v in series[family] if x["pid"] == str(pid)]
        assert [(x["gpu"], x["job"], x["user"], v) for x, v in rows] == [
            ("5", "4242", process[0]["user"], 0.0)
        ], family
    # GPU series carry no job labels
    assert all("job_id" not in x and "job" not in x for x, _ in series["nvwatch_gpu_up"])


def test_mapping_directory_allocates_a_gpu_without_a_process(
    tmp_path: Path, proc_tree: ProcTree
) -> None:
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "2").write_text("9001\n")
    (tmp_path / "gpu-processes").write_text("")
    config = _config(tmp_path, proc_tree, hpc_job_mapping_dir=mapping)
    with running_agent(config) as agent:
        series = poll_until(agent, lambda s: "nvwatch_gpu_allocation_info" in s)
        assert [(x["gpu"], x["job_id"]) for x, _ in series["nvwatch_gpu_allocation_info"]] == [
            ("2", "9001")
        ]
        (mapping / "2").unlink()  # the epilog ran: the job has ended
        series = poll_until(agent, lambda s: "nvwatch_gpu_allocation_info" not in s)
    assert "nvwatch_gpu_allocation_info" not in series


def test_an_unreadable_proc_entry_degrades_to_empty_labels_never_missing_gpus(
    tmp_path: Path, proc_tree: ProcTree, spawn: Spawn
) -> None:
    good, bad = spawn().pid, spawn().pid
    proc_tree.add(good, LAYOUTS["v2"], uid=NOBODY)
    entry = proc_tree.add(bad, LAYOUTS["v2"].replace("4242", "5151"), uid=NOBODY)
    (entry / "cgroup").unlink()
    (entry / "cgroup").mkdir()
    (tmp_path / "gpu-processes").write_text(f"0 {good} 10\n1 {bad} 20\n")
    with running_agent(_config(tmp_path, proc_tree)) as agent:
        series = poll_until(
            agent,
            lambda s: (
                _source_up(s, "attribution") == 0
                and "nvwatch_gpu_allocation_info" in s
                and _job_of(s, good) == "4242"
            ),
        )
    up = {x["source"]: v for x, v in series["nvwatch_agent_source_up"]}
    assert up == {"nvml": 1, "attribution": 0}
    assert sorted(int(x["gpu"]) for x, v in series["nvwatch_gpu_up"] if v == 1) == list(range(8))
    assert [(x["gpu"], x["job_id"]) for x, _ in series["nvwatch_gpu_allocation_info"]] == [
        ("0", "4242")
    ]
    jobs = {x["pid"]: x["job"] for x, _ in series["nvwatch_gpu_process_memory_bytes"]}
    assert jobs[str(good)] == "4242" and jobs[str(bad)] == ""


def test_kubernetes_pods_through_a_kubelet_that_restarts(
    tmp_path: Path, proc_tree: ProcTree, spawn: Spawn
) -> None:
    pid = spawn().pid
    proc_tree.add(pid, SYSTEMD_CGROUP)
    (tmp_path / "gpu-processes").write_text(f"6 {pid} 512\n")
    socket = tmp_path / "pod-resources" / "kubelet.sock"
    config = dataclasses.replace(
        _config(tmp_path, proc_tree), attribution=("kubernetes",), kubelet_socket=socket
    )
    with fake_kubelet(socket) as kubelet, running_agent(config) as agent:
        first = poll_until(agent, lambda s: "nvwatch_gpu_info" in s)
        uuid6 = next(x["uuid"] for x, _ in first["nvwatch_gpu_info"] if x["gpu"] == "6")
        kubelet.set_pods(Pod("ml", "train-0", {"worker": [("nvidia.com/gpu", [uuid6])]}))
        series = poll_until(
            agent,
            lambda s: _pod_of(s, pid) == "train-0" and "nvwatch_gpu_allocation_info" in s,
        )
        assert [
            (x["gpu"], x["uuid"], x["scheduler"], x["pod"], x["namespace"], x["container"])
            for x, _ in series["nvwatch_gpu_allocation_info"]
        ] == [("6", uuid6, "kubernetes", "train-0", "ml", "worker")]
        for family in PROCESS_UTILIZATION:
            owners = [(x["pod"], x["namespace"]) for x, _ in series[family] if x["pid"] == str(pid)]
            assert owners == [("train-0", "ml")], family

        kubelet.stop()  # dead socket: empty owners and a source error, every GPU kept
        series = poll_until(
            agent,
            lambda s: (
                _source_up(s, "attribution") == 0
                and "nvwatch_gpu_allocation_info" not in s
                and _pod_of(s, pid) == ""
            ),
        )
        assert _source_up(series, "attribution") == 0
        assert "nvwatch_gpu_allocation_info" not in series
        assert _pod_of(series, pid) == ""
        assert sorted(int(x["gpu"]) for x, v in series["nvwatch_gpu_up"] if v == 1) == list(
            range(8)
        )

        kubelet.start()  # the kubelet is back: the agent dials it again by itself
        series = poll_until(
            agent,
            lambda s: "nvwatch_gpu_allocation_info" in s and _source_up(s, "attribution") == 1,
        )
    assert _source_up(series, "attribution") == 1
    assert [x["pod"] for x, _ in series["nvwatch_gpu_allocation_info"]] == ["train-0"]


def _source_up(series: Series, source: str) -> float | None:
    return next((v for x, v in series["nvwatch_agent_source_up"] if x["source"] == source), None)


def _job_of(series: Series, pid: int) -> str | None:
    rows = series.get("nvwatch_gpu_process_memory_bytes", [])
    return next((x["job"] for x, _ in rows if x["pid"] == str(pid)), None)


def _pod_of(series: Series, pid: int) -> str | None:
    rows = series.get("nvwatch_gpu_process_memory_bytes", [])
    return next((x["pod"] for x, _ in rows if x["pid"] == str(pid)), None)


def test_mig_instances_are_attributed_by_their_own_uuid(
    tmp_path: Path, proc_tree: ProcTree
) -> None:
    """GPU 0 partitioned in two: one instance named by the Slurm mapping file ("0.<gi>",
    dcgm-exporter's naming), the other held by a pod through its MIG UUID."""
    mapping = tmp_path / "map"
    mapping.mkdir()
    (tmp_path / "gpu-processes").write_text("")
    socket = tmp_path / "pod-resources" / "kubelet.sock"
    config = dataclasses.replace(
        _config(tmp_path, proc_tree, hpc_job_mapping_dir=mapping),
        attribution=("slurm", "kubernetes"),
        kubelet_socket=socket,
        mig="0:3g.40gb,3g.40gb",
    )
    with fake_kubelet(socket) as kubelet, running_agent(config) as agent:
        first = poll_until(agent, lambda s: "nvwatch_mig_info" in s)
        instances = sorted(
            (int(x["gpu_instance_id"]), x["mig_uuid"])
            for x, _ in first["nvwatch_mig_info"]
            if x["gpu"] == "0"
        )
        assert len(instances) == 2
        (gi_a, uuid_a), (_, uuid_b) = instances
        (mapping / f"0.{gi_a}").write_text("777\n")
        kubelet.set_pods(Pod("ml", "small", {"c": [("nvidia.com/mig-3g.40gb", [uuid_b])]}))
        series = poll_until(
            agent,
            lambda s: (
                len(s.get("nvwatch_gpu_allocation_info", [])) == 2
                and _source_up(s, "attribution") == 1
            ),
        )
    found = sorted(
        (x["gpu"], x["uuid"], x["scheduler"], x["job_id"], x["pod"])
        for x, _ in series["nvwatch_gpu_allocation_info"]
    )
    assert found == sorted(
        [("0", uuid_a, "slurm", "777", ""), ("0", uuid_b, "kubernetes", "", "small")]
    )
    assert _source_up(series, "attribution") == 1
