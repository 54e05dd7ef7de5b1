"""The sharded path of deploy/scale around a Stack: two vmagent shards, VictoriaMetrics,
vmalert, all started from the shipped systemd units' own command lines.

Each unit's ExecStart is read and run with only the loopback ports, paths and intervals
replaced (by flag name), so a flag the shipped units give that Debian's binaries reject
fails here. Processes go into the Stack's list, so `Stack.close()` stops them.
"""

from __future__ import annotations

import functools
import json
import signal
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.scale.units import SCALE, unit_command
from nvwatch.agent.sim.ports import free_port
from tests.e2e.stack import HOST, Stack, wait_for

SHARDS = 2


@dataclass
class Sharded:
    stack: Stack
    vm_url: str = ""
    vmalert_url: str = ""
    shard_urls: list[str] = field(default_factory=list)

    def start(self, rule_files: list[Path], scrape_interval: str, eval_interval: str) -> None:
        work = self.stack.workdir
        vm_port = free_port(HOST)
        self.vm_url = f"http://{HOST}:{vm_port}"
        self.stack._spawn(
            "victoria-metrics",
            unit_command(
                "victoria-metrics.service",
                {
                    "storageDataPath": str(work / "vm-data"),
                    "httpListenAddr": f"{HOST}:{vm_port}",
                    # VictoriaMetrics hides the newest 30 s from queries by default (late
                    # samples); the test's seconds-long `for:` need them now
                    "search.latencyOffset": "1s",
                },
            ),
        )
        wait_for("victoria-metrics ready", lambda: self.stack._ready(self.vm_url), 60)
        scrape = yaml.safe_load((SCALE / "scrape.yml").read_text(encoding="utf-8"))
        scrape["global"]["scrape_interval"] = scrape_interval
        job = scrape["scrape_configs"][0]
        job["scrape_timeout"] = scrape_interval
        job["file_sd_configs"] = [{"files": [str(work / "targets" / "*.json")]}]
        scrape_path = work / "vmagent-scrape.yml"
        scrape_path.write_text(yaml.safe_dump(scrape))
        for shard in range(SHARDS):
            port = free_port(HOST)
            self.shard_urls.append(f"http://{HOST}:{port}")
            self.stack._spawn(
                f"vmagent-{shard}",
                unit_command(
                    "vmagent@.service",
                    {
                        "promscrape.config": str(scrape_path),
                        "promscrape.fileSDCheckInterval": "5s",
                        "remoteWrite.url": f"{self.vm_url}/api/v1/write",
                        "remoteWrite.tmpDataPath": str(work / f"vmagent-{shard}"),
                        "httpListenAddr": f"{HOST}:{port}",
                    },
                    instance=str(shard),
                ),
            )
        for url in self.shard_urls:
            wait_for("vmagent shard ready", functools.partial(self._healthy, url), 60)
        alert_port = free_port(HOST)
        self.vmalert_url = f"http://{HOST}:{alert_port}"
        self.stack._spawn(
            "vmalert",
            unit_command(
                "vmalert.service",
                {
                    "rule": "\n".join(str(p) for p in rule_files),
                    "datasource.url": self.vm_url,
                    "remoteWrite.url": self.vm_url,
                    "remoteRead.url": self.vm_url,
                    "notifier.url": self.stack.alertmanager_url,
                    "evaluationInterval": eval_interval,
                    # how far back an instant query looks for a series' last sample
                    # (default 5m, Prometheus' lookback too), shrunk with the test's
                    # other durations: a dead shard's `up` must be gone in seconds
                    "datasource.queryStep": "15s",
                    "httpListenAddr": f"{HOST}:{alert_port}",
                },
            ),
        )
        wait_for("vmalert ready", lambda: self._healthy(self.vmalert_url), 60)

    def _healthy(self, url: str) -> bool:
        self.stack._ready(self.vm_url)  # raises if any process of the stack exited
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        return _query(self.vm_url, expr, at)

    def shard_targets(self, shard: int) -> set[str]:
        """`instance` labels of the targets this shard scrapes (its /api/v1/targets)."""
        with urllib.request.urlopen(f"{self.shard_urls[shard]}/api/v1/targets", timeout=10) as r:
            body = json.load(r)
        return {t["labels"]["instance"] for t in body["data"]["activeTargets"]}

    def kill_shard(self, shard: int) -> None:
        """The shard crashes (SIGKILL): no goodbye, no staleness markers for its targets."""
        flag = f"-promscrape.cluster.memberNum={shard}"
        (process,) = [
            p
            for p in self.stack.processes
            if flag in map(str, p.args) and p.poll() is None  # type: ignore[arg-type]
        ]
        process.send_signal(signal.SIGKILL)
        process.wait(10)


def _query(base: str, expr: str, at: float | None) -> list[dict[str, Any]]:
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=20) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise AssertionError(f"query failed: {expr}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    if body["data"]["resultType"] == "scalar":
        return [{"metric": {}, "value": result}]
    return result


def prometheus_query(stack: Stack, expr: str, at: float) -> list[dict[str, Any]]:
    return _query(stack.prometheus_url, expr, at)
