"""What an alert is made of, and the phrases its texts share.

Every group module (`thermal_power`, `fabric`, `health`) builds its alerts from these, so
a description names a GPU, node, port or link the same way in every alert.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from nvwatch.mixin.config import MixinConfig


class Severity(str, Enum):
    CRITICAL = "critical"  # page: a node or GPU is broken or about to be
    WARNING = "warning"  # ticket: degraded, needs attention within the working day
    INFO = "info"  # capacity/efficiency signal for dashboards and reviews


class Kind(str, Enum):
    """What an alert watches, which decides how it must be written and tested.

    A condition lasts until someone repairs it, so the alert reads its level: it fires
    from the first sample Prometheus ever sees (a fault older than the scrape, a
    restarted agent or Prometheus) and stays firing until the level is healthy again.
    An event happens and is over; the alert reads its increase or rate, which survive
    counter resets, and resolves a while after the last one.
    """

    CONDITION = "condition"
    EVENT = "event"


@dataclass(frozen=True)
class Runbook:
    meaning: str
    confirm: str
    action: str
    # condition: what "repaired" means and what the alert then reads; event: how long
    # it keeps firing after the last event
    clears: str


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str
    runbook: Runbook
    kind: Kind


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


def count_or_zero(by: str, counted: str, scraped: str) -> str:
    """`counted` (an aggregate `by` some labels), or 0 for each `scraped` group without one.

    `count by (node) (series)` has no result at all for a node that has none of the
    series, so "fewer than expected" cannot fire exactly when everything is gone (NVML
    fails, the HCAs vanished). `scraped` (a filter that is 1 where the thing is known
    to be there to count, e.g. `up == 1`) supplies the 0; a node that is not scraped
    has its own alert and no 0.
    """
    return f"(\n    {counted}\n  or max by ({by}) ({scraped}) * 0\n)"


def new_events(
    cfg: MixinConfig, counter: str, *, read_when: str | None = None, own_labels: str = ""
) -> str:
    """Events `counter` counted within `rate_window`, as a filter that keeps only > 0.

    Two ways to see them, each for a case the other misses, in the order that makes
    `$value` the exact number of new events wherever it can be:
    - the count now minus the last count before the window, however old that one is
      (up to `counter_gap_lookback`): events during a scrape gap (agent restart,
      Prometheus down) page once after the gap, and a count merely carried over a
      restart is no new event (the old idiom `x unless x offset <window>` paged a window
      after every restart: the staleness markers of the gap hide `offset`'s sample);
    - with `read_when` (a series that is 1 in each scrape in which the counter's source
      was read, e.g. `nvwatch_gpu_up`; `own_labels` are the counter's labels it lacks):
      a counter series that exists only from its first event on is born at that value,
      which no difference can show. It is new when it was missing from a scrape in the
      window in which its source was read; a source outage or an agent restart cannot
      fake a birth, and a counter that is already there at the first scrape Prometheus
      ever makes (events older than the monitoring) does not page;
    - without `read_when`, `increase()`, for a counter that is reset inside the window
      and counts again without leaving a scrape (IB counters cleared with `perfquery
      -R`, then a flap). A counter born with its first event goes without it: after a
      real reset it is absent until its next event, which the birth branch sees, and a
      count that only drops (a restarted agent finds fewer Xid lines because the
      kernel's ring buffer overwrote old ones) must not read as new events.
    """
    w = cfg.rate_window
    branches = [f"{counter} - last_over_time({counter}[{cfg.counter_gap_lookback}] offset {w}) > 0"]
    if read_when is not None:
        branches.append(
            f"{counter}\n  and count_over_time({counter}[{w}])\n"
            f"    < ignoring ({own_labels}) group_left () sum_over_time({read_when}[{w}])"
        )
    else:
        branches.append(f"increase({counter}[{w}]) > 0")
    return "\nor ".join(branches)
