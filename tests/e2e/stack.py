"""Real Prometheus + Alertmanager + a webhook receiver around a simulated fleet, on loopback.

Everything here is bounded: every wait has a deadline, every process is terminated (then
killed) by `Stack.close()`, which the fixtures call in `finally`.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.common import fetch
from nvwatch.sim.fleet.fleet import Fleet
from nvwatch.sim.fleet.node import FleetNode, build_agent
from tests.e2e.loopback import (
    HOST,
    Endpoint,
    answers_ok,
    instant_query,
    log_tail,
    spawn_logged,
    wait_for,
)
from tests.e2e.service_commands import (
    alertmanager_argv,
    alertmanager_config,
    prometheus_argv,
    prometheus_config,
    write_yaml,
)
from tests.processes import stop, stop_all


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
        endpoint = Endpoint.free()
        config = self.workdir / "alertmanager.yml"
        write_yaml(config, alertmanager_config(self.receiver.url))
        self.alertmanager_url = endpoint.url
        data = self.workdir / "alertmanager-data"
        self.spawn("alertmanager", alertmanager_argv(binary, config, data, endpoint))
        self.wait_ready("alertmanager", f"{endpoint.url}/-/ready", 30)

    def start_prometheus(
        self,
        binary: str,
        rule_files: list[Path],
        scrape_interval: str,
        extra_args: tuple[str, ...] = (),
        *,
        notify: bool = True,
        bmc: bool = False,
        evaluation_interval: str = "1s",
    ) -> None:
        """`notify=False`: evaluate the rules but send no alert (a Prometheus beside
        another alerting path, there to compare answers with); `bmc`: also probe every
        node's BMC (the `nvwatch-bmc` job)."""
        endpoint = Endpoint.free()
        targets = self.workdir / "targets"
        targets.mkdir(exist_ok=True)
        self.fleet.write_file_sd(targets / "fleet.json")
        config = prometheus_config(
            rule_files=rule_files,
            targets=targets,
            scrape_interval=scrape_interval,
            scrape_timeout=scrape_interval,
            evaluation_interval=evaluation_interval,
            sd_refresh="5s",
            alertmanager=self.alertmanager_url.split("//")[1] if notify else None,
        )
        if bmc:
            config["scrape_configs"].append(self._bmc_job(scrape_interval))
        path = write_yaml(self.workdir / "prometheus.yml", config)
        self.prometheus_url = endpoint.url
        data = self.workdir / "prometheus-data"
        self.spawn("prometheus", prometheus_argv(binary, path, data, endpoint, extra_args))
        self.wait_ready("prometheus", f"{endpoint.url}/-/ready", 30)

    def _bmc_job(self, scrape_interval: str) -> dict[str, Any]:
        """The `nvwatch-bmc` job: every node's BMC, probed through the fleet's management
        host, with the node's labels. Its targets live apart from the agents' (whose job
        takes every file in targets/)."""
        targets = self.workdir / "bmc-targets"
        targets.mkdir(exist_ok=True)
        self.fleet.write_bmc_file_sd(targets / "fleet.json")
        job = self.fleet.bmc_scrape_config(targets / "fleet.json", interval=scrape_interval)
        job["scrape_timeout"] = scrape_interval
        return job

    def answers(self, url: str) -> bool:
        """`url` answers 200. Raises at once if any process of the stack has exited,
        with its last words, instead of waiting out the deadline."""
        for process in self.processes:
            if process.poll() is not None:
                tail = log_tail(self._logs[process.pid])
                raise AssertionError(f"{process.args[0]} exited: {tail}")
        return answers_ok(url)

    def wait_ready(self, name: str, url: str, timeout: float) -> None:
        wait_for(f"{name} ready", lambda: self.answers(url), timeout)

    def spawn(self, name: str, argv: list[str]) -> None:
        """Start `argv` as `name`, its output in `name`.log; `Stack.close()` stops it."""
        path = self.workdir / f"{name}.log"
        process = spawn_logged(argv, path)
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
        stop(process, 30)
        self.processes.remove(process)
        self.spawn(name, argv)
        url = self.prometheus_url if name == "prometheus" else self.alertmanager_url
        self.wait_ready(f"{name} (again)", f"{url}/-/ready", 60)
        return began

    def restart_prometheus(self) -> float:
        """A Prometheus restart keeping its TSDB (and its `for` state series); see
        restart_process."""
        return self.restart_process("prometheus")

    def where_alert_stopped(self, alertname: str, labels: Mapping[str, str]) -> str:
        """How far one expected alert got on its way to the webhook, for a failure
        message: not active in Prometheus (its expression false), pending (its `for:`
        running), firing but not at Alertmanager, or at Alertmanager but not delivered."""
        matchers = {"alertname": alertname, **labels}
        selector = ",".join(f'{k}="{v}"' for k, v in matchers.items())
        described = f"{alertname} {dict(labels)}"
        try:
            states = {r["metric"].get("alertstate") for r in self.query(f"ALERTS{{{selector}}}")}
            if "firing" not in states:
                where = (
                    "pending in Prometheus" if "pending" in states else "not active in Prometheus"
                )
                return f"{described}: {where}"
            if not self.alertmanager_url or not self._at_alertmanager(matchers):
                return f"{described}: firing in Prometheus, not at Alertmanager"
        except (OSError, ValueError, AssertionError) as exc:
            return f"{described}: cannot tell ({exc})"
        return f"{described}: at Alertmanager, not at the webhook"

    def _at_alertmanager(self, matchers: Mapping[str, str]) -> bool:
        params = urllib.parse.urlencode([("filter", f'{k}="{v}"') for k, v in matchers.items()])
        url = f"{self.alertmanager_url}/api/v2/alerts?{params}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return bool(json.load(response))

    def reload_prometheus(self) -> None:
        """SIGHUP, as `systemctl reload` sends it: Prometheus reads its configuration and
        rule files again, keeping its TSDB and the state of the alerts it still has.
        Returns once the reload is done (its success timestamp moved)."""
        argv = self._commands["prometheus"]
        (process,) = [p for p in self.processes if list(p.args) == argv and p.poll() is None]
        before = self._last_reload()
        process.send_signal(signal.SIGHUP)
        wait_for("Prometheus reloaded", lambda: self._last_reload() > before, 30)

    def _last_reload(self) -> float:
        text = fetch(f"{self.prometheus_url}/metrics", timeout=10).decode()
        for line in text.splitlines():
            if line.startswith("prometheus_config_last_reload_success_timestamp_seconds "):
                return float(line.split()[1])
        raise AssertionError("Prometheus exports no reload timestamp")

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

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """`expr` on the stack's Prometheus, now or at `at` (epoch seconds)."""
        return instant_query(self.prometheus_url, expr, at)

    def close(self) -> None:
        stop_all(self.processes, 10)
        self.fleet.stop()
        self.receiver.close()
