"""No thread of `nvwatch serve` can die while the process looks alive.

An exception is injected into each thread's loop of a real `nvwatch serve` process; the
process must either keep serving (the server loop closes the one connection that met the
bug) or exit 1 with one line naming the thread, so systemd or the kubelet restarts it.
Before, the HTTP thread died with its listener closed and the process polled on, dark.
"""

from __future__ import annotations

import base64
import http.client
import subprocess
import sys
import time
from pathlib import Path

import bcrypt
import pytest

from nvwatch.sim.ports import free_port

_INJECT = """
import sys, importlib
module = importlib.import_module({module!r})
owner = getattr(module, {owner!r})
real, calls = getattr(owner, {method!r}), []

def injected(self, *args, **kwargs):
    calls.append(1)
    if len(calls) == {fail_on}:
        raise RuntimeError("injected failure")
    return real(self, *args, **kwargs)

setattr(owner, {method!r}, injected)
from nvwatch.agent.cli import main
main(sys.argv[1:])
"""

SIMULATED = ["--simulate", "dgx-h100", "--interval", "500ms"]
# (module, class, method, call that fails, serve's flags, thread named in the exit line)
DEATHS = [
    ("nvwatch.agent.server.loop", "EventLoop", "_sweep", 2, ["--sources", "host"], "nvwatch-http"),
    ("nvwatch.agent.poller", "_SourceWorker", "_loop", 1, ["--sources", "host"],
     "nvwatch-source-host"),
    ("nvwatch.agent.sources.nvml.xid", "XidListener", "_run", 1, [*SIMULATED, "--sources", "nvml"],
     "nvwatch-xid"),
    ("nvwatch.agent.sources.attribution.refresher", "AttributionRefresher", "_loop", 1,
     [*SIMULATED, "--sources", "nvml", "--attribution", "slurm"], "nvwatch-attribution"),
    ("nvwatch.sim.node.node", "SimulatedNode", "_run", 1,
     [*SIMULATED, "--sources", "infiniband"], "nvwatch-sim"),
    # fails before its first read of Slurm: no Slurm client runs
    ("nvwatch.agent.sources.scheduler.source", "SchedulerSource", "_loop", 1,
     ["--sources", "scheduler"], "nvwatch-scheduler"),
]  # fmt: skip


def _start(
    tmp_path: Path, target: tuple[str, str, str, int], flags: list[str]
) -> tuple[subprocess.Popen[str], int]:
    module, owner, method, fail_on = target
    script = tmp_path / "inject.py"
    script.write_text(_INJECT.format(module=module, owner=owner, method=method, fail_on=fail_on))
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(script), "serve", *flags, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, port


def _get(port: int, path: str, headers: dict[str, str] | None = None) -> int | None:
    """The status of one GET, or None when the connection failed or was closed."""
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        client.request("GET", path, headers=headers or {})
        return client.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        client.close()


def _wait_serving(process: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 60
    while _get(port, "/healthz") is None:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "agent did not start"
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("module", "owner", "method", "fail_on", "flags", "thread"),
    DEATHS,
    ids=[death[-1] for death in DEATHS],
)
def test_a_thread_that_dies_ends_the_process_with_exit_1(
    tmp_path: Path,
    module: str,
    owner: str,
    method: str,
    fail_on: int,
    flags: list[str],
    thread: str,
) -> None:
    process, port = _start(tmp_path, (module, owner, method, fail_on), flags)
    try:
        # the process either never served (the thread died at start) or stops serving
        for _ in range(200):
            if process.poll() is not None:
                break
            _get(port, "/healthz")  # the HTTP loop's sweep runs when there is a client
            time.sleep(0.1)
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 1, stderr
    (line,) = [line for line in stderr.splitlines() if "; exiting 1 so a supervisor" in line]
    assert f"thread {thread} died: RuntimeError: injected failure" in line
    # the traceback is logged once, for the developer; the last line says what happened
    assert stderr.strip().splitlines()[-1] == line


def test_a_bug_serving_one_connection_closes_that_connection_only(tmp_path: Path) -> None:
    # the first respond() is the readiness probe's; the second fails
    target = ("nvwatch.agent.server.routes", "Router", "respond", 2)
    process, port = _start(tmp_path, target, ["--sources", "host", "--interval", "200ms"])
    try:
        _wait_serving(process, port)
        assert _get(port, "/metrics") is None  # the connection that met the bug
        assert _get(port, "/healthz") == 200  # and the server after it
        time.sleep(0.5)  # a poll publishes the count
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        client.request("GET", "/metrics")
        text = client.getresponse().read().decode()
        client.close()
        assert process.poll() is None
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=20)
    assert 'nvwatch_agent_http_requests_refused_total{reason="internal_error"} 1.0' in text
    assert "internal error serving 127.0.0.1; closing that connection" in stderr
    assert process.returncode == 0


def test_a_bug_checking_one_password_refuses_that_request_only(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    target = ("nvwatch.agent.server.auth", "BasicAuth", "verify", 1)
    process, port = _start(tmp_path, target, ["--sources", "host", f"--web-config={web}"])
    good = {"Authorization": "Basic " + base64.b64encode(b"prometheus:s3cret").decode()}
    try:
        _wait_serving(process, port)  # unauthenticated: 401 without a check
        assert _get(port, "/healthz", good) == 401  # the check that met the bug
        assert _get(port, "/healthz", good) == 200  # the worker lives on
        assert process.poll() is None
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=20)
    assert "checking a credential failed; answering 401" in stderr
