"""deploy/local/run end to end: start it small, check that the provisioning it prints
is the stack it started, stop it with SIGINT or SIGTERM and check it left nothing."""

from __future__ import annotations

import contextlib
import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
import yaml

from nvwatch.dashboards.build import DASHBOARDS
from nvwatch.sim.ports import LOOPBACK
from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "deploy" / "local" / "run"
READY_LINE = "Ctrl-C stops everything"
START_DEADLINE_S = 90.0
STOP_DEADLINE_S = 30.0

pytestmark = pytest.mark.timeout(240)


@dataclass
class Running:
    process: subprocess.Popen[str]
    output: queue.Queue[str]  # what it prints after the lines up to READY_LINE
    lines: list[str]
    tmp: Path
    ports: tuple[str, ...]  # the port flags it was started with


# the two simulated nodes, the BMCs' management host and the Slurm controller's agent
BASE_PORTS = 4


def _stable_ports(count: int) -> int:
    """A port p with the `count` - 1 after it free as well, below the kernel's ephemeral
    range: the test starts the stack again on the same ports, and a port from the range
    can meanwhile be the source port of any connection on the machine (a parallel
    test's), which made the second start fail with "Address already in use"."""
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(100):
        port = rng.randrange(ephemeral_low // 2, ephemeral_low - count)
        if all(_free(port + i) for i in range(count)):
            return port
    raise AssertionError(f"no {count} consecutive free ports on loopback below {ephemeral_low}")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _reader(stream: IO[str], out: queue.Queue[str]) -> None:
    for line in stream:
        out.put(line.rstrip("\n"))


def _argv(*extra: str) -> list[str]:
    return [sys.executable, "-u", str(RUN), "--nodes-per-profile", "1", *extra]


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp)}  # where the stack makes its work directory


def _start(tmp: Path, *extra: str) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    process = subprocess.Popen(
        _argv(*extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(tmp),
        cwd=tmp,
        start_new_session=True,  # its own group, so teardown can reach its children
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(process.stdout, lines), daemon=True).start()
    return process, lines


def _until_ready(process: subprocess.Popen[str], lines: queue.Queue[str]) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            assert process.poll() is None, f"exited {process.returncode}:\n" + "\n".join(seen)
            continue
        seen.append(line)
        if READY_LINE in line:
            return seen
    raise AssertionError("not ready in time:\n" + "\n".join(seen))


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Running]:
    # 2x: the NVLink fault (and its XID) comes at 25 s, after Prometheus' first scrapes
    require_tool("prometheus")
    require_tool("prometheus-alertmanager", "alertmanager")
    # the three servers' ports, then the nodes' BASE_PORTS
    first = _stable_ports(3 + BASE_PORTS)
    flags = (
        f"--prometheus-port={first}",
        f"--alertmanager-port={first + 1}",
        f"--receiver-port={first + 2}",
        f"--base-port={first + 3}",
    )
    process, lines = _start(tmp_path, "--time-scale=2", *flags)
    try:
        yield Running(process, lines, _until_ready(process, lines), tmp_path, flags)
    finally:
        _shut_down(process)


def _shut_down(process: subprocess.Popen[str]) -> None:
    """After a failed test: SIGTERM (the stack stops its children), then kill the group."""
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_DEADLINE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # anything of the group still there
    process.wait(STOP_DEADLINE_S)


def _value(lines: list[str], key: str) -> str:
    found = [line.split(None, len(key.split()))[-1] for line in lines if line.startswith(key)]
    assert len(found) == 1, f"one {key!r} line expected in:\n" + "\n".join(lines)
    return found[0].split()[0]


