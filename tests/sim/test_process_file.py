"""The simulator can be told that a real pid uses a GPU (sim/node/process_file.py)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest

from nvwatch.agent.app import poll_and_render
from nvwatch.agent.config import AgentConfig, ConfigError
from nvwatch.agent.runtime import runtime
from nvwatch.agent.sources.registry import build_sources
from nvwatch.sim.node.process_file import MIB, ClaimedProcess, ProcessFile, parse, parse_line
from nvwatch.sim.nvml import SimulatedNvml, exec_environment
from tests.sim.conftest import handle, start

Spawn = Callable[[], subprocess.Popen[bytes]]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """spawn() -> a real, sleeping child process of this test; all killed afterwards."""
    children: list[subprocess.Popen[bytes]] = []

    def make() -> subprocess.Popen[bytes]:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        children.append(child)
        return child

    try:
        yield make
    finally:
        for child in children:
            child.kill()
            child.wait(10)


def pids_on(index: int) -> dict[int, int | None]:
    """pid -> usedGpuMemory as pynvml reports GPU `index`'s compute processes."""
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle(index))
    return {proc.pid: proc.usedGpuMemory for proc in procs}


def test_lines_name_gpu_pid_and_optional_memory() -> None:
    assert parse_line("3 4242 2048", 8) == ClaimedProcess(3, 4242, 2048 * MIB)
    assert parse_line("  0\t17  # the job's rank 0", 8) == ClaimedProcess(0, 17, None)
    assert parse_line("# gpu pid MiB", 8) is None
    assert parse_line("   ", 8) is None


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("8 4242", "no GPU 8 (the node has 8)"),
        ("1", "expected <gpu index>[/<GPU instance id>] <pid> [<memory MiB>]"),
        ("1 2 3 4", "expected <gpu index>[/<GPU instance id>] <pid> [<memory MiB>]"),
        ("x 4242", "gpu index 'x' is not a whole number"),
        ("1 -5", "pid '-5' is not a whole number"),
        ("1 0", "pid 0 is not a process"),
        ("1 4242 1.5G", "memory MiB '1.5G' is not a whole number"),
        ("1 ４２", "pid '４２' is not a whole number"),
    ],
)
def test_a_bad_line_says_why(line: str, reason: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_line(line, 8)
    assert str(raised.value) == reason


def test_bad_and_repeated_lines_warn_once_each_and_are_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "0 100\nbogus line\n0 100 5\n1 100 7\n9 1\n"
    with caplog.at_level(logging.WARNING, logger="nvwatch.sim.node.process_file"):
        claims = parse(text, 2, "procs.txt")
    assert claims == [ClaimedProcess(0, 100, None), ClaimedProcess(1, 100, 7 * MIB)]
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 3
    assert all("\n" not in m and m.startswith("procs.txt:") for m in messages)
    assert messages[0].startswith("procs.txt:2: gpu index 'bogus' is not a whole number")
    assert messages[1] == "procs.txt:3: pid 100 already on GPU 0; line skipped"
    assert messages[2].startswith("procs.txt:5: no GPU 9")


def test_the_library_lists_a_real_pid_with_its_simulated_worker(
    tmp_path: Path, spawn: Spawn
) -> None:
    child = spawn()
    path = tmp_path / "procs"
    path.write_text(f"# a job on GPU 2\n2 {child.pid} 1024\n5 {child.pid}\n")
    lib, clock = start("dgx-h100")
    worker_pids = {index: set(pids_on(index)) for index in range(8)}  # before the file
    lib.process_file = ProcessFile(path, lib.profile.gpu_count)
    clock.advance(1)
    on_two = pids_on(2)
    assert on_two[child.pid] == 1024 * MIB
    assert set(on_two) == worker_pids[2] | {child.pid}  # the simulated job's worker stays
    assert pids_on(5)[child.pid] is None  # memory not given: NVML's "not available"
    assert child.pid not in pids_on(0)


def test_the_file_is_reread_when_it_changes_at_the_next_instant(
    tmp_path: Path, spawn: Spawn
) -> None:
    first, second = spawn(), spawn()
    path = tmp_path / "procs"
    path.write_text(f"0 {first.pid} 10\n")
    lib, clock = start("dgx-a100")
    lib.process_file = ProcessFile(path, lib.profile.gpu_count)
    assert first.pid in pids_on(0)
    path.write_text(f"0 {second.pid} 20\n")
    # one stat per simulated instant: the same instant still answers from the last look
    assert first.pid in pids_on(0)
    clock.advance(1)
    assert second.pid in pids_on(0) and first.pid not in pids_on(0)


def test_a_pid_that_exits_is_dropped(tmp_path: Path, spawn: Spawn) -> None:
    child = spawn()
    path = tmp_path / "procs"
    path.write_text(f"1 {child.pid} 10\n")
    lib, clock = start("dgx-a100")
    lib.process_file = ProcessFile(path, lib.profile.gpu_count)
    assert child.pid in pids_on(1)
    child.kill()
    child.wait(10)
    clock.advance(1)
    assert child.pid not in pids_on(1)


def test_a_zombie_holds_no_gpu(tmp_path: Path, spawn: Spawn) -> None:
    child = spawn()
    path = tmp_path / "procs"
    path.write_text(f"1 {child.pid} 10\n")
    lib, clock = start("dgx-a100")
    lib.process_file = ProcessFile(path, lib.profile.gpu_count)
    child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    clock.advance(1)
    assert child.pid not in pids_on(1)


def test_a_missing_file_lists_nothing_until_it_appears(
    tmp_path: Path, spawn: Spawn, caplog: pytest.LogCaptureFixture
) -> None:
    child = spawn()
    path = tmp_path / "later"
    lib, clock = start("dgx-a100")
    lib.process_file = ProcessFile(path, lib.profile.gpu_count)
    with caplog.at_level(logging.WARNING, logger="nvwatch.sim.node.process_file"):
        for _ in range(3):
            assert child.pid not in pids_on(0)
            clock.advance(1)
    assert len(caplog.records) == 1  # said once, not once per poll
    assert "no processes from it until it can be read" in caplog.records[0].getMessage()
    path.write_text(f"0 {child.pid}\n")
    clock.advance(1)
    assert child.pid in pids_on(0)


def test_serve_option_reaches_the_exported_process_metric(tmp_path: Path, spawn: Spawn) -> None:
    child = spawn()
    path = tmp_path / "procs"
    path.write_text(f"4 {child.pid} 300\n")
    config = AgentConfig(simulate="dgx-h100", sources=("nvml",), sim_process_file=path)
    with runtime(config) as effective:
        text = poll_and_render(effective, build_sources(effective), settle=0).text.decode()
    lines = [
        line
        for line in text.splitlines()
        if line.startswith("nvwatch_gpu_process_memory_bytes{") and f'pid="{child.pid}"' in line
    ]
    assert len(lines) == 1
    assert 'gpu="4"' in lines[0]
    assert float(lines[0].rsplit(" ", 1)[1]) == 300 * MIB


def test_the_option_needs_simulate(tmp_path: Path) -> None:
    with (
        pytest.raises(ConfigError, match="--sim-process-file needs --simulate"),
        runtime(AgentConfig(sim_process_file=tmp_path / "procs")),
    ):
        pass


def test_simulate_exec_children_read_the_environment_variable(tmp_path: Path, spawn: Spawn) -> None:
    child = spawn()
    path = tmp_path / "procs"
    path.write_text(f"1 {child.pid} 64\n")
    script = (
        "import pynvml; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(1)\n"
        "print(*sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)))"
    )
    env = {**os.environ, **exec_environment("dgx-a100"), "NVWATCH_SIM_PROCESS_FILE": str(path)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert str(child.pid) in done.stdout.split()


def test_without_a_file_the_library_has_none() -> None:
    assert SimulatedNvml("dgx-a100").process_file is None
