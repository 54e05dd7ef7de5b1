"""Signals in the agent's first second are handled as signals a minute later.

Loading the command line takes most of a second. A SIGTERM in that window used to kill
`nvwatch serve` with 143 and leave a simulated node's kernel log in TMPDIR; a SIGHUP
killed it with 129. The `nvwatch` entry point now records them from its first line.
Each case sends its signal at a moment read off the process's SigCgt mask in /proc:
when nvwatch's first line has run (it handles SIGTERM and SIGHUP: the earliest moment
it can do anything about a signal), or a delay after the interpreter came up (Python
handles SIGINT itself before any of a program's code runs), well inside the window the
command line takes to load.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvwatch.sim.ports import free_port
from tests.processes import stop

NVWATCH = str(Path(sys.executable).with_name("nvwatch"))  # the installed entry point


def _handles(pid: int, signum: int) -> bool:
    """Whether process `pid` has installed a handler for `signum` (SigCgt in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    (mask,) = [line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")]
    return bool(int(mask, 16) >> (signum - 1) & 1)


def _start(tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where a simulated node's files go
    process = subprocess.Popen(
        [NVWATCH, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    return process


def _wait_handled(process: subprocess.Popen[str], *signals: int) -> None:
    deadline = time.monotonic() + 30
    while not all(_handles(process.pid, s) for s in signals):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no handler was ever installed"
        time.sleep(0.001)


# (which handlers to wait for, then how long to wait before the signal)
NVWATCH_FIRST_LINE = ((signal.SIGTERM, signal.SIGHUP), 0.0)
MOMENTS = {
    "nvwatch-first-line": NVWATCH_FIRST_LINE,
    "python-up+250ms": ((signal.SIGINT,), 0.25),
    "python-up+500ms": ((signal.SIGINT,), 0.5),
}


def _at(process: subprocess.Popen[str], moment: str) -> None:
    signals, after = MOMENTS[moment]
    _wait_handled(process, *signals)
    time.sleep(after)  # the delay is what is tested, not a wait for something


def _healthz(port: int) -> int | None:
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        client.request("GET", "/healthz")
        return client.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        client.close()


def _serve(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    return _start(tmp_path, "serve", "--simulate", "dgx-h100", "--listen", f"127.0.0.1:{port}")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_stop_signal_while_starting_stops_cleanly(
    tmp_path: Path, signum: int, moment: str
) -> None:
    process = _serve(tmp_path, free_port())
    try:
        _at(process, moment)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        stop(process)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert f"received {signal.Signals(signum).name}, shutting down" in stderr
    assert list(tmp_path.iterdir()) == [], "the simulated node's files were left behind"


@pytest.mark.parametrize("moment", ["nvwatch-first-line", "python-up+250ms"])
def test_a_hangup_while_starting_is_logged_and_the_agent_serves_on(
    tmp_path: Path, moment: str
) -> None:
    port = free_port()
    process = _serve(tmp_path, port)
    try:
        _at(process, moment)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while _healthz(port) != 200:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the agent never served"
            time.sleep(0.1)
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    finally:
        stop(process)
    assert process.returncode == 0, stderr
    assert "received SIGHUP: nothing is reloaded" in stderr
    assert list(tmp_path.iterdir()) == []


def test_other_commands_still_stop_on_an_early_signal(tmp_path: Path) -> None:
    """Only `serve` keeps what came early for later: `doctor` stops as any program does
    (Ctrl-C is exit 130, as documented)."""
    process = _start(tmp_path, "doctor", "--sources", "host")
    try:
        _wait_handled(process, *NVWATCH_FIRST_LINE[0])
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        stop(process)
    assert process.returncode == 130, stderr
