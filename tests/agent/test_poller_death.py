"""A poll loop that dies ends the agent with a non-zero exit and one line saying why.

Before, the loop's thread died (an OverflowError in its timer, anything not an
Exception) and the process lived on, serving stale data behind /healthz 503 forever; a
supervisor saw a running process and restarted nothing.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from nvwatch.agent.poller import Poller
from nvwatch.agent.sources.host import HostSource
from nvwatch.sim.ports import free_port


class Injected(BaseException):
    """Not an Exception: it escapes every `except Exception` in the loop."""


def _failing_poller(fail_on_poll: int, error: BaseException) -> Poller:
    poller = Poller([HostSource()], interval=0.1, timeout=1.0)
    real = poller.poll_once
    calls = 0

    def poll_once() -> object:
        nonlocal calls
        calls += 1
        if calls >= fail_on_poll:
            raise error
        return real()

    poller.poll_once = poll_once  # type: ignore[method-assign,assignment]
    return poller


def test_the_loop_dying_calls_on_death_with_the_reason() -> None:
    died = threading.Event()
    reasons: list[BaseException] = []
    poller = _failing_poller(2, Injected("boom"))
    poller.start(on_death=lambda exc: (reasons.append(exc), died.set()))
    try:
        assert died.wait(5)
        assert isinstance(reasons[0], Injected) and poller.failure is reasons[0]
        assert not poller.alive()
    finally:
        poller.stop()


def test_an_overflowing_timer_is_a_death_too() -> None:
    # the timer's OverflowError (an interval of 99999999999h did it before the interval
    # bounds kept such values away from the CLI)
    died = threading.Event()
    poller = Poller([HostSource()], interval=1e300, timeout=1.0)
    poller.start(on_death=lambda _exc: died.set())
    try:
        assert died.wait(5)
        assert isinstance(poller.failure, OverflowError)
    finally:
        poller.stop()


def test_a_stopped_loop_is_not_a_death() -> None:
    poller = Poller([HostSource()], interval=0.1, timeout=1.0)
    deaths: list[BaseException] = []
    poller.start(on_death=deaths.append)
    time.sleep(0.3)
    poller.stop()
    assert deaths == [] and poller.failure is None


_INJECT = """
import sys
from nvwatch.agent import poller

class Injected(BaseException):
    pass

real, calls = poller.Poller.poll_once, []

def poll_once(self):
    calls.append(1)
    if len(calls) == {fail_on}:
        raise {error}
    return real(self)

poller.Poller.poll_once = poll_once
from nvwatch.agent.cli import main
main(sys.argv[1:])
"""


def _wait_listening(process: subprocess.Popen[str], port: int) -> None:
    """Until the agent accepts connections (start-up is slower on a loaded machine)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    raise AssertionError(f"serve never listened: {process.communicate()}")


@pytest.mark.parametrize(
    ("error", "name"),
    [
        ("Injected('injected failure')", "Injected: injected failure"),
        ("SystemExit(0)", "SystemExit: 0"),  # a thread's SystemExit dies silently
        ("RuntimeError('x')", None),  # an Exception: logged, the loop polls on
    ],
)
def test_serve_exits_non_zero_when_its_poll_loop_dies(
    tmp_path: Path, error: str, name: str | None
) -> None:
    port = free_port()
    script = tmp_path / "inject.py"
    # the 3rd poll: the first runs before listening, the 2nd is the loop's own first
    script.write_text(_INJECT.format(fail_on=3, error=error))
    process = subprocess.Popen(
        [sys.executable, str(script), "serve", "--sources", "host", "--interval", "200ms",
         "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        if name is None:
            _wait_listening(process, port)
            time.sleep(1)  # five polls at 200 ms: the 3rd raised, the loop polled on
            assert process.poll() is None, process.communicate()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                assert r.status == 200
            return
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 1, stderr
    (line,) = [line for line in stderr.splitlines() if "poll loop died" in line]
    assert f"{name}; exiting 1 so a supervisor restarts the agent" in line
    assert "Traceback" not in stderr
