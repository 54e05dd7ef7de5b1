"""A test session stopped by SIGTERM (`timeout`, a CI runner) still stops the servers its
fixtures started: tests/conftest.py makes the signal end the session as Ctrl-C does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.e2e.loopback import wait_for

REPO = Path(__file__).resolve().parents[1]

# a fixture starting a server in a session of its own (as the suite's do), stopping it
# in its teardown, and a test that runs until it is stopped
HANGING = """
import os, signal, subprocess, time
import pytest

@pytest.fixture(scope="module")
def server():
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(os.environ["SERVER_PID"], "w") as f:
        f.write(str(process.pid))
    yield process
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(10)

def test_runs_until_stopped(server):
    open(os.environ["IN_TEST"], "w").close()
    time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_both(session: subprocess.Popen[bytes], server: int) -> None:
    """Whatever a failed test left: the session and the server it started."""
    if session.poll() is None:
        session.kill()
        session.wait(10)
    if server and alive(server):
        os.kill(server, signal.SIGKILL)


@pytest.mark.parametrize("with_conftest", [True, False])
def test_a_terminated_session_tears_its_fixtures_down(tmp_path: Path, with_conftest: bool) -> None:
    """With the suite's conftest the fixture's server is stopped; without it (the
    default handler) it outlives pytest, which is what the conftest prevents."""
    (tmp_path / "test_hanging.py").write_text(HANGING)
    pid_file, in_test = tmp_path / "server.pid", tmp_path / "in-test"
    plugin = ["-p", "tests.conftest"] if with_conftest else []
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            *plugin, str(tmp_path / "test_hanging.py")]  # fmt: skip
    env = {
        **os.environ,
        "SERVER_PID": str(pid_file),
        "IN_TEST": str(in_test),
        "PYTHONPATH": str(REPO),
    }
    session = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)  # fmt: skip
    server = 0
    try:
        # the test's body runs: the fixture's set-up is over
        wait_for("the hanging test to start", in_test.is_file, 60)
        server = int(pid_file.read_text())
        session.send_signal(signal.SIGTERM)
        session.wait(30)
        assert alive(server) is not with_conftest
    finally:
        stop_both(session, server)


# the thousand-node benchmark's command with its measurement replaced by one that
# starts an engine as it does (Stack.spawn, a session of its own) and runs until stopped
BENCHMARK = """
import os, sys, time
from pathlib import Path
import benchmarks.thousand.run as thousand
from benchmarks.scale.stack import Stack

def run(*args, **kwargs):
    stack = Stack(Path(os.environ["WORKDIR"]))
    try:
        stack.spawn("engine", ["sleep", "300"])
        Path(os.environ["SERVER_PID"]).write_text(str(stack.processes["engine"].pid))
        time.sleep(60)
    finally:
        stack.close()

thousand.run = run
sys.exit(thousand.main(["--nodes", "1", "--hours", "1"]))
"""


def test_a_terminated_benchmark_stops_its_engines(tmp_path: Path) -> None:
    pid_file = tmp_path / "server.pid"
    env = {**os.environ, "SERVER_PID": str(pid_file), "WORKDIR": str(tmp_path),
           "PYTHONPATH": str(REPO)}  # fmt: skip
    session = subprocess.Popen([sys.executable, "-c", BENCHMARK], cwd=REPO, env=env)
    server = 0
    try:
        wait_for("the benchmark's engine to start",
                 lambda: pid_file.is_file() and pid_file.read_text().isdigit(), 60)  # fmt: skip
        server = int(pid_file.read_text())
        session.send_signal(signal.SIGTERM)
        assert session.wait(30) != 0
        assert not alive(server)
    finally:
        stop_both(session, server)
