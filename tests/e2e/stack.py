"""Real Prometheus + Alertmanager + a webhook receiver around a simulated fleet, on loopback.

Everything here is bounded: every wait has a deadline, every process is terminated (then
killed) by `Stack.close()`, which the fixtures call in `finally`.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import yaml

from nvwatch.agent.sim.fleet import Fleet
from nvwatch.agent.sim.fleet_node import FleetNode, build_agent
from nvwatch.agent.sim.ports import free_port

T = TypeVar("T")
HOST = "127.0.0.1"


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.5) -> T:
    """Call `probe` until it returns something other than None/False, at most `timeout` s."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = probe()
            if result:
                return result
        except (OSError, ValueError) as exc:  # not up yet
            last_error = exc
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} ({last_error})")


class Receiver:
    """Alertmanager's webhook target: records every alert of every notification."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length) or b"{}")
                with receiver._lock:
                    for alert in payload.get("alerts", []):
                        alert["received_monotonic"] = time.monotonic()
                        receiver.alerts.append(alert)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self._server.server_address[1]}/alerts"

    def firing(self) -> list[dict[str, Any]]:
        with self._lock:
            return [a for a in self.alerts if a.get("status") == "firing"]

    def received(self) -> list[dict[str, Any]]:
        """Every alert of every notification so far, firing and resolved, in arrival order."""
        with self._lock:
            return list(self.alerts)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class Stack:
    workdir: Path
    fleet: Fleet
    receiver: Receiver
    prometheus_url: str = ""
    alertmanager_url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    started_monotonic: float = field(default_factory=time.monotonic)
    _logs: dict[int, Path] = field(default_factory=dict)
    # name -> the command it was started with, for restart_process()
    _commands: dict[str, list[str]] = field(default_factory=dict)
    # fleet node -> the port its stopped agent listened on, for start_agents()
    _agent_ports: dict[int, int] = field(default_factory=dict)

    def start_alertmanager(self, binary: str) -> None:
        port = free_port(HOST)
        config = {
            "route": {
                "receiver": "webhook",
                # no grouping: every alert is its own notification, delivered at once
                "group_by": ["..."],
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "webhook",
                    # the default, spelt out: the restart matrix tells a resolve by it
                    "webhook_configs": [{"url": self.receiver.url, "send_resolved": True}],
                }
            ],
        }
        path = self.workdir / "alertmanager.yml"
        path.write_text(yaml.safe_dump(config))
        self.alertmanager_url = f"http://{HOST}:{port}"
        self._spawn(
            "alertmanager",
            [
                binary,
                f"--config.file={path}",
                f"--storage.path={self.workdir / 'alertmanager-data'}",
                f"--web.listen-address={HOST}:{port}",
                "--cluster.listen-address=",  # no gossip: a single instance on loopback
            ],
        )
        wait_for("alertmanager ready", lambda: self._ready(self.alertmanager_url), 30)

    def start_prometheus(
        self,
        binary: str,
        rule_files: list[Path],
        scrape_interval: str,
        extra_args: tuple[str, ...] = (),
        *,
        notify: bool = True,
    ) -> None:
        """`notify=False`: evaluate the rules but send no alert (a Prometheus beside
        another alerting path, there to compare answers with)."""
        port = free_port(HOST)
        targets = self.workdir / "targets"
        targets.mkdir(exist_ok=True)
        self.fleet.write_file_sd(targets / "fleet.json")
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [
                {
                    "job_name": "nvwatch",
                    "scrape_timeout": scrape_interval,
                    "file_sd_configs": [
                        {"files": [str(targets / "*.json")], "refresh_interval": "5s"}
                    ],
                }
            ],
        }
        if notify:
            config["alerting"] = {
                "alertmanagers": [
                    {"static_configs": [{"targets": [self.alertmanager_url.split("//")[1]]}]}
                ]
            }
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        self.prometheus_url = f"http://{HOST}:{port}"
        self._spawn(
            "prometheus",
            [
                binary,
                f"--config.file={path}",
                f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
                f"--web.listen-address={HOST}:{port}",
                "--log.level=warn",
                *extra_args,
            ],
        )
        wait_for("prometheus ready", lambda: self._ready(self.prometheus_url), 30)

    def _ready(self, url: str) -> bool:
        for process in self.processes:
            if process.poll() is not None:  # it exited: fail now, with its last words
                log = self._logs[process.pid]
                tail = log.read_text(errors="replace").splitlines()[-3:]
                raise AssertionError(f"{process.args[0]} exited: " + " | ".join(tail)[:2000])
        return _get(f"{url}/-/ready")

    def _spawn(self, name: str, argv: list[str]) -> None:
        path = self.workdir / f"{name}.log"
        # append: a restarted process keeps its predecessor's last words
        with path.open("ab") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self._logs[process.pid] = path
        self.processes.append(process)
        self._commands[name] = argv

    def restart_process(self, name: str) -> float:
        """Stop `name` as its service manager would (SIGTERM, wait), start it the same way.

        Same port, same flags, same data directory: what a restart keeps. Returns the
        monotonic time the old process was told to stop, when the outage began.
        """
        argv = self._commands[name]
        (process,) = [p for p in self.processes if list(p.args) == argv and p.poll() is None]
        began = time.monotonic()
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        self.processes.remove(process)
        self._spawn(name, argv)
        url = self.prometheus_url if name == "prometheus" else self.alertmanager_url
        wait_for(f"{name} ready again", lambda: self._ready(url), 60)
        return began

    def restart_prometheus(self) -> float:
        """A Prometheus restart keeping its TSDB (and its `for` state series); see
        restart_process."""
        return self.restart_process("prometheus")

    def stop_agents(self, indices: list[int]) -> None:
        """The agents of these fleet nodes exit; their simulated hardware runs on.

        In parallel: each stop takes a while (its poller's and server's shutdown), and
        stopped one after the other the first would be down for all of them.
        """
        # a stopped server no longer knows its port: remember it for the restart
        self._agent_ports.update({i: self.fleet.nodes[i].port for i in indices})
        stoppers = [
            threading.Thread(target=self.fleet.stop_node, args=(i,), daemon=True) for i in indices
        ]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(30)
            if stopper.is_alive():
                raise AssertionError("an agent did not stop within 30 s")

    def start_agents(self, indices: list[int]) -> None:
        """Start a new agent for each stopped node: same port, same config, same hardware.

        As after `systemctl restart`: the new agent knows nothing of its predecessor
        (counters it keeps itself start again); what the hardware or driver keeps (NVML
        volatile ECC counts, sysfs counters) is read again as it is.
        """
        for index in indices:
            old = self.fleet.nodes[index]
            if old.listening:
                raise RuntimeError(f"{old.name}: agent still running, stop it first")
            config = dataclasses.replace(old.agent.config, listen_port=self._agent_ports[index])
            # built as Fleet builds its agents, bar the clock: a restarted agent's NVML
            # back-off runs on real time, as it always has in these tests
            node = FleetNode(old.spec, old.sim, build_agent(old.sim, config))
            node.start()
            self.fleet.nodes[index] = node

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise AssertionError(f"query failed: {expr}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        if body["data"]["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return result

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        self.fleet.stop()
        self.receiver.close()


def _get(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except urllib.error.URLError:
        return False
