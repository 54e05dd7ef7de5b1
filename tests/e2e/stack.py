"""Real Prometheus + Alertmanager + a webhook receiver around a simulated fleet, on loopback.

Everything here is bounded: every wait has a deadline, every process is terminated (then
killed) by `Stack.close()`, which the fixtures call in `finally`.
"""

from __future__ import annotations

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

from agent.sim.fleet import Fleet
from agent.sim.ports import free_port

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
            "receivers": [{"name": "webhook", "webhook_configs": [{"url": self.receiver.url}]}],
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

    def start_prometheus(self, binary: str, rule_files: list[Path], scrape_interval: str) -> None:
        port = free_port(HOST)
        targets = self.workdir / "targets"
        targets.mkdir(exist_ok=True)
        self.fleet.write_file_sd(targets / "fleet.json")
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "alerting": {
                "alertmanagers": [
                    {"static_configs": [{"targets": [self.alertmanager_url.split("//")[1]]}]}
                ]
            },
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
        with path.open("wb") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self._logs[process.pid] = path
        self.processes.append(process)

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