def _answers(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as response:
        return bool(response.status == 200)


def _refused(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except OSError:
        return True
    return False


def _alertmanagers(prometheus: str) -> list[str]:
    found: list[str] = []
    deadline = time.monotonic() + 15
    while not found and time.monotonic() < deadline:
        with urllib.request.urlopen(f"{prometheus}/api/v1/alertmanagers", timeout=5) as response:
            active = yaml.safe_load(response.read())["data"]["activeAlertmanagers"]
        found = [a["url"].split("/api/")[0] for a in active]
        if not found:
            time.sleep(0.5)
    return found


def _scraped(prometheus: str, expr: str, want: int = 1) -> int:
    """How many series `expr` has once it has `want` of them (the targets are scraped
    every 5 s, each at its own moment), or after 30 s."""
    query = urllib.parse.urlencode({"query": expr})
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(f"{prometheus}/api/v1/query?{query}", timeout=5) as response:
            count = len(yaml.safe_load(response.read())["data"]["result"])
        if count >= want or time.monotonic() > deadline:
            return count
        time.sleep(1)


def _stop(run: Running, sig: signal.Signals) -> list[str]:
    """Send `sig`, wait for the exit, and return what it printed since it was ready."""
    run.process.send_signal(sig)
    run.process.wait(STOP_DEADLINE_S)
    rest: list[str] = []
    deadline = time.monotonic() + 5  # the reader thread drains the closed pipe
    while time.monotonic() < deadline and not any(line.startswith("stopped;") for line in rest):
        with contextlib.suppress(queue.Empty):
            rest.append(run.output.get(timeout=0.5))
    assert run.process.returncode == 0, rest
    return rest


def test_printed_provisioning_is_the_stack_that_runs(stack: Running) -> None:
    prometheus = _value(stack.lines, "prometheus")
    alertmanager = _value(stack.lines, "alertmanager")
    root = Path(_value(stack.lines, "grafana provisioning"))
    assert _answers(f"{prometheus}/-/ready") and _answers(f"{alertmanager}/-/ready")
    nodes = [line.split()[1] for line in stack.lines if line.startswith("dgx-")]
    assert len(nodes) == 2 and all(_answers(url) for url in nodes)

    source = yaml.safe_load((root / "datasources" / "nvwatch.yaml").read_text())
    assert source["datasources"][0]["url"] == prometheus
    assert f"-> {prometheus}" in "\n".join(stack.lines)
    contact = yaml.safe_load((root / "alerting" / "nvwatch-contact-points.yaml").read_text())
    assert contact["contactPoints"][0]["receivers"][0]["settings"]["url"] == alertmanager
    assert (root / "alerting" / "grafana-alerts.yaml").is_file()
    provider = yaml.safe_load((root / "dashboards" / "nvwatch.yaml").read_text())
    dashboards = Path(provider["providers"][0]["options"]["path"])
    assert sorted(p.name for p in dashboards.glob("*.json")) == sorted(DASHBOARDS)

    # the Prometheus that answers sends to that Alertmanager (once it has discovered it)
    assert _alertmanagers(prometheus) == [alertmanager]
    # and scrapes every node's BMC through the management host, and the queue's
    # controller, as it does the nodes
    probes, controller = _value(stack.lines, "BMC probes"), _value(stack.lines, "slurmctl")
    assert probes.endswith("/probe") and _answers(controller)
    assert _scraped(prometheus, 'up{job="nvwatch-bmc"} == 1', len(nodes)) == len(nodes)
    assert _scraped(prometheus, "nvwatch_scheduler_gpus") > 0

    work = root.parents[1]
    assert work.parent == stack.tmp and work.is_dir()
    out = _stop(stack, signal.SIGINT)
    assert not work.exists(), f"{work} left behind"
    assert list(stack.tmp.iterdir()) == []
    assert f"stopped; {work} removed" in out
    assert all(_refused(url) for url in (f"{prometheus}/-/ready", f"{alertmanager}/-/ready"))
    assert all(_refused(url) for url in nodes)


def test_the_first_alert_arrives_when_it_says(stack: Running) -> None:
    """At --time-scale 2 the fault comes twice as soon; `for:`, rule evaluation and
    group_wait stay real time. The printed window bounds the wait either way."""
    ready = time.monotonic()
    (said,) = [line for line in stack.lines if line.startswith("first alert:")]
    window = re.search(r"^first alert: (\w+) \((dgx-\d+) .* in ([\d.]+) to ([\d.]+) minutes", said)
    assert window, said
    name, node, latest_s = window.group(1), window.group(2), float(window.group(4)) * 60
    assert node in [line.split()[0] for line in stack.lines if line.startswith("dgx-")]
    slack_s = 15.0  # a loaded machine: the start, a slow poll or evaluation
    arrived = None
    while arrived is None and time.monotonic() - ready < latest_s + slack_s:
        with contextlib.suppress(queue.Empty):
            line = stack.output.get(timeout=1)
            if line.startswith("ALERT"):
                arrived = line
    assert arrived is not None, f"no alert within {latest_s + slack_s:g}s"
    assert arrived.split()[1:4] == ["firing", name, f"instance={node}"], arrived
    _stop(stack, signal.SIGINT)


def test_sigterm_cleans_up_and_the_same_ports_start_again(stack: Running) -> None:
    work = Path(_value(stack.lines, "grafana provisioning")).parents[1]
    _stop(stack, signal.SIGTERM)
    assert not work.exists() and list(stack.tmp.iterdir()) == []
    # at once, with the last run's connections still in TIME_WAIT on those ports
    process, lines = _start(stack.tmp, *stack.ports)
    try:
        again = _until_ready(process, lines)
        assert _value(again, "prometheus") == _value(stack.lines, "prometheus")
    finally:
        _shut_down(process)
    assert process.returncode == 0 and list(stack.tmp.iterdir()) == []


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    require_tool("prometheus")
    require_tool("prometheus-alertmanager", "alertmanager")
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            _argv(f"--alertmanager-port={port}"),
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            cwd=tmp_path,
            timeout=STOP_DEADLINE_S,
        )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith(f"run: port {port} (--alertmanager-port)"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_ports_are_fixed_by_default() -> None:
    result = subprocess.run(
        [sys.executable, str(RUN), "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    options = " ".join(result.stdout.split("options:", 1)[1].split())
    for flag, port in (
        ("--prometheus-port", 9090),
        ("--alertmanager-port", 9093),
        ("--receiver-port", 9095),
        ("--base-port", 9500),
    ):
        described = re.search(re.escape(flag) + r" PORT [^(]*\(default: (\d+)\)", options)
        assert described and described.group(1) == str(port), flag
