"""Shape of the Grafana file-provisioned alert rules."""

from __future__ import annotations

import json
import re

import yaml

from nvwatch.alerts.build import build_all
from nvwatch.alerts.rules import all_alerts
from nvwatch.mixin.config import MixinConfig

DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def test_grafana_provisioning_shape(cfg: MixinConfig) -> None:
    files = build_all(cfg)
    doc = yaml.safe_load(files["grafana-alerts.yaml"])
    assert doc == json.loads(files["grafana-alerts.json"])
    assert doc["apiVersion"] == 1
    seen = []
    for group in doc["groups"]:
        assert group["folder"] == cfg.grafana_folder
        assert DURATION.match(group["interval"])
        for rule in group["rules"]:
            assert set(rule) >= {
                "uid", "title", "condition", "data", "for", "labels", "annotations",
                "noDataState", "execErrState",
            }  # fmt: skip
            assert len(rule["uid"]) <= 40 and re.fullmatch(r"[a-z0-9-]+", rule["uid"])
            assert rule["noDataState"] in {"OK", "NoData", "Alerting"}
            assert rule["execErrState"] in {"Error", "Alerting", "OK"}
            assert DURATION.match(rule["for"])
            refs = {d["refId"]: d for d in rule["data"]}
            assert rule["condition"] in refs
            query = refs["A"]
            assert query["datasourceUid"] == cfg.grafana_datasource_uid
            assert query["model"]["expr"] and query["model"]["instant"] is True
            for ref in ("B", "C"):
                assert refs[ref]["datasourceUid"] == "__expr__"
            assert refs["C"]["model"]["type"] == "threshold"
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}
            assert "$value " not in rule["annotations"]["description"]
            seen.append(rule["title"])
    expected = [a.name for a in all_alerts(cfg)]
    assert seen == expected
    uids = [r["uid"] for g in doc["groups"] for r in g["rules"]]
    assert len(set(uids)) == len(uids)


def test_grafana_rule_matches_prometheus_rule(cfg: MixinConfig) -> None:
    doc = yaml.safe_load(build_all(cfg)["nvwatch-alerts.yaml"])
    graf = yaml.safe_load(build_all(cfg)["grafana-alerts.yaml"])
    prom = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
    for group in graf["groups"]:
        for rule in group["rules"]:
            twin = prom[rule["title"]]
            assert rule["data"][0]["model"]["expr"] == twin["expr"]
            assert rule["for"] == twin.get("for", "0s")
            assert rule["annotations"]["summary"] == twin["annotations"]["summary"]
