"""A job's summary kept where Slurm keeps the job, through a real slurmctld epilog.

A one-node Slurm with slurmdbd over MariaDB (cluster.py, accounting.py) runs
deploy/slurm/nvwatch-job-epilog.sh as its EpilogSlurmctld; the job's 2 fake GRES GPUs are
a simulated node's (`nvwatch serve --simulate dgx-h100`, attributed through the
job-mapping directory the deploy/slurm prolog writes) scraped every second by a real
Prometheus. When the job ends, the epilog runs `nvwatch job --store`, and its
AdminComment holds the summary; with Prometheus stopped and its data deleted, `nvwatch
job --job-store slurm` prints the job's figures from sacct.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nvwatch.report.jobs.codec import StoreError
from nvwatch.report.jobs.store import DirectoryStore, JobNotStored, SlurmStore
from tests.conftest import require_tool
from tests.e2e.loopback import Endpoint, wait_for
from tests.e2e.service_commands import prometheus_argv, prometheus_config, write_yaml
from tests.processes import stop
from tests.slurm.accounting import Account, add_accounts
from tests.slurm.cluster import CLUSTER_NAME, Cluster, Layout, slurm_cluster
from tests.slurm.test_real_slurm import _need_slurm

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
EPILOG = REPO / "deploy" / "slurm" / "nvwatch-job-epilog.sh"
NVWATCH = str(Path(sys.executable).parent / "nvwatch")
ACCOUNT = "ml"


@dataclass
class Stack:
    cluster: Cluster
    prometheus: subprocess.Popen[bytes]
    url: str
    data: Path
    epilog_log: Path

    def epilog_said(self) -> str:
        return self.epilog_log.read_text() if self.epilog_log.exists() else "epilog said nothing"

    def nvwatch(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.cluster.env}
        return subprocess.run(
            [NVWATCH, *args], env=env, capture_output=True, text=True, timeout=120
        )

    def sacct(self, job: str, field: str) -> str:
        out = self.cluster.run("sacct", "-j", job, "-X", "-n", "-P", "-o", field)
        return out.splitlines()[0] if out else ""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    _need_slurm()
    for tool in ("mariadb-install-db", "mariadbd", "slurmdbd", "prometheus"):
        require_tool(tool)
    work = tmp_path_factory.mktemp("job-store")
    work.chmod(0o755)  # slurmctld runs the epilog wrapper from here
    agent_at, prometheus_at = Endpoint.free(), Endpoint.free()
    env_file = work / "nvwatch-job.env"
    wrapper = work / "epilog.sh"
    # its one line on failure goes to the log here (slurmctld keeps no epilog output)
    log = work / "epilog.log"
    wrapper.write_text(f"#!/bin/sh\nNVWATCH_JOB_ENV={env_file} exec {EPILOG} 2>>{log}\n")
    wrapper.chmod(0o755)
    layout = Layout(extra=f"EpilogSlurmctld={wrapper}")
    with slurm_cluster("linuxproc", accounting=True, layout=layout) as cluster:
        env_file.write_text(
            f"NVWATCH_PROMETHEUS_URL=http://{prometheus_at.address}\n"
            f"NVWATCH={NVWATCH}\nNVWATCH_JOB_STORE=slurm\nNVWATCH_JOB_TIMEOUT=30\n"
            f"SLURM_CONF={cluster.env['SLURM_CONF']}\nPATH={os.environ['PATH']}\n"
        )
        add_accounts(cluster.root, cluster.env, CLUSTER_NAME, [Account(ACCOUNT, 10, ("root",))])
        agent = subprocess.Popen(
            [
                NVWATCH, "serve", "--simulate", "dgx-h100", "--sources", "nvml",
                "--attribution", "slurm", "--hpc-job-mapping-dir", str(cluster.map_dir),
                "--listen", agent_at.address, "--interval", "1",
                "--attribution-interval", f"{ATTRIBUTION_S}s",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(work / "agent.log").open("wb"),
        )  # fmt: skip
        targets = work / "targets"
        targets.mkdir()
        group = [{"targets": [agent_at.address], "labels": {"instance": "n1", "cluster": "c1"}}]
        (targets / "agent.json").write_text(json.dumps(group))
        config = prometheus_config(
            rule_files=[], targets=targets, scrape_interval="1s",
            scrape_timeout="1s", evaluation_interval="1s",
        )  # fmt: skip
        data = work / "prometheus-data"
        argv = prometheus_argv(
            "prometheus", write_yaml(work / "p.yml", config), data, prometheus_at
        )
        prometheus = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield Stack(cluster, prometheus, f"http://{prometheus_at.address}", data, log)
        finally:
            stop(prometheus)
            stop(agent)


# how often the agent re-reads the job-mapping directory (its default is 10 s)
ATTRIBUTION_S = 2


def _submit(stack: Stack, *options: str) -> str:
    return stack.cluster.run(
        "sbatch", "--parsable", f"--account={ACCOUNT}", "--output=/dev/null", *options
    ).split(";")[0]


def _alloc_series(stack: Stack, job: str) -> int:
    done = stack.nvwatch("job", job, "--prometheus", stack.url, "--format", "json")
    return len(json.loads(done.stdout)["gpus"]) if done.returncode == 0 else 0


@pytest.fixture(scope="module")
def finished(stack: Stack) -> tuple[str, dict[str, Any]]:
    """A 2-GPU job run to its end, stored by the epilog; its summary from Prometheus once
    its allocation series has ended."""
    # held back a few seconds, so its queue wait is one a wrong sign or unit would show
    job = _submit(stack, "--gres=gpu:2", "--begin=now+5", "--wrap=sleep 15")
    wait_for(f"job {job} seen holding 2 GPUs", lambda: _alloc_series(stack, job) == 2, 90)
    wait_for(f"job {job} completed", lambda: stack.sacct(job, "State") == "COMPLETED", 120)
    wait_for(
        f"job {job}'s AdminComment",
        lambda: stack.sacct(job, "AdminComment"),
        90,
        explain=stack.epilog_said,
    )
    done = stack.nvwatch("job", job, "--prometheus", stack.url, "--format", "json")
    assert done.returncode == 0, done.stderr
    return job, json.loads(done.stdout)


def test_the_epilog_keeps_the_summary_in_the_admin_comment(
    stack: Stack, finished: tuple[str, dict[str, Any]]
) -> None:
    job, _ = finished
    comment = stack.sacct(job, "AdminComment")
    # sacctmgr stores it lowercased (Slurm 22.05): the codec reads it either way
    assert comment.upper().startswith("NVW1:") and len(comment) <= 4096


def test_a_directory_store_takes_the_queue_wait_from_slurmctld(
    stack: Stack,
    finished: tuple[str, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A site without slurmdbd: slurmctld still holds the job for MinJobAge after it ends,
    when the epilog stores its summary."""
    job, _ = finished
    monkeypatch.setenv("SLURM_CONF", stack.cluster.env["SLURM_CONF"])
    store = DirectoryStore(tmp_path)
    submit, started = (
        datetime.datetime.fromisoformat(stack.sacct(job, f)).timestamp()
        for f in ("Submit", "Start")
    )
    assert started - submit >= 5
    assert store.queue_wait(job, wait_for_record=False) == started - submit
    assert store.queue_wait("999999", wait_for_record=False) is None  # slurmctld never had it


