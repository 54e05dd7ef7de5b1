"""A Prometheus that answers the dashboards' queries with made-up but realistic series.

The preview's own code (`resolve_variables`, `query_panel`) asks it as it would ask a
real one; no server runs. An answer's labels are what the query would return: the
`by (...)` of its outer aggregation, or else the labels of the first series it selects,
a recorded series' read from the mixin's recording rule, a raw family's from the metric
catalogue with the labels the scrape adds (cluster, instance, job, node_class, rack),
and `ALERTS` as the alert rules' names and labels. A matcher to a plain value (the
variable the preview chose, `kind="factor"`) holds its label to that value. Values are
real names where the fleet has them (dgx-000, mlx5_3, NvwatchIbPortRateDegraded, account
names), 8 GPUs on each of 4 nodes, and numbers spread over the magnitudes of the panel's
unit (a 10,300 rpm fan, 50 GB/s, a fair-share factor of 1e-06).
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

from nvwatch.agent.catalogue import BY_NAME, IDENTITY
from nvwatch.alerts.render import prometheus_alerts, prometheus_recording
from nvwatch.dashboards.preview import Prometheus, Window
from nvwatch.mixin.config import MixinConfig

END = 1_793_000_000.0  # 2026-10-26
WINDOW = Window(END, 3600.0, 15.0)
MAX_SERIES = 48
TARGET_LABELS = ("cluster", "instance", "job", "node_class", "rack")
_NODES = [f"dgx-{i:03d}" for i in range(4)]
VALUES: dict[str, list[str]] = {
    "cluster": ["dgx-east-prod"],
    "instance": _NODES,
    "gpu": [str(i) for i in range(8)],
    "uuid": [f"GPU-{i:08x}-5d7e-4c2a-9f1b-3a6c8e0d2b4f" for i in range(8)],
    "link": [str(i) for i in range(18)],
    "device": [f"mlx5_{i}" for i in range(8)],
    "port": ["1"],
    "node_class": ["dgx-h100", "dgx-a100", "dgx1-v100"],
    "rack": ["rack-00", "rack-01"],
    "job": ["nvwatch"],
    "reason": [
        "hw_thermal_slowdown",
        "sw_power_cap",
        "hw_power_brake",
        "sw_thermal_slowdown",
        "sync_boost",
        "Resources",
        "Priority",
    ],
    "sensor": ["gpu", "memory"],
    "entity": ["inlet", "exhaust", "cpu", "psu"],
    "threshold": ["slowdown", "memory_max"],
    "clock": ["sm", "memory"],
    "direction": ["tx", "rx"],
    "type": ["corrected", "uncorrected", "crc_flit", "link_error_recovery"],
    "scope": ["volatile"],
    "kind": ["current", "max"],
    "cause": ["single_bit_ecc", "double_bit_ecc"],
    "xid": ["79", "94"],
    "profile": ["3g.40gb", "1g.10gb+me", "7g.80gb"],
    "gpu_instance_id": ["1", "2", "13"],
    "compute_instance_id": ["0"],
    "mig_uuid": ["MIG-7b2c9d1e-4f3a-5b6c-8d9e-0a1b2c3d4e5f"],
    "remote_type": ["gpu", "nvswitch"],
    "remote_gpu": ["3"],
    "remote_pci_bus_id": ["00000000:1B:00.0"],
    "nearest_gpus": ["0,1", "2,3", "4,5,6,7"],
    "link_layer": ["InfiniBand"],
    "counter": ["port_xmit_wait", "port_rcv_data"],
    "method": ["dcmi"],
    "partition": ["gpu-h100", "gpu-a100-80g", "v100-debug"],
    "state": ["allocated", "idle", "unavailable"],
    "account": [
        "ml-research",
        "nlp-foundation",
        "physics-sim",
        "robotics-perception",
        "speech-asr",
        "vision-prod",
    ],
    "user": ["alice", "bob", "nlp01", "robotics01", "speech01", "vision02"],
    "job_id": ["1001", "1002", "4128374", "4128391"],
    "scheduler": ["slurm"],
    # a Slurm job has no pod: Prometheus leaves out the empty labels
    "pod": [""],
    "namespace": [""],
    "container": [""],
    "alertstate": ["firing"],
    "source": ["nvml", "infiniband", "bmc", "scheduler"],
}
# a label whose values depend on the family: a BMC's sensors are no GPU's
_FAMILY_VALUES = {
    ("nvwatch_bmc", "sensor"): [
        "Inlet Temp (front)",
        "Exhaust Temp",
        "CPU0 Temp",
        "PSU3 Status",
        "FAN_6_F",
        "GPU Board Temp",
    ],
    ("nvwatch_nvlink", "type"): ["crc_flit", "replay", "recovery"],
    ("nvwatch_ib", "type"): ["symbol", "link_error_recovery", "port_rcv_errors"],
    # one agent reads the cluster's Slurm, on its controller
    ("nvwatch_scheduler", "instance"): ["slurmctld-01"],
}
# per Grafana unit: the smallest and largest values the fleet shows in it
SPANS = {
    "percentunit": (0.004, 1.0),
    "watt": (45.0, 10_300.0),
    "celsius": (24.0, 93.0),
    "Bps": (2.5e5, 5e10),
    "bytes": (5e8, 8.1e10),
    "hertz": (2.1e8, 1.98e9),
    "s": (0.5, 87_500.0),
    "cps": (0.02, 294.0),
    "rotrpm": (3_100.0, 15_300.0),
    "kwatth": (0.4, 1_236.0),
    "h": (0.0139, 1_236.0),
}
_OTHER_SPAN = (1e-6, 87_500.0)
# labels that follow another: a node has one class and one rack, a GPU one UUID
_DERIVED = {"node_class": "instance", "rack": "instance", "uuid": "gpu"}
_RECORDED = re.compile(r"\b([a-z]+:nvwatch_\w+:\w+|nvwatch:\w+|nvwatch_\w+|ALERTS|up(?=\{))")
_AGGREGATION = re.compile(r"\b(?:sum|avg|max|min|count|group)\s*(?:by\s*\(([^)]*)\))?\s*\(")
_MATCHER = re.compile(r"(\w+)\s*(=~|=)\s*\"([^\"]*)\"")
_REPLACED = re.compile(r"label_replace\([^\"]*\"(\w+)\"")
_PLAIN = re.compile(r"^[\w.:+,/ -]+$")


class SyntheticPrometheus(Prometheus):
    """Answers as a fleet of 4 DGX nodes would, with values spread over `unit`."""

    def __init__(self, config: MixinConfig) -> None:
        super().__init__("http://synthetic.invalid")
        self.unit = "none"  # the Grafana unit of the panel asking
        self.states = False  # whether it asks for states (a state timeline's 0, 1, 4)
        self.recorded = {
            rule["record"]: rule["expr"]
            for group in prometheus_recording(config)["groups"]
            for rule in group["rules"]
        }
        self.alerts = [
            (rule["alert"], rule["expr"], rule.get("labels", {}))
            for group in prometheus_alerts(config)["groups"]
            for rule in group["rules"]
        ]

    def instant(self, expr: str, at: float) -> list[dict[str, Any]]:
        found = self.series(expr)
        return [
            {"metric": labels, "value": [at, repr(self.value(i, len(found)))]}
            for i, labels in enumerate(found)
        ]

    def range(self, expr: str, window: Window) -> list[dict[str, Any]]:
        found = self.series(expr)
        steps = int(window.range_s // window.step)
        times = [window.start + k * window.step for k in range(steps + 1)]
        return [
            {
                "metric": labels,
                "values": [[t, repr(self.value(i, len(found), k))] for k, t in enumerate(times)],
            }
            for i, labels in enumerate(found)
        ]

    def label_values(self, label: str, match: str, window: Window) -> list[str]:
        return sorted(VALUES.get(label, [f"{label}-a", f"{label}-b"]))

    def value(self, index: int, count: int, step: int = 0) -> float:
        """Series `index` of `count` spread from the unit's most (the widest to print) to
        its least, on a log scale; over time a slow swing of a fifth."""
        if self.states:  # a few long runs of each state, as flags and port states go
            return (0.0, 1.0, 4.0)[(index + step // 90) % 3]
        low, high = SPANS.get(self.unit, _OTHER_SPAN)
        base = high * (low / high) ** (index / max(1, count - 1))
        swing = 1 + 0.2 * math.sin(step / 20 + index)
        return float(min(high, base * swing) if self.unit == "percentunit" else base * swing)

    def series(self, expr: str) -> list[dict[str, str]]:
        """The label sets `expr` returns (see the module docstring)."""
        names, family = self.labels(expr)
        if family == "ALERTS" and names == ("alertname",):
            return self._alerts()
        fixed = {
            label: value.split("|")
            for label, op, value in _MATCHER.findall(expr)
            if (op == "=" or _PLAIN.match(value.replace("|", ","))) and value
        }
        free = [n for n in names if n not in _DERIVED]
        choices = [fixed.get(n) or _values(family, n) for n in free]
        found = []
        for values in itertools.islice(itertools.product(*choices), MAX_SERIES):
            labels = dict(zip(free, values, strict=True))
            for name in names:
                if name in _DERIVED:
                    labels[name] = _derived(name, labels.get(_DERIVED[name], ""))
            found.append({n: v for n, v in labels.items() if v})
        return found

    def labels(self, expr: str, depth: int = 0) -> tuple[tuple[str, ...], str]:
        """The label names of what `expr` returns, and the family it reads."""
        selector = _RECORDED.search(expr)
        aggregation = _AGGREGATION.search(expr)
        family = selector.group(1) if selector else ""
        if aggregation and (selector is None or aggregation.start() < selector.start()):
            names = [n.strip() for n in (aggregation.group(1) or "").split(",") if n.strip()]
        elif family == "ALERTS":
            return ("alertname",), family
        elif family in self.recorded and depth < 5:
            names = list(self.labels(self.recorded[family], depth + 1)[0])
        elif family.removesuffix("_bucket") in BY_NAME:
            spec = BY_NAME[family.removesuffix("_bucket")]
            names = [*TARGET_LABELS, *IDENTITY[spec.scope], *spec.own_labels]
        else:
            names = list(TARGET_LABELS)
        names += _REPLACED.findall(expr)
        if "histogram_quantile" in expr:
            names = [n for n in names if n != "le"]
        # the order of the product: nodes first, then GPUs, then the rest
        order = {name: i for i, name in enumerate(("cluster", "instance", "gpu"))}
        unique = sorted(dict.fromkeys(names), key=lambda n: order.get(n, len(order)))
        return tuple(unique), family

    def _alerts(self) -> list[dict[str, str]]:
        """Twelve firing alerts of the mixin's rules, each with its rule's labels."""
        found = []
        for i in range(12):
            name, expr, extra = self.alerts[(2 * i) % len(self.alerts)]
            names, family = self.labels(expr)
            labels = {n: _values(family, n)[i % len(_values(family, n))] for n in names}
            labels = {n: v for n, v in labels.items() if v}
            found.append({**labels, **extra, "alertname": name, "alertstate": "firing"})
        return found


def _values(family: str, label: str) -> list[str]:
    for (prefix, name), values in _FAMILY_VALUES.items():
        if name == label and prefix in family:
            return values
    return VALUES.get(label, [f"{label}-a", f"{label}-b"])


def _derived(name: str, parent: str) -> str:
    parents = VALUES.get(_DERIVED[name], [])
    index = parents.index(parent) if parent in parents else 0
    return VALUES[name][index % len(VALUES[name])]
