"""Drill-down between the nvwatch dashboards: cluster -> node -> NVLink / InfiniBand and back.

Two kinds of link, both to `/d/<uid>` of another nvwatch dashboard:

- the link bar at the top of every dashboard, to every other nvwatch dashboard, carrying
  the current values of the variables both dashboards have (data source, cluster, node,
  GPU) and the time range;
- panel data links, from one series of a panel (a node, a GPU) to the dashboard that
  details it, setting the target's variables from the series' labels.

Every link names the variables it sets (`var-NAME=...` or `${NAME:queryparam}`, which
Grafana expands to `var-NAME=value` once per selected value) rather than using
`includeVars`, which would pass every variable of the source, including ones the target
does not have. tests/mixin/test_dashboard_links.py checks that each target and each
variable exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

JsonDict = dict[str, Any]

# The dashboards' uids, which links address; the modules building them use these too.
CLUSTER_OVERVIEW = "nvwatch-cluster-overview"
NODE = "nvwatch-node"
NVLINK = "nvwatch-nvlink"
INFINIBAND = "nvwatch-infiniband"
THERMAL_POWER = "nvwatch-thermal-power"
CAPACITY_REVIEW = "nvwatch-capacity-review"
JOBS = "nvwatch-jobs"
POWER_COOLING = "nvwatch-power-cooling"
QUEUE = "nvwatch-queue"

# Grafana's own variable with the dashboard's time range as `from=...&to=...`.
TIME_RANGE = "${__url_time_range}"
TITLE_PREFIX = "nvwatch / "


def dashboard_url(uid: str, params: Sequence[str]) -> str:
    """Grafana's address of a dashboard by uid (the slug after it is cosmetic)."""
    return f"/d/{uid}/{uid}?" + "&".join(params)


def carry(variable: str) -> str:
    """URL parameter(s) passing this dashboard's variable on with all its selected values."""
    return "${" + variable + ":queryparam}"


def label_value(label: str) -> str:
    """The clicked series' value of `label`, in a data link's title or URL."""
    return "${__field.labels." + label + "}"


def from_label(variable: str, label: str) -> str:
    """URL parameter setting the target's variable to the clicked series' label value."""
    return f"var-{variable}={label_value(label)}"


@dataclass(frozen=True)
class DataLink:
    """A panel link from a clicked series to another dashboard.

    `params` are `carry(...)` / `from_label(...)` pieces; the data source and the time
    range always go along. `ref_id` limits the link to the series of one query of the
    panel (a panel mixing NVLink and IB series links each to its own dashboard).
    """

    uid: str
    title: str
    params: tuple[str, ...]
    ref_id: str | None = None

    def to_json(self) -> JsonDict:
        params = (carry("datasource"), *self.params, TIME_RANGE)
        return {"title": self.title, "url": dashboard_url(self.uid, params)}


def field_config_links(links: Sequence[DataLink]) -> tuple[list[JsonDict], list[JsonDict]]:
    """(fieldConfig.defaults.links, fieldConfig.overrides) placing each link on its series."""
    defaults = [link.to_json() for link in links if link.ref_id is None]
    by_ref: dict[str, list[JsonDict]] = {}
    for link in links:
        if link.ref_id is not None:
            by_ref.setdefault(link.ref_id, []).append(link.to_json())
    overrides = [
        {
            "matcher": {"id": "byFrameRefID", "options": ref_id},
            "properties": [{"id": "links", "value": ref_links}],
        }
        for ref_id, ref_links in by_ref.items()
    ]
    return defaults, overrides


def variable_names(dashboard: JsonDict) -> list[str]:
    return [str(v["name"]) for v in dashboard.get("templating", {}).get("list", [])]


def _nav_link(target: JsonDict, shared: Sequence[str]) -> JsonDict:
    return {
        "title": str(target["title"]).removeprefix(TITLE_PREFIX),
        "tooltip": str(target.get("description", "")),
        "type": "link",
        "icon": "dashboard",
        "url": dashboard_url(str(target["uid"]), [carry(name) for name in shared]),
        # Grafana appends from=...&to=...; includeVars would pass variables the target lacks
        "keepTime": True,
        "includeVars": False,
        "asDropdown": False,
        "targetBlank": False,
        "tags": [],
    }


def add_navigation(dashboards: Mapping[str, JsonDict]) -> None:
    """Give each dashboard a link bar to every other one, carrying their shared variables."""
    for source in dashboards.values():
        mine = variable_names(source)
        source["links"] = [
            _nav_link(target, [name for name in mine if name in variable_names(target)])
            for target in dashboards.values()
            if target is not source
        ]
