"""The job stores without a Slurm that answers: the directory store's files (whole,
0644, never half written, read back as written), job ids checked before any file or
command, the `--job-store` spec, and Slurm's commands missing or failing as one line.

The Slurm store against a real slurmctld and slurmdbd is tests/slurm/test_job_store.py.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvwatch.report.jobs import store as store_module
from nvwatch.report.jobs.codec import StoreError
from nvwatch.report.jobs.store import (
    DirectoryStore,
    JobNotStored,
    SlurmStore,
    open_store,
    scontrol_queue_wait,
)
from nvwatch.sim.ports import free_port
from tests.conftest import require_tool

# a summary as `JobSummary.to_dict` writes one: nested rows, floats, text beyond ASCII
SUMMARY: dict[str, Any] = {
    "schema": 1,
    "job_id": "4711",
    "user": "zoë",
    "account": "ml",
    "start": 1.7e9,
    "end": 1.7e9 + 3600.25,
    "gpus": [
        {"instance": "n1", "gpu": "0", "utilization": 0.937, "energy_joules": 1.23e6},
        {"instance": "n1", "gpu": "1", "utilization": 0.0, "energy_joules": 2.5e5},
    ],
    "notes": [{"code": "idle-gpus", "text": "did not use 1 of its 2 GPUs"}],
    "truncated": False,
}


@pytest.fixture
def umask_077() -> Iterator[None]:
    """A umask that would leave a file 0600: the store's 0644 must not depend on it."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def test_a_summary_comes_back_from_its_own_file(tmp_path: Path, umask_077: None) -> None:
    store = DirectoryStore(tmp_path / "jobs")  # not there yet: put makes it
    store.put("4711", SUMMARY)
    assert store.get("4711") == SUMMARY
    path = tmp_path / "jobs" / "4711.json"
    # one plain JSON file per job, readable by everyone who runs `nvwatch job`
    assert json.loads(path.read_text(encoding="utf-8")) == SUMMARY
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == ["4711.json"]  # no temp left
    assert store.description == f"job store {tmp_path / 'jobs'}"


