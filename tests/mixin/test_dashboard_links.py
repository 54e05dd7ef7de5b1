"""grafana.com import semantics and drill-down links of the generated dashboards.

Structural checks on the JSON Grafana reads: every data-source reference resolves to the
import's input or to the `$datasource` variable, `__requires` says what the README says,
and every link's target dashboard exists and has the variables the link sets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.mixin.conftest import REPO, panel_data_links

Json = dict[str, Any]

BUILTIN_ANNOTATIONS = {"type": "grafana", "uid": "-- Grafana --"}
QUERYPARAM = re.compile(r"^\$\{(\w+):queryparam\}$")
SET_VAR = re.compile(r"^var-(\w+)=(.+)$")
FIELD_LABEL = re.compile(r"^\$\{__field\.labels\.(\w+)\}$")


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every key of every object in the JSON tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _walk(item, f"{path}/{i}")


def _variables(dash: Json) -> dict[str, Json]:
    return {v["name"]: v for v in dash["templating"]["list"]}


def _by_uid(dashboards: dict[str, Json]) -> dict[str, Json]:
    return {d["uid"]: d for d in dashboards.values()}


def _links(dash: Json) -> Iterator[tuple[str, Json | None, Json]]:
    """(where, panel or None, link) for the link bar and every panel data link."""
    for link in dash.get("links", []):
        yield f"{dash['uid']} link bar {link['title']!r}", None, link
    for panel in dash["panels"]:
        for ref_id, link in panel_data_links(panel):
            yield f"{dash['uid']} panel {panel['title']!r} ({ref_id})", panel, link


def _target_and_params(url: str) -> tuple[str, list[str]]:
    parts = urlsplit(url)
    match = re.fullmatch(r"/d/([\w-]+)/[\w-]+", parts.path)
    assert match, f"{url}: not a /d/<uid>/<slug> dashboard address"
    return match.group(1), parts.query.split("&") if parts.query else []


def _sets(params: list[str]) -> dict[str, str]:
    """Variable of the target -> where its value comes from (`${x:queryparam}`: variable x)."""
    sets: dict[str, str] = {}
    for param in params:
        if param == "${__url_time_range}":
            continue
        carried, assigned = QUERYPARAM.match(param), SET_VAR.match(param)
        assert carried or assigned, f"unexpected URL parameter {param!r}"
        name = (carried or assigned).group(1)  # type: ignore[union-attr]
        assert name not in sets, f"{name} set twice"
        sets[name] = "${" + name + "}" if carried else assigned.group(2)  # type: ignore[union-attr]
    return sets


# --- data sources ------------------------------------------------------------------


def test_every_datasource_reference_resolves_to_the_input_or_the_variable(
    dashboards: dict[str, Json],
) -> None:
    for name, dash in dashboards.items():
        inputs = {i["name"]: i for i in dash["__inputs"]}
        assert set(inputs) == {"DS_PROMETHEUS"}, name
        assert inputs["DS_PROMETHEUS"]["type"] == "datasource"
        assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
        ds_var = _variables(dash)["datasource"]
        assert ds_var["type"] == "datasource" and ds_var["query"] == "prometheus", name
        references = 0
        for path, key, value in _walk(dash):
            if key != "datasource" or path == "/templating/list/0":
                continue
            references += 1
            if path.startswith("/annotations/list/"):
                assert value == BUILTIN_ANNOTATIONS, f"{name}{path}"
            else:
                assert value == {"type": "prometheus", "uid": "${datasource}"}, f"{name}{path}"
        assert references > len(dash["panels"]), f"{name}: panels and targets lost their source"


def test_the_input_is_referenced_once_as_the_variable_default(
    dashboards: dict[str, Json],
) -> None:
    """`${DS_PROMETHEUS}` is what the import replaces; its only place is the variable's
    current value, so the imported dashboard opens on the chosen data source and no name
    of the exporting Grafana is fixed anywhere."""
    for name, dash in dashboards.items():
        text = json.dumps(dash)
        declared = {i["name"] for i in dash["__inputs"]}
        used = set(re.findall(r"\$\{(DS_\w+)\}", text))
        assert used == declared, name
        ds_var = _variables(dash)["datasource"]
        assert ds_var["current"]["value"] == "${DS_PROMETHEUS}", name
        assert not ds_var.get("regex"), f"{name}: the data source variable is fixed by regex"
        # the variable's text and value, nowhere else
        assert text.count("${DS_PROMETHEUS}") == 2, name


def test_importing_replaces_the_input_and_panels_follow_the_variable(
    dashboards: dict[str, Json],
) -> None:
    """What Grafana's import does: every `${DS_PROMETHEUS}` becomes the chosen uid."""
    for dash in dashboards.values():
        imported = json.loads(json.dumps(dash).replace("${DS_PROMETHEUS}", "my-prom-uid"))
        assert "${DS_" not in json.dumps(imported)
        assert _variables(imported)["datasource"]["current"]["value"] == "my-prom-uid"
        for panel in imported["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}"


def test_requires_states_the_grafana_versions_of_the_readme(
    dashboards: dict[str, Json],
) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    stated = re.search(r"Grafana (\d+)\.(\d+) to (\d+)\.x", readme)
    assert stated, "README no longer states the Grafana versions the dashboards target"
    low = f"{stated.group(1)}.{stated.group(2)}.0"
    for name, dash in dashboards.items():
        grafana = [r for r in dash["__requires"] if r["type"] == "grafana"]
        assert [r["version"] for r in grafana] == [low], name
        panel_types = {r["id"] for r in dash["__requires"] if r["type"] == "panel"}
        assert panel_types == {p["type"] for p in dash["panels"]}, name


# --- links ---------------------------------------------------------------------------


def test_every_link_targets_an_existing_dashboard_and_its_variables(
    dashboards: dict[str, Json],
) -> None:
    by_uid = _by_uid(dashboards)
    count = 0
    for source in dashboards.values():
        mine = _variables(source)
        for where, panel, link in _links(source):
            count += 1
            uid, params = _target_and_params(link["url"])
            assert uid in by_uid, f"{where}: no dashboard {uid}"
            # a fleet panel's data link to its own dashboard narrows it to the clicked
            # node; any other link to itself goes nowhere
            narrows = panel is not None and any(
                FIELD_LABEL.match(v) for v in _sets(params).values()
            )
            assert uid != source["uid"] or narrows, f"{where}: links to itself"
            theirs = _variables(by_uid[uid])
            for variable, value in _sets(params).items():
                assert variable in theirs, f"{where}: {uid} has no variable {variable}"
                carried = re.fullmatch(r"\$\{(\w+)\}", value)
                if carried:
                    assert carried.group(1) in mine, f"{where}: carries unknown ${value}"
                else:
                    assert panel is not None, f"{where}: only data links read series labels"
                    assert FIELD_LABEL.match(value), f"{where}: {variable}={value}"
            if panel is None:
                assert link["keepTime"] and not link["includeVars"], where
            else:
                assert "${__url_time_range}" in params, f"{where}: loses the time range"
                assert "${datasource:queryparam}" in params, f"{where}: loses the data source"
    assert count > 30


def test_every_dashboard_links_to_every_other_carrying_the_shared_variables(
    dashboards: dict[str, Json],
) -> None:
    by_uid = _by_uid(dashboards)
    for source in dashboards.values():
        bar = {_target_and_params(link["url"])[0]: link for link in source["links"]}
        assert set(bar) == set(by_uid) - {source["uid"]}
        for uid, link in bar.items():
            shared = set(_variables(source)) & set(_variables(by_uid[uid]))
            assert set(_sets(_target_and_params(link["url"])[1])) == shared, link["title"]


def _data_link_targets(dash: Json) -> dict[str, dict[str, str]]:
    """Target uid -> variables set, over every data link of the dashboard."""
    found: dict[str, dict[str, str]] = {}
    for _, panel, link in _links(dash):
        if panel is not None:
            uid, params = _target_and_params(link["url"])
            found.setdefault(uid, {}).update(_sets(params))
    return found


@pytest.mark.parametrize(
    ("source", "target", "variables"),
    [
        # the fleet views drill into one node
        ("nvwatch-cluster-overview", "nvwatch-node", {"cluster", "instance"}),
        ("nvwatch-cluster-overview", "nvwatch-nvlink", {"cluster", "instance"}),
        ("nvwatch-cluster-overview", "nvwatch-infiniband", {"cluster", "instance"}),
        ("nvwatch-thermal-power", "nvwatch-node", {"cluster", "instance"}),
        ("nvwatch-power-cooling", "nvwatch-node", {"cluster", "instance"}),
        # the node's BMC row to the fleet's power and cooling
        ("nvwatch-node", "nvwatch-power-cooling", {"cluster"}),
        ("nvwatch-capacity-review", "nvwatch-node", {"cluster", "instance"}),
        # the node into its NVLink links (of one GPU) and IB ports
        ("nvwatch-node", "nvwatch-nvlink", {"cluster", "instance", "gpu"}),
        ("nvwatch-node", "nvwatch-infiniband", {"cluster", "instance"}),
        # and back to the node (and its GPU) a series belongs to
        ("nvwatch-nvlink", "nvwatch-node", {"cluster", "instance", "gpu"}),
        ("nvwatch-infiniband", "nvwatch-node", {"cluster", "instance"}),
    ],
)
def test_drill_down_from_a_series(
    dashboards: dict[str, Json], source: str, target: str, variables: set[str]
) -> None:
    sets = _data_link_targets(_by_uid(dashboards)[source]).get(target)
    assert sets is not None, f"no data link from {source} to {target}"
    assert variables | {"datasource"} <= set(sets)


def test_node_and_gpu_are_carried_between_node_and_nvlink(dashboards: dict[str, Json]) -> None:
    by_uid = _by_uid(dashboards)
    for source, target in (("nvwatch-node", "nvwatch-nvlink"), ("nvwatch-nvlink", "nvwatch-node")):
        bar = {_target_and_params(x["url"])[0]: x for x in by_uid[source]["links"]}
        carried = set(_sets(_target_and_params(bar[target]["url"])[1]))
        assert {"datasource", "cluster", "instance", "gpu"} <= carried
    # the GPU carried over selects the per-link series the NVLink dashboard shows
    # (recording rules per node have no gpu label)
    for panel in by_uid["nvwatch-nvlink"]["panels"]:
        for target in panel["targets"]:
            for selector in re.findall(r"(?<![:\w])nvwatch_nvlink_\w+\{[^}]*\}", target["expr"]):
                assert 'gpu=~"$gpu"' in selector, panel["title"]


def test_a_data_link_limited_to_one_query_names_a_query_of_its_panel(
    dashboards: dict[str, Json],
) -> None:
    for dash in dashboards.values():
        for panel in dash["panels"]:
            ref_ids = {t["refId"] for t in panel["targets"]}
            for ref_id, link in panel_data_links(panel):
                assert ref_id is None or ref_id in ref_ids, (panel["title"], link["title"])
