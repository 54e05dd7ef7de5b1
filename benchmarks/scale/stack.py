"""Processes of the scale benchmark: the simulated fleet (`nvwatch simulate fleet`), its
file_sd targets labelled by `nvwatch inventory` (fat-tree leaves as racks), Prometheus,
and the deploy/scale path (two vmagent shards, VictoriaMetrics, vmalert, Alertmanager).

Every process is started here and stopped by `Stack.close()`; a sampler thread records
each one's RSS every few seconds so the report has peaks, not one reading.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from benchmarks.common import REPO_ROOT, nvwatch_command, stop, wait_for_http
from tests.e2e.loopback import Endpoint, spawn_logged
from tests.e2e.service_commands import (
    alertmanager_argv,
    alertmanager_config,
    prometheus_argv,
    prometheus_config,
    victoria_metrics_argv,
    vmagent_argv,
    vmagent_scrape_config,
    vmalert_argv,
    write_yaml,
)

CLUSTER = "seed"
FIRST_SYNC_JOB_ID = 5001
FLEET_STOP_S = 120.0
NODES_PER_LEAF = 4  # 4 EDR ports per DGX-1: 16 host ports on a 36-port leaf switch


@dataclass(frozen=True)
class Placed:
    """A fault scenario on a known node, and the alert it must fire there."""

    node: int
    scenario: str
    target: str
    alert: str

    @property
    def flag(self) -> str:
        return f"{self.node}:{self.scenario}@{self.target}"


def sync_jobs(nodes: int, per_job: int) -> list[str]:
    """`simulate fleet --job` values filling the fleet with jobs of `per_job` nodes (the
    last one smaller), every GPU held, as a busy training cluster is: the rules that
    compare each job's ranks then have every GPU to compare.

    Allocated but not synchronised (`sync=no`): each node simulating every rank of its
    8-node job took 1.9 of this machine's 2 cores at 124 nodes, so its agents missed
    their polls and Prometheus its scrapes. The straggler rules read the same series
    either way (allocation, clocks, power, activity, links), and what a rule costs is
    the series it joins, not their values."""
    return [
        f"{first}-{min(first + per_job, nodes) - 1}:all,id={FIRST_SYNC_JOB_ID + n},sync=no"
        for n, first in enumerate(range(0, nodes, per_job))
        if min(first + per_job, nodes) - first >= 2
    ]


def node_name(index: int) -> str:
    return f"dgx-{index:03d}"


def write_inventory(path: Path, nodes: int, profile: str) -> None:
    """The cluster hand-over table: one row per node, racks are fat-tree leaves."""
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["hostname", "address", "node_class", "rack", "cluster"])
        for i in range(nodes):
            leaf = f"leaf-{i // NODES_PER_LEAF:02d}"
            # an address per node, as the inventory demands; merge_targets puts the
            # simulated node's real loopback port in its place
            address = f"127.1.{i // 200}.{i % 200 + 1}"
            out.writerow([node_name(i), address, profile, leaf, CLUSTER])


def merge_targets(inventory_dir: Path, fleet_sd: Path, out: Path) -> int:
    """file_sd groups with the inventory's labels and the fleet's ports (every simulated
    node listens on its own loopback port; the inventory knows one port for all)."""
    ports = {g["labels"]["instance"]: g["targets"] for g in json.loads(fleet_sd.read_text())}
    groups = []
    for path in sorted(inventory_dir.glob("nvwatch-*.json")):
        for group in json.loads(path.read_text()):
            group["targets"] = ports[group["labels"]["instance"]]
            groups.append(group)
    out.mkdir(parents=True, exist_ok=True)
    (out / "nvwatch-fleet.json").write_text(json.dumps(groups, indent=1))
    return len(groups)


@dataclass
class Sampler:
    """RSS peak of each process, sampled every `every` seconds in a thread."""

    every: float = 5.0
    peaks: dict[str, float] = field(default_factory=dict)
    _procs: dict[str, psutil.Process] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def watch(self, name: str, pid: int) -> None:
        self._procs[name] = psutil.Process(pid)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="scale-sampler").start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for name, proc in list(self._procs.items()):
                try:
                    rss = proc.memory_info().rss / 2**20
                except psutil.Error:
                    continue
                self.peaks[name] = max(self.peaks.get(name, 0.0), rss)

    def cpu_seconds(self) -> dict[str, float]:
        out = {}
        for name, proc in self._procs.items():
            try:
                times = proc.cpu_times()
                out[name] = times.user + times.system
            except psutil.Error:
                out[name] = float("nan")
        return out

    def cores_used(self) -> Callable[[], dict[str, float]]:
        """A window begun now: the call it returns gives the cores each watched process
        used over the window, and `machine`, the whole machine's busy cores (what the
        processes share their cores with, a replaying target among them)."""
        before, machine_before = self.cpu_seconds(), machine_busy_seconds()
        began = time.monotonic()

        def over_window() -> dict[str, float]:
            wall = max(time.monotonic() - began, 1e-9)
            now = self.cpu_seconds()
            used = {n: (now[n] - before.get(n, 0.0)) / wall for n in now}
            return {**used, "machine": (machine_busy_seconds() - machine_before) / wall}

        return over_window

    def stop(self) -> None:
        self._stop.set()


def machine_busy_seconds() -> float:
    """CPU seconds the machine's cores have spent busy since boot (neither idle nor
    waiting on the disk)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