def test_array_and_het_job_ids_are_files_of_their_own(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    for job, user in (("12", "a"), ("12_3", "b"), ("12+1", "c")):
        store.put(job, {**SUMMARY, "user": user})
    assert [store.get(j)["user"] for j in ("12", "12_3", "12+1")] == ["a", "b", "c"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["12+1.json", "12.json", "12_3.json"]


def test_a_reader_never_sees_half_a_summary(tmp_path: Path) -> None:
    """A writer replacing a large summary with another while a reader reads it: every
    read is one of the two, whole."""
    store = DirectoryStore(tmp_path)
    rows = [{"instance": f"n{i}", "gpu": str(i % 8), "utilization": i / 512} for i in range(512)]
    versions = [{**SUMMARY, "gpus": rows, "end": float(v)} for v in (1, 2)]
    store.put("7", versions[0])
    done = threading.Event()

    def write() -> None:
        for i in range(100):
            store.put("7", versions[i % 2])
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    try:
        while not done.is_set() and reads < 10_000:
            assert store.get("7")["end"] in (1.0, 2.0)  # a torn file would not parse
            reads += 1
    finally:
        writer.join(timeout=60)
    assert reads > 0 and not writer.is_alive()


def test_a_failed_write_keeps_the_summary_that_was_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    store.put("4711", SUMMARY)
    with pytest.raises(StoreError, match="summary is not JSON") as not_json:
        store.put("4711", {**SUMMARY, "end": object()})

    def disk_full(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(StoreError, match=r"cannot write .*4711\.json: No space left") as full:
        store.put("4711", {**SUMMARY, "user": "mallory"})
    monkeypatch.undo()
    assert store.get("4711") == SUMMARY
    assert sorted(p.name for p in tmp_path.iterdir()) == ["4711.json"]
    for caught in (not_json, full):
        assert "\n" not in str(caught.value)


def test_a_job_not_stored_is_one_line_naming_the_store(tmp_path: Path) -> None:
    with pytest.raises(JobNotStored) as caught:
        DirectoryStore(tmp_path).get("4711")
    assert str(caught.value) == f"job 4711 is not in the job store {tmp_path}"


@pytest.mark.parametrize("job", ["", "abc", "12_", "12+", "12_3_4", "-1", "../4711", "12;id"])
def test_what_is_not_a_job_id_is_refused_before_any_file_or_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: str
) -> None:
    """No file is made or read, and no Slurm command runs: a sacct that would run leaves
    a mark."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "ran"
    for tool in ("sacct", "sacctmgr", "squeue"):
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\necho {tool} >> {mark}\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    jobs = tmp_path / "jobs"
    for call in (
        lambda: DirectoryStore(jobs).put(job, SUMMARY),
        lambda: DirectoryStore(jobs).get(job),
        lambda: SlurmStore().put(job, SUMMARY),
        lambda: SlurmStore().get(job),
    ):
        with pytest.raises(StoreError, match=r"is not a Slurm job id \(digits, 12_3 or 12\+1\)"):
            call()
    assert not jobs.exists() and not mark.exists()


def test_the_job_store_spec(tmp_path: Path) -> None:
    slurm = open_store("slurm")
    assert isinstance(slurm, SlurmStore)
    assert slurm.description == "Slurm AdminComment (sacct)"
    for spec in (f"dir:{tmp_path}", str(tmp_path)):
        store = open_store(spec)
        assert isinstance(store, DirectoryStore) and store.root == tmp_path
    with pytest.raises(StoreError, match="name `slurm` or a directory"):
        open_store("dir:")


def test_slurm_commands_not_installed_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no Slurm here
    for call in (lambda: SlurmStore().get("4711"), lambda: SlurmStore().put("4711", SUMMARY)):
        with pytest.raises(StoreError) as caught:
            call()
        assert str(caught.value) == "sacct is not on PATH: the Slurm store needs Slurm's commands"


def test_a_slurmdbd_that_does_not_answer_is_sacct_s_own_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real sacct and sacctmgr, told of a slurmdbd on a loopback port nothing
    listens on: their last line of complaint, once, and nothing written."""
    require_tool("sacct")
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=test\nSlurmctldHost=localhost(127.0.0.1)\n"
        f"SlurmctldPort={free_port()}\nAuthType=auth/none\nCredType=cred/none\n"
        "AccountingStorageType=accounting_storage/slurmdbd\n"
        f"AccountingStorageHost=127.0.0.1\nAccountingStoragePort={free_port()}\n"
        "NodeName=localhost NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN\n"
        "PartitionName=debug Nodes=localhost Default=YES\n"
    )
    monkeypatch.setenv("SLURM_CONF", str(conf))
    for call in (lambda: SlurmStore().get("4711"), lambda: SlurmStore().put("4711", SUMMARY)):
        with pytest.raises(StoreError) as caught:
            call()
        assert str(caught.value).startswith("sacct failed: sacct: error: ")
        assert "Connection refused" in str(caught.value) and "\n" not in str(caught.value)


def test_a_directory_store_without_slurm_knows_no_queue_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol: not a Slurm site
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    assert DirectoryStore(tmp_path).queue_wait("4711", wait_for_record=False) is None


def test_without_slurms_configuration_scontrol_is_never_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Configless, scontrol would ask DNS for a controller: no SLURM_CONF and no file at
    the default path, and the store does not run it."""
    called = tmp_path / "called"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\n: > {called}\necho JobState=COMPLETED\n")  # builtins only
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(store_module, "DEFAULT_SLURM_CONF", tmp_path / "absent.conf")
    assert DirectoryStore(tmp_path).queue_wait("4711", wait_for_record=False) is None
    assert not called.exists()
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))  # configured: asked
    assert DirectoryStore(tmp_path).queue_wait("4711", wait_for_record=False) is None
    assert called.exists()


def test_the_queue_wait_is_read_from_scontrols_times() -> None:
    """`scontrol -o show job` with SLURM_TIME_FORMAT=%s, as slurmctld prints a job that
    ran and one still pending (its StartTime then a forecast)."""
    ran = (
        "JobId=77 JobName=wrap UserId=root(0) JobState=COMPLETED Reason=None "
        "SubmitTime=1764380000 EligibleTime=1764380005 StartTime=1764380007 "
        "EndTime=1764380022 Partition=debug"
    )
    assert scontrol_queue_wait(ran) == 7.0
    pending = ran.replace("JobState=COMPLETED", "JobState=PENDING")
    assert scontrol_queue_wait(pending) is None
    unknown = ran.replace("StartTime=1764380007", "StartTime=Unknown")
    assert scontrol_queue_wait(unknown) is None
    assert scontrol_queue_wait("") is None
