"""What attribution adds to a poll: a simulated dgx-h100 with 64 GPU processes.

64 real processes (`sleep`, started here and killed after) are reported by the simulated
NVML on the node's 8 GPUs (8 per GPU, the simulator's process file), each placed in its
own Slurm job by a fixture /proc tree (cgroup v2 path, uid, environment with the
account) and the GPUs named in a job-mapping directory: every Slurm way has work to do.

What it costs, in CPU:
- the poll path, each part timed where it runs: the NVML source's hook (a cache lookup
  per process and a look at the poll's pids), the `attribution` source's collect (its
  cache) and prepare (64 allocation series), and those series' share of the text render.
  Refreshes are kept out of these polls (a one-hour attribution interval);
- a refresh: the refresher's thread re-reading /proc and the mapping directory for the
  64 pids, timed on its own and spread over the polls of one attribution interval
  (default 10 s refresh, 5 s polls: half a refresh per poll).

The target: both together <= 1 ms per poll. For context the whole poll is
timed with and without attribution too; their difference is below this machine's
poll-to-poll noise, which is why the verdict sums the parts instead.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import percentile
from benchmarks.harness import POLL_INTERVAL_S, Harness, simulated_agent
from benchmarks.poll_cost import Quantiles
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.text import render_text
from nvwatch.agent.sources.attribution.source import AttributionSource
from nvwatch.agent.sources.nvml.source import NvmlSource

ATTRIBUTION_TARGET_S = 0.001
PROFILE = "dgx-h100"
PROCESSES = 64
GPUS = 8


@dataclass(frozen=True)
class AttributionCost:
    profile: str
    processes: int
    polls: int
    without: Quantiles  # process CPU per poll, attribution off
    with_attribution: Quantiles  # the same node with --attribution slurm
    parts: dict[str, float]  # median CPU per poll of each poll-path part
    refresh: Quantiles  # CPU of one refresh of all 64 pids (the refresher's thread)
    refresh_interval: float
    allocations: int  # nvwatch_gpu_allocation_info series in the last poll
    labelled: int  # process series whose job label the poll filled

    @property
    def poll_path(self) -> float:
        return sum(self.parts.values())

    @property
    def whole_poll_difference(self) -> float:
        return self.with_attribution.median - self.without.median

    @property
    def refresh_per_poll(self) -> float:
        return self.refresh.median * POLL_INTERVAL_S / self.refresh_interval

    @property
    def per_poll(self) -> float:
        return self.poll_path + self.refresh_per_poll


def measure_attribution_cost(polls: int, warmup: int, time_limit: float) -> AttributionCost:
    with tempfile.TemporaryDirectory(prefix="nvwatch-bench-attribution-") as scratch:
        root = Path(scratch)
        with _processes(PROCESSES) as pids:
            process_file, proc_root, map_dir = _node_files(root, pids)
            with simulated_agent(PROFILE, process_file=process_file) as h:
                plain = _run(h, polls, warmup, time_limit)
            changes = {
                "attribution": ("slurm",),
                # no refresh inside the measured polls: timed on its own below
                "attribution_interval": 3600.0,
                "proc_root": proc_root,
                "hpc_job_mapping_dir": map_dir,
            }
            with simulated_agent(PROFILE, process_file=process_file, config_changes=changes) as h:
                attributed = _run(h, polls, warmup, time_limit)
                parts = _poll_path_parts(h, max(50, polls))
                refresh = _refresh_times(h, max(20, polls // 5))
                # a short run can end before the refresher's first pass: after the timed
                # refreshes above, one more poll exports what they found
                h.run(1, warmup=0, time_limit=time_limit)
                allocations, labelled = _coverage(h)
    return AttributionCost(
        PROFILE,
        PROCESSES,
        len(attributed),
        Quantiles.of(plain),
        Quantiles.of(attributed),
        parts,
        Quantiles.of(refresh),
        AgentConfig().attribution_interval,
        allocations,
        labelled,
    )


def _run(harness: Harness, polls: int, warmup: int, time_limit: float) -> list[float]:
    harness.run(polls, warmup=warmup, time_limit=time_limit)
    return list(harness.times.total)


def _refresher(harness: Harness) -> AttributionSource:
    return next(s for s in harness.raw_sources if isinstance(s, AttributionSource))


def _poll_path_parts(harness: Harness, repeats: int) -> dict[str, float]:
    """Median CPU per poll of each part attribution adds to a poll."""
    source = _refresher(harness)
    refresher = source.refresher
    nvml = next(s for s in harness.raw_sources if isinstance(s, NvmlSource))
    gpus = nvml.collect().gpus  # outside every timer: the hook's input, as a poll has it
    pids = [p.pid for gpu in gpus for p in gpu.processes]
    snapshot = harness.poller.latest
    assert snapshot is not None
    part = snapshot.sources["attribution"].prepared
    assert isinstance(part, FamilySet)

    def hook() -> None:
        for pid in pids:
            refresher.labels_of(pid)
        refresher.observe(gpus)

    return {
        "NVML source hook": _median_cpu(hook, repeats),
        "attribution collect": percentile(harness.times.collect["attribution"], 50),
        "attribution prepare": percentile(harness.times.prepare["attribution"], 50),
        "allocation series in the text render": _median_cpu(lambda: render_text([part]), repeats),
    }


def _median_cpu(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.thread_time()
        work()
        times.append(time.thread_time() - started)
    return percentile(times, 50)


def _refresh_times(harness: Harness, count: int) -> list[float]:
    refresher = _refresher(harness).refresher
    times = []
    for _ in range(count):
        started = time.thread_time()
        refresher.refresh()
        times.append(time.thread_time() - started)
    return times


def _coverage(harness: Harness) -> tuple[int, int]:
    """Allocation series, and process series with a job label, in the last exposition."""
    assert harness.exposition is not None
    samples = [
        sample
        for family in text_string_to_metric_families(harness.exposition.text.decode())
        for sample in family.samples
    ]
    allocations = sum(1 for x in samples if x.name == "nvwatch_gpu_allocation_info")
    labelled = sum(
        1 for x in samples if x.name == "nvwatch_gpu_process_memory_bytes" and x.labels["job"]
    )
    return allocations, labelled


@contextmanager
def _processes(count: int) -> Iterator[list[int]]:
    children = [subprocess.Popen(["sleep", "3600"]) for _ in range(count)]
    try:
        yield [c.pid for c in children]
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait(timeout=10)


def _node_files(root: Path, pids: list[int]) -> tuple[Path, Path, Path]:
    """The simulator's process file, a /proc tree placing each pid in a job, and the
    mapping directory of the 8 GPUs."""
    proc_root, map_dir = root / "proc", root / "job-map"
    map_dir.mkdir()
    lines = []
    for n, pid in enumerate(pids):
        gpu, job = n % GPUS, 5000 + n
        lines.append(f"{gpu} {pid} {256 + n}")
        entry = proc_root / str(pid)
        entry.mkdir(parents=True)
        scope = f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"
        (entry / "cgroup").write_text(scope)
        # field 22, the start time: a refresh re-reads only this of a process it knows
        (entry / "stat").write_text(f"{pid} (python) S 1 {' '.join(['0'] * 17)} {n + 1} 0\n")
        (entry / "status").write_text(f"Name:\tpython\nUid:\t{1000 + n}\t{1000 + n}\t0\t0\n")
        env = f"SLURM_JOB_ID={job}\0SLURM_JOB_ACCOUNT=acct{n % 4}\0PATH=/usr/bin\0"
        (entry / "environ").write_text(env)
        with open(map_dir / str(gpu), "a") as mapping:
            mapping.write(f"{job}\n")
    process_file = root / "gpu-processes"
    process_file.write_text("\n".join(lines) + "\n")
    return process_file, proc_root, map_dir
