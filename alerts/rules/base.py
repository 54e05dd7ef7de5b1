"""What an alert is made of, and the phrases its texts share.

Every group module (`thermal_power`, `fabric`, `health`) builds its alerts from these, so
a description names a GPU, node, port or link the same way in every alert.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from mixin.config import MixinConfig


class Severity(str, Enum):
    CRITICAL = "critical"  # page: a node or GPU is broken or about to be
    WARNING = "warning"  # ticket: degraded, needs attention within the working day
    INFO = "info"  # capacity/efficiency signal for dashboards and reviews


@dataclass(frozen=True)
class Runbook:
    meaning: str
    confirm: str
    action: str


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str
    runbook: Runbook


@dataclass(frozen=True)
class AlertGroup:
    name: str
    title: str
    alerts: tuple[Alert, ...]


def q(value: str) -> str:
    """`value` in double quotes, for a label matcher such as `sensor="gpu"`."""
    return '"' + value + '"'


def where_gpu(cfg: MixinConfig) -> str:
    return (
        "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on "
        f"{{{{ $labels.{cfg.instance_label} }}}}"
    )


def where_node(cfg: MixinConfig) -> str:
    return (
        f"{{{{ $labels.{cfg.instance_label} }}}} in cluster {{{{ $labels.{cfg.cluster_label} }}}}"
    )


def where_port(cfg: MixinConfig) -> str:
    return (
        "IB port {{ $labels.device }}/{{ $labels.port }} on "
        f"{{{{ $labels.{cfg.instance_label} }}}}"
    )


def where_link(cfg: MixinConfig) -> str:
    return f"NVLink {{{{ $labels.link }}}} of {where_gpu(cfg)}"


def node_labels_with_class(cfg: MixinConfig) -> str:
    """Labels of a per-node count that is compared with its node class's expectation."""
    return f"{cfg.cluster_label}, {cfg.instance_label}, {cfg.node_class_label}"
