"""Render the alert and recording rule definitions for Prometheus and Grafana."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import yaml

from nvwatch.alerts.recording import recording_groups
from nvwatch.alerts.rules import Alert, alert_groups
from nvwatch.alerts.rules.base import Kind
from nvwatch.mixin.config import MixinConfig

JsonDict = dict[str, Any]


class _Dumper(yaml.SafeDumper):
    """Multi-line PromQL as literal blocks, so the rule files read like hand-written ones."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=4096)


def _prometheus_alert(cfg: MixinConfig, alert: Alert) -> JsonDict:
    rule: JsonDict = {"alert": alert.name, "expr": alert.expr}
    if alert.for_ != "0s":
        rule["for"] = alert.for_
    if alert.kind is Kind.CONDITION:
        # a scrape gap (agent restart) must not resolve a condition nobody repaired
        rule["keep_firing_for"] = cfg.keep_firing_for
    rule["labels"] = {"severity": alert.severity.value}
    rule["annotations"] = alert_annotations(cfg, alert)
    return rule


def alert_annotations(cfg: MixinConfig, alert: Alert) -> dict[str, str]:
    """summary, description and runbook_url, in Prometheus' template language.

    The description ends with the runbook's action: a notification read on a phone, or
    where the runbook_url does not open, says what to do.
    """
    return {
        "summary": alert.summary,
        "description": f"{alert.description} Action: {alert.runbook.action}",
        "runbook_url": cfg.runbook_url(alert.name),
    }


def prometheus_alerts(cfg: MixinConfig) -> JsonDict:
    return {
        "groups": [
            {
                "name": group.name,
                "interval": cfg.evaluation_interval,
                "rules": [_prometheus_alert(cfg, a) for a in group.alerts],
            }
            for group in alert_groups(cfg)
        ]
    }


def vmalert_alerts(cfg: MixinConfig) -> JsonDict:
    """The alert groups for vmalert before v1.90 (Debian's 1.79), which rejects a rule
    with `keep_firing_for`: the same rules without it. A scrape gap then resolves a
    condition alert as it did before Prometheus 2.42 (docs/alerts.md)."""
    rules = prometheus_alerts(cfg)
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("keep_firing_for", None)
    return rules


def prometheus_recording(cfg: MixinConfig) -> JsonDict:
    return {
        "groups": [
            {
                "name": group.name,
                "interval": group.interval_in(cfg),
                "rules": [{"record": r.record, "expr": r.expr} for r in group.rules],
            }
            for group in recording_groups(cfg)
        ]
    }


def grafana_uid(name: str) -> str:
    """Stable, short uid (Grafana allows 40 characters) derived from the alert name."""
    return "nvwatch-" + hashlib.sha256(name.encode()).hexdigest()[:12]


# Grafana's templates know $labels and humanize*, but the firing value lives in
# $values.<refId>.Value rather than Prometheus' $value.
_VALUE = re.compile(r"\$value\b")


def _grafana_text(text: str) -> str:
    return _VALUE.sub("$values.A.Value", text)


def _grafana_rule(cfg: MixinConfig, alert: Alert) -> JsonDict:
    return {
        "uid": grafana_uid(alert.name),
        "title": alert.name,
        "condition": "C",
        "data": [
            {
                # A: the Prometheus expression itself, evaluated instantly; only the
                # series that satisfy it come back, exactly as in a Prometheus rule.
                "refId": "A",
                "relativeTimeRange": {"from": 600, "to": 0},
                "datasourceUid": cfg.grafana_datasource_uid,
                "model": {
                    "refId": "A",
                    "expr": alert.expr,
                    "instant": True,
                    "range": False,
                    "intervalMs": 1000,
                    "maxDataPoints": 43200,
                },
            },
            {
                # B: 1 for every returned series, whatever its value (a filter such as
                # `up == 0` returns 0, which a plain threshold on A would miss).
                "refId": "B",
                "datasourceUid": "__expr__",
                "model": {
                    "refId": "B",
                    "type": "math",
                    "expression": "$A * 0 + 1",
                    "datasource": {"type": "__expr__", "uid": "__expr__"},
                },
            },
            {
                "refId": "C",
                "datasourceUid": "__expr__",
                "model": {
                    "refId": "C",
                    "type": "threshold",
                    "expression": "B",
                    "conditions": [{"evaluator": {"type": "gt", "params": [0]}}],
                    "datasource": {"type": "__expr__", "uid": "__expr__"},
                },
            },
        ],
        # Series absent means healthy, as in Prometheus: no data is OK, not alerting.
        "noDataState": "OK",
        "execErrState": "Error",
        "for": alert.for_,
        # No keep_firing_for: older Grafana versions' rule provisioning has no such field,
        # so it is left out rather than risk a rejected import. A Grafana-managed condition
        # may therefore resolve over a scrape gap; the Prometheus rules (what deploy/ and
        # the restart matrix run) keep it firing.
        "labels": {"severity": alert.severity.value},
        "annotations": {k: _grafana_text(v) for k, v in alert_annotations(cfg, alert).items()},
        "isPaused": False,
    }


def grafana_alerts(cfg: MixinConfig) -> JsonDict:
    """Grafana file provisioning (provisioning/alerting/*.yaml) of the same alerts."""
    return {
        "apiVersion": 1,
        "groups": [
            {
                "orgId": 1,
                "name": group.name,
                "folder": cfg.grafana_folder,
                "interval": cfg.evaluation_interval,
                "rules": [_grafana_rule(cfg, a) for a in group.alerts],
            }
            for group in alert_groups(cfg)
        ],
    }