def test_after_prometheus_forgot_sacct_answers_with_the_same_figures(
    stack: Stack, finished: tuple[str, dict[str, Any]]
) -> None:
    job, live = finished
    stop(stack.prometheus)
    shutil.rmtree(stack.data)
    gone = stack.nvwatch("job", job, "--prometheus", stack.url)
    assert gone.returncode == 2 and "cannot reach Prometheus" in gone.stderr
    kept = stack.nvwatch("job", job, "--job-store", "slurm", "--format", "json")
    assert kept.returncode == 0, kept.stderr
    stored = json.loads(kept.stdout)
    assert stored["source"] == "Slurm AdminComment (sacct), stored at the job's end"
    # the epilog ran as the job ended; the agent's allocation series outlived it until
    # attribution re-read the mapping directory the slurmd epilog had emptied, and a poll
    # and a scrape carried that (a second of slack for a loaded machine)
    assert stored["start"] == live["start"]
    assert abs(stored["end"] - live["end"]) <= ATTRIBUTION_S + 1 + 1 + 1
    assert stored["gpu_count"] == live["gpu_count"] == 2
    # the queue wait is Slurm's to know: sacct's Submit and Start, in its own text format
    submit, started = (
        datetime.datetime.fromisoformat(stack.sacct(job, f)).timestamp()
        for f in ("Submit", "Start")
    )
    assert started - submit >= 5
    assert stored["queue_wait_s"] == pytest.approx(started - submit, rel=0.005)
    assert live["queue_wait_s"] is None  # Prometheus alone does not know it
    assert [(g["instance"], g["gpu"]) for g in stored["gpus"]] == [
        (g["instance"], g["gpu"]) for g in live["gpus"]
    ]
    for s, p in zip(stored["gpus"], live["gpus"], strict=True):
        assert s["memory_total_bytes"] == p["memory_total_bytes"]
        assert s["power_limit_watts"] == p["power_limit_watts"]
        assert s["utilization"] == pytest.approx(p["utilization"], abs=0.05)
    listed = stack.nvwatch("jobs", "--since", "1d", "--job-store", "slurm", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["job_id"]: row for row in json.loads(listed.stdout)}
    # the partition from sacct, the GPUs from the stored summary
    assert (rows[job]["partition"], rows[job]["gpu_count"]) == ("debug", 2)
    text = stack.nvwatch("job", job, "--job-store", "slurm")
    assert text.returncode == 0 and f"job {job} " in text.stdout
    assert f"after {started - submit:.0f} s in the queue" in text.stdout
    assert text.stdout.rstrip().endswith(
        "source: Slurm AdminComment (sacct), stored at the job's end"
    )


