"""Build the Grafana dashboards.

`nvwatch dashboards build --out dashboards/generated` is the command; `python -m
nvwatch.dashboards.build` runs that same command (same options, same `write`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from nvwatch.dashboards.capacity_review import capacity_review
from nvwatch.dashboards.cluster_overview import cluster_overview
from nvwatch.dashboards.grafana import modernise
from nvwatch.dashboards.infiniband import infiniband
from nvwatch.dashboards.jobs import jobs
from nvwatch.dashboards.links import add_navigation
from nvwatch.dashboards.node import node
from nvwatch.dashboards.nvlink import nvlink
from nvwatch.dashboards.power_cooling import power_cooling
from nvwatch.dashboards.queue import queue
from nvwatch.dashboards.thermal_power import thermal_power
from nvwatch.mixin.config import MixinConfig

DASHBOARDS: dict[str, Callable[[MixinConfig], g.Dashboard]] = {
    "nvwatch-cluster-overview.json": cluster_overview,
    "nvwatch-node.json": node,
    "nvwatch-nvlink.json": nvlink,
    "nvwatch-infiniband.json": infiniband,
    "nvwatch-thermal-power.json": thermal_power,
    "nvwatch-power-cooling.json": power_cooling,
    "nvwatch-capacity-review.json": capacity_review,
    "nvwatch-jobs.json": jobs,
    "nvwatch-queue.json": queue,
}


def _to_json(dashboard: g.Dashboard) -> dict[str, Any]:
    # round-trip through grafanalib's encoder: it turns its attrs objects into plain JSON
    data: dict[str, Any] = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    return data


def build_all(config: MixinConfig) -> dict[str, dict[str, Any]]:
    """File name -> Grafana 10-12 dashboard JSON of every nvwatch dashboard."""
    dashboards = {
        name: modernise(_to_json(make(config)), config.grafana_datasource_name)
        for name, make in DASHBOARDS.items()
    }
    add_navigation(dashboards)
    return dashboards


def render(dashboard: dict[str, Any]) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write(out_dir: Path, config: MixinConfig) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, dashboard in build_all(config).items():
        path = out_dir / name
        path.write_text(render(dashboard), encoding="utf-8")
        written.append(path)
    return written


def write_kubernetes(out_dir: Path, config: MixinConfig) -> Path:
    """The same dashboards as Grafana-sidecar ConfigMaps, one manifest file."""
    from nvwatch.alerts.kubernetes import DASHBOARDS_FILE, dashboards_text

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / DASHBOARDS_FILE
    path.write_text(dashboards_text(build_all(config)), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    from nvwatch.mixin.commands import dashboards_build

    dashboards_build.main(args=argv, prog_name="python -m nvwatch.dashboards.build")


if __name__ == "__main__":
    main()
