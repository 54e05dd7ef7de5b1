"""Slurm attribution by each way sites run it, on real pids described by a fixture /proc."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from nvwatch.agent.sources.attribution.model import GpuRef, InstanceRef, Owner, Resolution
from nvwatch.agent.sources.attribution.procfs import ProcFS
from nvwatch.agent.sources.attribution.slurm import SlurmResolver
from tests.attribution.conftest import ProcTree, Spawn

NOBODY = pwd.getpwnam("nobody").pw_uid
NOBODY_GID = grp.getgrnam("nogroup").gr_gid
UUID = "GPU-0d5a1f6e-1111-2222-3333-444455556666"

# every cgroup layout slurmstepd makes, each as a whole /proc/<pid>/cgroup file
LAYOUTS = {
    "v2": "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0",
    "v2-multiple-slurmd": (
        "0::/system.slice/node17_slurmstepd.scope/job_4242/step_batch/user/task_0"
    ),
    "v1": (
        f"12:freezer:/slurm/uid_{NOBODY}/job_4242/step_0\n"
        f"4:memory:/slurm/uid_{NOBODY}/job_4242/step_0/task_0\n"
        "1:name=systemd:/system.slice/slurmd.service"
    ),
    # what Debian 12's slurm-wlm 22.05 writes (measured, see the real-Slurm test)
    "v1-slurm_host": (
        f"6:freezer:/slurm_dgx017/uid_{NOBODY}/job_4242/step_batch\n"
        f"4:memory:/slurm_dgx017/uid_{NOBODY}/job_4242/step_batch/task_0"
    ),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_cgroup_path_names_the_job_and_the_uid_the_user(
    layout: str, proc_tree: ProcTree, spawn: Spawn
) -> None:
    pid = spawn().pid
    proc_tree.add(pid, LAYOUTS[layout], uid=NOBODY)
    found = SlurmResolver(ProcFS(proc_tree.root)).resolve([GpuRef(3, UUID, (pid,))])
    assert found.error is None
    assert found.pid_owners == {pid: Owner("slurm", "4242", "nobody")}
    assert [(a.gpu, a.uuid, a.owner.job_id, a.owner.user) for a in found.allocations] == [
        (3, UUID, "4242", "nobody")
    ]


def test_a_process_outside_slurm_has_no_owner(proc_tree: ProcTree, spawn: Spawn) -> None:
    pid = spawn().pid
    proc_tree.add(pid, "0::/user.slice/user-1000.slice/session-4.scope", uid=NOBODY)
    found = SlurmResolver(ProcFS(proc_tree.root)).resolve([GpuRef(0, UUID, (pid,))])
    assert found.allocations == () and dict(found.pid_owners) == {} and found.error is None


def test_the_environment_places_a_process_no_cgroup_does(proc_tree: ProcTree, spawn: Spawn) -> None:
    pid = spawn().pid
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_USER": "alice", "SLURM_JOB_ACCOUNT": "physics"}
    proc_tree.add(pid, "0::/user.slice", uid=NOBODY, environ=env)
    found = SlurmResolver(ProcFS(proc_tree.root)).resolve([GpuRef(1, UUID, (pid,))])
    assert found.pid_owners == {pid: Owner("slurm", "77", "alice", "physics")}
    assert [a.owner for a in found.allocations] == [Owner("slurm", "77", "alice", "physics")]


def test_the_cgroup_wins_and_the_environment_adds_the_account(
    proc_tree: ProcTree, spawn: Spawn
) -> None:
    pid = spawn().pid
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_ACCOUNT": "physics"}
    proc_tree.add(pid, LAYOUTS["v2"], uid=NOBODY, environ=env)
    found = SlurmResolver(ProcFS(proc_tree.root)).resolve([GpuRef(0, UUID, (pid,))])
    assert found.pid_owners[pid] == Owner("slurm", "4242", "nobody", "physics")


def test_mapping_directory_in_dcgm_exporters_format(tmp_path: Path, proc_tree: ProcTree) -> None:
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "0").write_text("101\n")
    (mapping / "1").write_text("102\n103\n102\n")  # two jobs share GPU 1; a repeat is one
    (mapping / "2.1").write_text("104\n")  # MIG: GPU 2, GPU instance 1
    (mapping / "README").write_text("not a GPU\n")  # ignored, as dcgm-exporter does
    (mapping / "3").mkdir()  # a directory is ignored too
    mig_uuid = "MIG-9a8b7c6d-0000-1111-2222-333344445555"
    gpus = [
        GpuRef(0, "GPU-a"),
        GpuRef(1, "GPU-b"),
        GpuRef(2, "GPU-c", instances=(InstanceRef(1, mig_uuid),)),
        GpuRef(3, "GPU-d"),
    ]
    found = SlurmResolver(ProcFS(proc_tree.root), mapping).resolve(gpus)
    assert found.error is None
    assert [(a.gpu, a.uuid, a.owner.job_id) for a in found.allocations] == [
        (0, "GPU-a", "101"),
        (1, "GPU-b", "102"),
        (1, "GPU-b", "103"),
        (2, mig_uuid, "104"),
    ]


def test_the_mapping_file_and_the_cgroup_are_one_owner(
    tmp_path: Path, proc_tree: ProcTree, spawn: Spawn
) -> None:
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "0").write_text("4242\n")
    pid = spawn().pid
    proc_tree.add(pid, LAYOUTS["v2"], uid=NOBODY)
    found = SlurmResolver(ProcFS(proc_tree.root), mapping).resolve([GpuRef(0, UUID, (pid,))])
    assert [a.owner for a in found.allocations] == [Owner("slurm", "4242", "nobody")]


def test_a_missing_mapping_directory_is_no_jobs_yet(tmp_path: Path, proc_tree: ProcTree) -> None:
    found = SlurmResolver(ProcFS(proc_tree.root), tmp_path / "absent").resolve([GpuRef(0, UUID)])
    assert found.allocations == () and found.error is None


def test_an_unreadable_proc_entry_is_an_error_and_leaves_the_others(
    proc_tree: ProcTree, spawn: Spawn
) -> None:
    good, bad = spawn().pid, spawn().pid
    proc_tree.add(good, LAYOUTS["v2"], uid=NOBODY)
    entry = proc_tree.add(bad, LAYOUTS["v1"], uid=NOBODY)
    (entry / "cgroup").unlink()
    (entry / "cgroup").mkdir()  # reading it fails with EISDIR, which even root cannot skip
    found = SlurmResolver(ProcFS(proc_tree.root)).resolve([GpuRef(0, UUID, (good, bad))])
    assert found.error is not None and f"{bad}/cgroup" in found.error
    assert dict(found.pid_owners) == {good: Owner("slurm", "4242", "nobody")}


def test_a_pid_that_exited_is_no_error(proc_tree: ProcTree, spawn: Spawn) -> None:
    child = spawn()
    child.kill()
    child.wait()
    found = SlurmResolver(ProcFS(Path("/proc"))).resolve([GpuRef(0, UUID, (child.pid,))])
    assert found.error is None and found.allocations == ()


def test_a_known_process_is_not_read_again_but_a_reused_pid_is(
    proc_tree: ProcTree, spawn: Spawn
) -> None:
    pid = spawn().pid
    entry = proc_tree.add(pid, LAYOUTS["v2"], uid=NOBODY, start_time=100)
    proc = ProcFS(proc_tree.root)
    assert proc.start_time(pid) == 100
    resolver = SlurmResolver(proc)
    assert resolver.resolve([GpuRef(0, UUID, (pid,))]).pid_owners[pid].job_id == "4242"
    # the same process (same start time): its cgroup is not read again
    (entry / "cgroup").write_text(LAYOUTS["v2"].replace("4242", "999"))
    assert resolver.resolve([GpuRef(0, UUID, (pid,))]).pid_owners[pid].job_id == "4242"
    # the pid reused by a later process: read afresh
    proc_tree.add(pid, LAYOUTS["v2"].replace("4242", "999"), uid=NOBODY, start_time=200)
    assert resolver.resolve([GpuRef(0, UUID, (pid,))]).pid_owners[pid].job_id == "999"


def _unreadable_environ_tree(root: Path, pid: int) -> None:
    tree = ProcTree(root)
    entry = tree.add(pid, "0::/user.slice/user-1000.slice/session-4.scope", uid=NOBODY)
    (entry / "environ").chmod(0)  # like another user's environ: root's to read only


def test_an_unreadable_environment_is_an_error_for_root(tmp_path: Path, spawn: Spawn) -> None:
    pid = spawn().pid
    _unreadable_environ_tree(tmp_path / "proc", pid)
    (tmp_path / "proc" / str(pid) / "environ").unlink()
    (tmp_path / "proc" / str(pid) / "environ").mkdir()  # unreadable even by root
    found = SlurmResolver(ProcFS(tmp_path / "proc")).resolve([GpuRef(0, UUID, (pid,))])
    assert found.error is not None and "environ" in found.error


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the resolver as nobody: needs root")
def test_not_root_the_environment_way_is_quietly_unavailable(spawn: Spawn) -> None:
    """The resolver run as nobody (a forked child that drops to that uid), where another
    user's environ cannot be read: no owner, and no error."""
    pid = spawn().pid
    root = Path(tempfile.mkdtemp(prefix="nvwatch-attrib-"))
    try:
        root.chmod(0o755)  # nobody must reach the tree; pytest's tmp_path is root's only
        _unreadable_environ_tree(root / "proc", pid)
        answer = _as_nobody(
            lambda: SlurmResolver(ProcFS(root / "proc")).resolve([GpuRef(0, UUID, (pid,))])
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert answer == "None 0"


def _as_nobody(resolve: Callable[[], Resolution]) -> str:
    """'<error> <allocations>' of `resolve()` run in a child process as nobody."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the child: drop to nobody, resolve, report, exit without cleanup
        try:
            os.close(read_end)
            os.setgid(NOBODY_GID)
            os.setuid(NOBODY)
            found = resolve()
            os.write(write_end, f"{found.error} {len(found.allocations)}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read().decode()
    os.waitpid(child, 0)
    return answer