def test_pending_unknown_and_foreign_comments_are_one_line_each(
    stack: Stack, finished: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _submit(stack, "--hold", "--wrap=sleep 1")
    try:
        pending = stack.nvwatch("job", held, "--job-store", "slurm")
        assert pending.returncode == 3 and "still pending" in pending.stderr
        unknown = stack.nvwatch("job", "999999", "--job-store", "slurm")
        assert unknown.returncode == 3 and "not in Slurm's accounting" in unknown.stderr
    finally:
        stack.cluster.run("scancel", held)
    other = _submit(stack, "--wrap=true")
    wait_for(f"job {other} completed", lambda: stack.sacct(other, "State") == "COMPLETED", 120)
    # as jobstats' epilog writes it (scontrol refuses a finished job)
    stack.cluster.run(
        "sacctmgr", "-i", "update", "job", "where", f"jobid={other}", "set",
        "AdminComment=JS1:eJyrVgrISc1MyS9",
    )  # fmt: skip
    wait_for(
        "the jobstats comment",
        lambda: stack.sacct(other, "AdminComment").upper().startswith("JS1:"),
        60,
    )
    foreign = stack.nvwatch("job", other, "--job-store", "slurm")
    assert foreign.returncode == 2 and "written by jobstats (JS1:)" in foreign.stderr
    for line in (pending.stderr, unknown.stderr, foreign.stderr):
        assert line.count("\n") == 1 and "Traceback" not in line
    # and nvwatch never writes over it
    for key, value in stack.cluster.env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(StoreError, match=r"already holds jobstats \(JS1:\)'s text"):
        SlurmStore().put(other, {"schema": 1})
    assert stack.sacct(other, "AdminComment").upper().startswith("JS1:")


def _gpu_row(node: int, gpu: int) -> dict[str, Any]:
    return {
        "instance": f"dgx-{node:03d}",
        "gpu": str(gpu),
        "model": "NVIDIA H100 80GB HBM3",
        "utilization": (7 * node + gpu) / 64,
        "energy_joules": 1.5e6 + 1234.5 * gpu,
    }


def test_put_and_get_through_sacctmgr_and_sacct(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that held no GPU: the epilog keeps nothing, and its empty AdminComment is a
    line of its own; a summary put there comes back equal (upper case and all, after
    sacctmgr lowercased the text), and a newer one of ours replaces it."""
    job = _submit(stack, "--wrap=true")
    wait_for(f"job {job} completed", lambda: stack.sacct(job, "State") == "COMPLETED", 120)
    wait_for(f"the epilog of job {job}", lambda: f"job {job}: " in stack.epilog_said(), 60)
    for key, value in stack.cluster.env.items():
        monkeypatch.setenv(key, value)
    store = SlurmStore()
    with pytest.raises(JobNotStored, match=f"^job {job} has no nvwatch summary in its Admin"):
        store.get(job)
    summary: dict[str, Any] = {
        "schema": 1,
        "job_id": job,
        "user": "Zoë",
        "gpus": [_gpu_row(n, g) for n in range(8) for g in range(8)],
        "notes": [{"code": "idle-gpus", "text": "did not use 3 of its 64 GPUs"}],
        "truncated": False,
    }
    store.put(job, summary)
    assert stack.sacct(job, "AdminComment").upper().startswith("NVW1:")
    assert store.get(job) == summary
    store.put(job, {**summary, "user": "Ada"})
    assert store.get(job) == {**summary, "user": "Ada"}