@dataclass
class Stack:
    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    sampler: Sampler = field(default_factory=Sampler)

    def spawn(self, name: str, argv: list[str], ready: str | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        # its own process group: Stack.close() stops it and any children at once
        process = spawn_logged(
            argv, self.workdir / f"{name}.log", cwd=REPO_ROOT, env=env, start_new_session=True
        )
        self.processes[name] = process
        self.sampler.watch(name, process.pid)
        if ready is not None:
            wait_for_http(ready, 120, process)

    def start_fleet(
        self, nodes: int, profile: str, interval: str, placed: list[Placed], jobs: list[str]
    ) -> Path:
        sd = self.workdir / "fleet-sd.json"
        argv = [
            *nvwatch_command(),
            *("simulate", "fleet", "--profile", f"{profile}:{nodes}", "--base-port", "0"),
            *("--interval", interval, "--file-sd", str(sd), "--stats-every", "4"),
            *(a for p in placed for a in ("--scenario", p.flag)),
            *(a for j in jobs for a in ("--job", j)),
        ]
        self.spawn("fleet", argv)
        deadline = time.monotonic() + 300
        while not sd.exists():
            if self.processes["fleet"].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.workdir / "fleet.log").read_text()[-2000:])
            time.sleep(1)
        return sd

    def label_targets(self, nodes: int, profile: str, fleet_sd: Path) -> Path:
        inventory = self.workdir / "cluster.csv"
        write_inventory(inventory, nodes, profile)
        labelled = self.workdir / "inventory-sd"
        subprocess.run(
            [*nvwatch_command(), "inventory", "--in", str(inventory), "--out", str(labelled)],
            check=True,
            capture_output=True,
            cwd=REPO_ROOT,
        )
        targets = self.workdir / "targets"
        merge_targets(labelled, fleet_sd, targets)
        return targets

    def start_prometheus(self, targets: Path, rule_files: list[Path], scrape: str) -> None:
        endpoint = Endpoint.free()
        config = prometheus_config(
            rule_files=rule_files,
            targets=targets,
            scrape_interval=scrape,
            scrape_timeout="10s",
            evaluation_interval="1m",
        )
        path = write_yaml(self.workdir / "prometheus.yml", config)
        self.urls["prometheus"] = endpoint.url
        extra = (
            "--web.enable-admin-api",  # a TSDB snapshot compacts the head into a block
            "--rules.alert.for-grace-period=1m",
        )
        data = self.workdir / "prometheus-data"
        argv = prometheus_argv("prometheus", path, data, endpoint, extra)
        self.spawn("prometheus", argv, f"{endpoint.url}/-/ready")

    def start_vm_path(self, targets: Path, rule_files: list[Path], scrape: str) -> None:
        """deploy/scale's units, run as shipped but for ports, paths and the interval."""
        am_endpoint, vm_endpoint = Endpoint.free(), Endpoint.free()
        am_config = write_yaml(self.workdir / "alertmanager.yml", alertmanager_config(None))
        self.urls["alertmanager"] = am = am_endpoint.url
        am_argv = alertmanager_argv(
            "prometheus-alertmanager", am_config, self.workdir / "am-data", am_endpoint
        )
        self.spawn("alertmanager", am_argv, f"{am}/-/ready")
        self.urls["victoria-metrics"] = vm = vm_endpoint.url
        vm_argv = victoria_metrics_argv(vm_endpoint, self.vm_data)
        self.spawn("victoria-metrics", vm_argv, f"{vm}/health")
        scrape_path = self.workdir / "vmagent-scrape.yml"
        write_yaml(scrape_path, vmagent_scrape_config(targets, scrape))
        for shard in (0, 1):
            endpoint = Endpoint.free()
            self.urls[f"vmagent-{shard}"] = endpoint.url
            tmp_data = self.workdir / f"vmagent-{shard}"
            argv = vmagent_argv(shard, endpoint, scrape_path, vm, tmp_data)
            self.spawn(f"vmagent-{shard}", argv, f"{endpoint.url}/health")
        endpoint = Endpoint.free()
        self.urls["vmalert"] = endpoint.url
        argv = vmalert_argv(endpoint, rule_files, vm, am)
        self.spawn("vmalert", argv, f"{endpoint.url}/health")

    @property
    def vm_data(self) -> Path:
        return self.workdir / "vm-data"

    def close(self) -> None:
        self.sampler.stop()
        for name, process in reversed(list(self.processes.items())):
            # a fleet of a hundred nodes needs more than seconds to stop each node and
            # remove its sysfs trees in /dev/shm; killed, it would leave them there
            stop(process, grace=FLEET_STOP_S if name == "fleet" else 5.0)
