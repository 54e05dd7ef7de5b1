"""The inventory's BMC addresses -> file_sd targets and the `nvwatch-bmc` scrape job.

Prometheus' multi-target pattern, as for ipmi_exporter and snmp_exporter: every BMC is a
target whose address is the BMC's, and the job's relabelling moves that address into the
`target` URL parameter and scrapes the one nvwatch on the management network that reads
BMCs (`nvwatch serve --bmc-config`) at `/probe?target=<bmc>&module=<module>`. Each BMC's
target group carries its node's `cluster`, `rack`, `node_class` and `instance` (as the
node's GPU target does, so BMC series join GPU series `on (cluster, instance)`) and `bmc`,
the BMC's address. A node whose `bmc_module` column names a module gets it as the
group's `__param_module`, which Prometheus takes over the job's default.

Files: one `bmc-<node_class>.json` per class (a glob apart from the agents'
`nvwatch-*.json`, so neither job scrapes the other's targets) and `nvwatch-bmc.scrape.yml`,
a `scrape_configs:` document holding the job: paste its job into prometheus.yml, or list
the file under `scrape_config_files` (Prometheus 2.43+).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from nvwatch.agent.inventory import (
    InventoryNode,
    bmc_address,
    plain_name,
    write_target_files,
)
from nvwatch.agent.sources.bmc.reading import DEFAULT_MODULE
from nvwatch.common.yaml_safe import ConfigError, shown

BMC_JOB = "nvwatch-bmc"  # the mixin's default bmc_job_selector
BMC_FILE_PREFIX = "bmc-"
SCRAPE_FILE = "nvwatch-bmc.scrape.yml"
PROBE_PATH = "/probe"


def probe_address(value: str) -> str:
    """`--bmc-probe`: host:port of the nvwatch that reads the BMCs. The port is required:
    the agent's 9477 would be a guess, and IPMI's 623, the BMC address's default, is
    certainly wrong here."""
    has_port = "]:" in value if value.startswith("[") else value.count(":") == 1
    if not has_port:
        raise ConfigError(
            f"invalid --bmc-probe {shown(value)}: give host:port of the nvwatch that probes "
            "the BMCs (serve --bmc-config), e.g. 10.0.0.5:9477"
        )
    try:
        return bmc_address(value)
    except ValueError as exc:
        raise ConfigError(f"invalid --bmc-probe {shown(value)}: {exc}") from None


def module_name(value: str) -> str:
    """`--bmc-module`: a module name of the BMC config, plain as a label value."""
    if not plain_name(value):
        raise ConfigError(
            f"invalid --bmc-module {shown(value)}: letters, digits, '-', '_', '.' only"
        )
    return value


def bmc_file_sd_by_class(nodes: Sequence[InventoryNode]) -> dict[str, list[dict[str, Any]]]:
    """File name -> file_sd target groups of the nodes that have a BMC, one per node."""
    files: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        if node.bmc is None:
            continue
        labels = {
            "cluster": node.cluster,
            "rack": node.rack,
            "node_class": node.node_class,
            "instance": node.hostname,
        }
        name = f"{BMC_FILE_PREFIX}{node.node_class}.json"
        files.setdefault(name, []).append(bmc_target_group(node.bmc, labels, node.bmc_module))
    return files


def bmc_target_group(
    bmc: str, node_labels: Mapping[str, str], module: str | None = None
) -> dict[str, Any]:
    """One BMC's file_sd group: its address the target (the job's relabelling makes it
    the probe's `?target=`), with its node's labels and `bmc`, so BMC series join the
    node's GPU series; `module` overrides the job's for this BMC."""
    labels = {**node_labels, "bmc": bmc}
    if module is not None:
        labels["__param_module"] = module
    return {"targets": [bmc], "labels": labels}


def scrape_job(targets_dir: Path, probe: str, module: str = DEFAULT_MODULE) -> dict[str, Any]:
    """The `nvwatch-bmc` job: file_sd from `targets_dir`, every target probed at `probe`."""
    return probe_job([str(targets_dir / f"{BMC_FILE_PREFIX}*.json")], probe, module)


def probe_job(
    file_sd: Sequence[str],
    probe: str,
    module: str = DEFAULT_MODULE,
    *,
    interval: str | None = None,
) -> dict[str, Any]:
    """The `nvwatch-bmc` job over the BMC targets of the `file_sd` files (globs allowed),
    each probed at `probe` (HOST:PORT of the nvwatch answering /probe); `interval` is the
    job's scrape_interval, Prometheus's global one when None."""
    job: dict[str, Any] = {
        "job_name": BMC_JOB,
        "metrics_path": PROBE_PATH,
        "params": {"module": [module]},
        "file_sd_configs": [{"files": list(file_sd), "refresh_interval": "1m"}],
        "relabel_configs": [
            # the BMC's address is the probe's `target`; the scrape goes to the probe
            {"source_labels": ["__address__"], "target_label": "__param_target"},
            {"target_label": "__address__", "replacement": probe},
        ],
    }
    if interval is not None:
        job["scrape_interval"] = interval
    return job


def check_probe(nodes: Sequence[InventoryNode], probe: str | None) -> None:
    """Nodes with a BMC need the probe's address: said before anything is written."""
    with_bmc = sum(1 for node in nodes if node.bmc is not None)
    if with_bmc and probe is None:
        raise ConfigError(
            f"{with_bmc} node(s) have a bmc address: --bmc-probe HOST:PORT (the nvwatch "
            "that probes BMCs, serve --bmc-config) is required"
        )


_HEADER = """\
# Written by `nvwatch inventory`: the nvwatch-bmc scrape job. Prometheus asks the nvwatch
# at {probe} (serve --bmc-config) for /probe?target=<BMC>&module=<module> of every
# BMC in {targets}. Paste the job into prometheus.yml's scrape_configs, or list this
# file under scrape_config_files (Prometheus 2.43+). Its scrape_timeout (the global one
# here) must be longer than the modules' timeout in the BMC config.
"""


def write_bmc(
    nodes: Sequence[InventoryNode], out_dir: Path, probe: str | None, module: str
) -> list[Path]:
    """The BMC file_sd files and the scrape job, when any node has a BMC; stale BMC files
    are removed either way, so a node or class that lost its BMC stops being probed."""
    check_probe(nodes, probe)
    files = bmc_file_sd_by_class(nodes)
    written = write_target_files(files, out_dir, BMC_FILE_PREFIX)
    scrape = out_dir / SCRAPE_FILE
    if not files or probe is None:  # no BMC left: nothing for the job to probe
        scrape.unlink(missing_ok=True)
        return written
    targets = out_dir.resolve()
    text = _HEADER.format(probe=probe, targets=targets) + yaml.safe_dump(
        {"scrape_configs": [scrape_job(targets, probe, module)]}, sort_keys=False
    )
    tmp = scrape.with_name(f".{scrape.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, scrape)
    written.append(scrape)
    return written
