"""The sharded path of deploy/scale around a Stack: two vmagent shards, VictoriaMetrics,
vmalert, all started from the shipped systemd units' own command lines.

Each unit's ExecStart is read and run with only the loopback ports, paths and intervals
replaced (by flag name), so a flag the shipped units give that Debian's binaries reject
fails here. Processes go into the Stack's list, so `Stack.close()` stops them.
"""

from __future__ import annotations

import json
import signal
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.loopback import Endpoint, instant_query, range_query
from tests.e2e.service_commands import (
    victoria_metrics_argv,
    vmagent_argv,
    vmagent_scrape_config,
    vmalert_argv,
    write_yaml,
)
from tests.e2e.stack import Stack

SHARDS = 2
# Either engine's answer to one query. A dashboard query here takes milliseconds; on a
# loaded two-core CI machine an engine (or the test's own thread) can stall for tens of
# seconds, and one stalled answer must not end every other comparison of the test.
QUERY_TIMEOUT_S = 60.0


@dataclass
class Sharded:
    stack: Stack
    vm_url: str = ""
    vmalert_url: str = ""
    shard_urls: list[str] = field(default_factory=list)

    def start(self, rule_files: list[Path], scrape_interval: str, eval_interval: str) -> None:
        work = self.stack.workdir
        vm = Endpoint.free()
        self.vm_url = vm.url
        # VictoriaMetrics hides the newest 30 s from queries by default (late samples);
        # the test's seconds-long `for:` need them now
        fresh = {"search.latencyOffset": "1s"}
        self.stack.spawn("victoria-metrics", victoria_metrics_argv(vm, work / "vm-data", fresh))
        self.stack.wait_ready("victoria-metrics", f"{vm.url}/-/ready", 60)
        scrape = vmagent_scrape_config(work / "targets", scrape_interval, scrape_interval)
        scrape_path = write_yaml(work / "vmagent-scrape.yml", scrape)
        for shard in range(SHARDS):
            endpoint = Endpoint.free()
            self.shard_urls.append(endpoint.url)
            argv = vmagent_argv(
                shard,
                endpoint,
                scrape_path,
                vm.url,
                work / f"vmagent-{shard}",
                {"promscrape.fileSDCheckInterval": "5s"},
            )
            self.stack.spawn(f"vmagent-{shard}", argv)
        for url in self.shard_urls:
            self.stack.wait_ready("vmagent shard", f"{url}/health", 60)
        endpoint = Endpoint.free()
        self.vmalert_url = endpoint.url
        flags = {
            "evaluationInterval": eval_interval,
            # how far back an instant query looks for a series' last sample (default 5m,
            # Prometheus' lookback too), shrunk with the test's other durations: a dead
            # shard's `up` must be gone in seconds
            "datasource.queryStep": "15s",
            # vmalert tells Alertmanager a firing alert ends 4 x max(interval, resend
            # delay) after its group's scheduled evaluation: 8 s at the test's 2 s groups,
            # which a rule late in a group that a loaded machine takes longer to evaluate
            # outlives, so its alert reached Alertmanager already ended and was never
            # notified (NvwatchIbLinkDowned firing for 186 s, none at Alertmanager). 15 s
            # makes it 60 s, as the shipped 1 m interval gives 4 min; resolutions are sent
            # at once whatever the delay.
            "rule.resendDelay": "15s",
        }
        argv = vmalert_argv(endpoint, rule_files, vm.url, self.stack.alertmanager_url, flags)
        self.stack.spawn("vmalert", argv)
        self.stack.wait_ready("vmalert", f"{endpoint.url}/health", 60)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        return instant_query(self.vm_url, expr, at, timeout=QUERY_TIMEOUT_S)

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


def prometheus_answers(
    stack: Stack, expr: str, start: float, end: float
) -> dict[float, list[dict[str, Any]]]:
    """The stack's Prometheus's answers at every second from `start` to `end`, in one
    request, asked as patiently as VictoriaMetrics (Sharded.query): evaluation time -> series."""
    return range_query(stack.prometheus_url, expr, start, end, 1.0, timeout=QUERY_TIMEOUT_S)
