"""Configuration files and command lines of the monitoring services that the e2e stacks
and the scale benchmark start on loopback: Prometheus, Alertmanager, and deploy/scale's
sharded path (VictoriaMetrics, vmagent shards, vmalert).

Written once for both, so the tests check the services as the benchmark measures them;
what the two callers choose differently (intervals, timeouts, extra flags, receivers)
is a parameter. The VictoriaMetrics path runs the shipped systemd units' ExecStart with
only ports, paths and intervals replaced (benchmarks/scale/units.py), so a shipped flag
that Debian's binaries reject fails a test, not a deployment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.scale.units import SCALE, unit_command
from nvwatch.agent.inventory_bmc import probe_job
from tests.e2e.loopback import Endpoint

JOB = "nvwatch"
NO_FLAGS: Mapping[str, str] = {}


@dataclass(frozen=True)
class BmcProbe:
    """BMC targets (file_sd groups in `targets`/*.json, as `nvwatch inventory` writes
    them) probed at `address`, the HOST:PORT answering /probe."""

    targets: Path
    address: str

    def job(self) -> dict[str, Any]:
        """The `nvwatch-bmc` job as `nvwatch inventory` writes it for Prometheus."""
        return probe_job([str(self.targets / "*.json")], self.address)


def write_yaml(path: Path, config: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(config)))
    return path


def prometheus_config(
    *,
    rule_files: Sequence[Path],
    targets: Path,
    scrape_interval: str,
    scrape_timeout: str,
    evaluation_interval: str,
    sd_refresh: str | None = None,
    alertmanager: str | None = None,
    bmcs: BmcProbe | None = None,
) -> dict[str, Any]:
    """One job scraping the file_sd groups in `targets`/*.json, and with `bmcs` the
    `nvwatch-bmc` job; `alertmanager` (an address) gets the alerts, None: the rules are
    evaluated but notify no one."""
    file_sd: dict[str, Any] = {"files": [str(targets / "*.json")]}
    if sd_refresh is not None:
        file_sd["refresh_interval"] = sd_refresh
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": JOB, "scrape_timeout": scrape_timeout, "file_sd_configs": [file_sd]}
        ],
    }
    if bmcs is not None:
        config["scrape_configs"].append(bmcs.job())
    if alertmanager is not None:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return config


def prometheus_argv(
    binary: str, config: Path, data: Path, endpoint: Endpoint, extra: Sequence[str] = ()
) -> list[str]:
    return [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address={endpoint.address}",
        "--log.level=warn",
        *extra,
    ]


def alertmanager_config(webhook_url: str | None) -> dict[str, Any]:
    """Every alert its own notification, at once, to `webhook_url`; None: a receiver
    that drops them (the benchmark measures the cost of alerting, not its delivery)."""
    if webhook_url is None:
        return {"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}
    return {
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
                "webhook_configs": [{"url": webhook_url, "send_resolved": True}],
            }
        ],
    }


def alertmanager_argv(binary: str, config: Path, data: Path, endpoint: Endpoint) -> list[str]:
    return [
        binary,
        f"--config.file={config}",
        f"--storage.path={data}",
        f"--web.listen-address={endpoint.address}",
        "--cluster.listen-address=",  # no gossip: a single instance on loopback
    ]


def vmagent_scrape_config(
    targets: Path,
    scrape_interval: str,
    scrape_timeout: str | None = None,
    bmcs: BmcProbe | None = None,
) -> dict[str, Any]:
    """deploy/scale/scrape.yml, reading the file_sd groups in `targets`/*.json; its
    `nvwatch-bmc` job probing `bmcs`, left out without them."""
    config: dict[str, Any] = yaml.safe_load((SCALE / "scrape.yml").read_text(encoding="utf-8"))
    config["global"]["scrape_interval"] = scrape_interval
    agents, probe = config["scrape_configs"]
    if scrape_timeout is not None:
        agents["scrape_timeout"] = scrape_timeout
    agents["file_sd_configs"] = [{"files": [str(targets / "*.json")]}]
    config["scrape_configs"] = [agents]
    if bmcs is not None:
        probe["file_sd_configs"] = [{"files": [str(bmcs.targets / "*.json")]}]
        probe["relabel_configs"][-1]["replacement"] = bmcs.address
        config["scrape_configs"].append(probe)
    return config


def victoria_metrics_argv(
    endpoint: Endpoint, data: Path, flags: Mapping[str, str] = NO_FLAGS
) -> list[str]:
    """victoria-metrics.service's command line; `flags` replace or add to the unit's."""
    return unit_command(
        "victoria-metrics.service",
        {"storageDataPath": str(data), "httpListenAddr": endpoint.address, **flags},
    )


def vmagent_argv(
    shard: int,
    endpoint: Endpoint,
    scrape_config: Path,
    vm_url: str,
    tmp_data: Path,
    flags: Mapping[str, str] = NO_FLAGS,
) -> list[str]:
    """vmagent@SHARD.service's command line, remote-writing to the VictoriaMetrics at
    `vm_url`; the unit's own cluster flags pick which targets the shard scrapes."""
    return unit_command(
        "vmagent@.service",
        {
            "promscrape.config": str(scrape_config),
            "remoteWrite.url": f"{vm_url}/api/v1/write",
            "remoteWrite.tmpDataPath": str(tmp_data),
            "httpListenAddr": endpoint.address,
            **flags,
        },
        instance=str(shard),
    )


def vmalert_argv(
    endpoint: Endpoint,
    rule_files: Sequence[Path],
    vm_url: str,
    notifier_url: str,
    flags: Mapping[str, str] = NO_FLAGS,
) -> list[str]:
    """vmalert.service's command line: rules evaluated on the VictoriaMetrics at
    `vm_url`, their state written back to it, alerts sent to `notifier_url`."""
    return unit_command(
        "vmalert.service",
        {
            # one -rule flag per file
            "rule": "\n".join(str(p) for p in rule_files),
            "datasource.url": vm_url,
            "remoteWrite.url": vm_url,
            "remoteRead.url": vm_url,
            "notifier.url": notifier_url,
            "httpListenAddr": endpoint.address,
            **flags,
        },
    )
