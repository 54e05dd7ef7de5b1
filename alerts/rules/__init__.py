"""Every nvwatch alert, defined once: expression, severity, texts and runbook.

One module per rule group (`thermal_power`, `fabric`, `health`, `bmc`, `attribution`,
`scheduler`; `straggler` holds one alert of the jobs group), one small function per
alert; `base` holds what an alert is made of.
`alerts/render.py` turns the groups into Prometheus rule YAML and Grafana-managed alert rules, and
`alerts/docs.py` into docs/alerts.md; the runbook sections are the anchors of
`runbook_url`.
"""

from __future__ import annotations

from nvwatch.alerts.rules import attribution, bmc, fabric, health, scheduler, thermal_power
from nvwatch.alerts.rules.base import Alert, AlertGroup, Runbook, Severity
from nvwatch.mixin.config import MixinConfig

__all__ = ["Alert", "AlertGroup", "Runbook", "Severity", "alert_groups", "all_alerts"]


def alert_groups(cfg: MixinConfig) -> tuple[AlertGroup, ...]:
    """The rule groups in the order of the rule files and of docs/alerts.md."""
    return (
        thermal_power.group(cfg),
        fabric.group(cfg),
        health.group(cfg),
        bmc.group(cfg),
        attribution.group(cfg),
        scheduler.group(cfg),
    )


def all_alerts(cfg: MixinConfig) -> tuple[Alert, ...]:
    return tuple(a for g in alert_groups(cfg) for a in g.alerts)
