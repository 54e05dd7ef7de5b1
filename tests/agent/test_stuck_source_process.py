"""A real `nvwatch serve` with one source stuck: /healthz says so, `doctor` says so, and
SIGTERM still ends the agent within its documented bound.

The host source's collect() is replaced, in the agent's own process, by one that never
returns: blocked in a read of a pipe nobody writes (as a wedged ioctl or a hung sysfs
read blocks, outside the interpreter), or spinning in Python code (which keeps the
interpreter busy, as an endless kernel log once did and made SIGTERM take up to 30 s).
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from nvwatch.agent.shutdown import SHUTDOWN_LIMIT_S
from nvwatch.sim.ports import free_port
from tests.processes import stop

_STUCK = """
import os, sys
from nvwatch.agent.sources.host import HostSource

def blocked(self):
    read_end, _write_end = os.pipe()
    os.read(read_end, 1)  # nobody writes: blocked for good, outside the interpreter

def spinning(self):
    while True:
        sum(range(10_000))

HostSource.collect = {how}
from nvwatch.agent.launch import main
main()
"""

SOURCES = ["--sources", "host,infiniband"]
# stale_after is 3 * 500 ms + the 500 ms timeout: a source running one poll for longer
# is stuck
FLAGS = [*SOURCES, "--interval", "500ms"]
STUCK_AFTER_S = 2.0


def _agent(tmp_path: Path, how: str, *argv: str) -> list[str]:
    script = tmp_path / "stuck.py"
    script.write_text(_STUCK.format(how=how))
    return [sys.executable, str(script), *argv]


def _healthz(port: int, path: str = "/healthz") -> tuple[int, str] | None:
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        client.request("GET", path)
        response = client.getresponse()
        return response.status, response.read().decode()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        client.close()


def _wait_for(process: subprocess.Popen[str], port: int, status: int) -> str:
    deadline = time.monotonic() + 60
    while True:
        answer = _healthz(port)
        if answer is not None and answer[0] == status:
            return answer[1]
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"/healthz never answered {status}: {answer}"
        time.sleep(0.1)


@pytest.mark.parametrize("how", ["blocked", "spinning"])
def test_healthz_names_a_stuck_source_and_sigterm_still_stops_the_agent(
    tmp_path: Path, how: str
) -> None:
    port = free_port()
    argv = _agent(tmp_path, how, "serve", *FLAGS, "--sysfs-root", str(tmp_path / "sys"))
    argv += ["--listen", f"127.0.0.1:{port}"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(process, port, 200)  # the first poll timed out: late, not yet stuck
        body = _wait_for(process, port, 503)
        assert body.startswith("stale: source host stuck in one poll for "), body
        assert float(body.split(" for ")[1].split("s ")[0]) >= STUCK_AFTER_S
        assert f"(limit {STUCK_AFTER_S:g}s)" in body
        # the liveness probe's path: the agent itself is alive, and a restart would not
        # unwedge what the source is stuck in
        live = _healthz(port, "/livez")
        assert live is not None and live[0] == 200, live
        started = time.monotonic()
        process.terminate()
        _, stderr = process.communicate(timeout=SHUTDOWN_LIMIT_S + 25)
        took = time.monotonic() - started
    finally:
        stop(process)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    # the bound plus what a loaded 2-core machine adds to starting the clock and exiting
    assert took < SHUTDOWN_LIMIT_S + 3.0, (took, stderr)


def test_doctor_reports_a_stuck_source_down_with_its_time_and_exits_1(tmp_path: Path) -> None:
    argv = _agent(tmp_path, "blocked", "doctor", *SOURCES, "--sysfs-root", str(tmp_path / "sys"))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("host ")]
    assert "down" in line and "timed out after 4s" in line, line
    assert "Traceback" not in done.stderr


def test_an_endless_kernel_log_neither_sticks_the_gpu_source_nor_takes_a_core(
    tmp_path: Path,
) -> None:
    """/dev/zero as --kmsg-path: it never runs dry. The GPU source stays up and fresh,
    and the agent's CPU stays a small share of one core (it was 88 % for as long as it
    ran, with the nvml source stuck in its first read of the log)."""
    port = free_port()
    argv = [sys.executable, "-m", "nvwatch.agent.cli", "serve", "--simulate", "dgx-h100"]
    argv += ["--sources", "nvml", "--kmsg-path", "/dev/zero", "--listen", f"127.0.0.1:{port}"]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        _wait_for(process, port, 200)
        agent = psutil.Process(process.pid)
        before, started = agent.cpu_times(), time.monotonic()
        time.sleep(8.0)  # a measuring window over more than one poll (every 5 s)
        after, elapsed = agent.cpu_times(), time.monotonic() - started
        answer = _healthz(port)
    finally:
        stop(process)
    share = (after.user + after.system - before.user - before.system) / elapsed
    assert answer is not None and answer[0] == 200, answer
    assert share < 0.25, f"{share:.0%} of a core"
