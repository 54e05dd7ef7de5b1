"""Figures a preview draws that no hardware can show, each against its published maximum.

A picture drawn from a simulated fleet whose time runs ten times as fast shows ten times
the NVLink bytes any GPU can send; a counter reset misread as a huge increase does the
same on a real fleet. `beyond_maxima` finds such figures: every series a panel drew is
compared with the most its scope's hardware can do, from NVIDIA's published figures.

What a series measures is read from the nvwatch metric names of the query that made it
and the panel's unit (`_quantity`); who it covers from its labels (`Scope`): one NVLink
(`link`), one GPU (`instance` and `gpu`), one InfiniBand port, one job's GPUs
(`job_id`), one node, a rack or a cluster, else the whole fleet. The maximum of a scope
is the sum over its devices, for as many directions (transmit, receive) as the query
reads. The devices come from the Prometheus drawn: each GPU's model from
`nvwatch_gpu_info`, each port's line rate from `nvwatch_ib_port_rate_bytes_per_second`
(the rate its sysfs states), each job's GPUs from `nvwatch_gpu_allocation_info`.
A figure may exceed its maximum by TOLERANCE (sampling and rounding) before it counts.

A rate of a counter may read more, by what polling allows (`sampling_slack`): an agent
serves the value of its last poll, so a poll that runs late under load leaves one scrape
with the previous value and the next with the new one. A `rate(...[w])` then holds one
poll's increment more than its samples' span: a GPU held down 100 % of the time reads
133 % over four 2 s scrapes. Given the scrape interval (an agent polls at the interval it
is scraped at), such a figure may exceed its maximum by that one poll as well.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from nvwatch.common.durations import DurationError, parse_duration
from nvwatch.dashboards.preview_panels import Series

TOLERANCE = 1.05
JOULES_PER_KWH = 3.6e6
# PCIe x16, one direction: lanes x transfer rate x 128b/130b encoding, in bytes
PCIE_X16_BYTES = {
    3: 16 * 8e9 * 128 / 130 / 8,
    4: 16 * 16e9 * 128 / 130 / 8,
    5: 16 * 32e9 * 128 / 130 / 8,
}
_METRIC = re.compile(r"nvwatch[a-z0-9_:]*")
# a counter's rate over a range selector written into the query: rate(x[1m]), increase(...)
_RATE_WINDOW = re.compile(r"\b(?:rate|increase)\([^\[\]]*\[([0-9a-z]+)\]")
_SCOPE_LABELS = ("instance", "gpu", "rack", "cluster", "node_class")
_PORT_LABELS = ("instance", "device", "port", "rack", "cluster", "node_class")


@dataclass(frozen=True)
class Board:
    """One GPU model's published figures (NVIDIA datasheets; shared hardware facts)."""

    nvlink_links: int
    nvlink_bytes_per_link: float  # one direction
    pcie_generation: int
    tdp_watts: float
    # the system that holds it at its maximum power, per GPU: the most of any DGX with
    # this GPU (V100: a DGX-2's 10 kW for 16, more than a DGX-1's 3.5 kW for 8)
    system_watts_per_gpu: float


# by a substring of the name NVML reports, most specific first
BOARDS: tuple[tuple[str, Board], ...] = (
    ("P100", Board(4, 20e9, 3, 300.0, 3200 / 8)),
    ("V100", Board(6, 25e9, 3, 300.0, 10000 / 16)),
    ("A100", Board(12, 25e9, 4, 400.0, 6500 / 8)),
    ("H100", Board(18, 25e9, 5, 700.0, 10200 / 8)),
    ("H200", Board(18, 25e9, 5, 700.0, 10200 / 8)),
    ("T4", Board(0, 0.0, 3, 70.0, 600 / 4)),
    ("1080 Ti", Board(0, 0.0, 3, 250.0, 1200 / 4)),
    ("2080 Ti", Board(2, 25e9, 3, 250.0, 1200 / 4)),  # the optional two-link bridge
)


def board_of(name: str) -> Board | None:
    return next((board for key, board in BOARDS if key in name), None)


class Querier(Protocol):
    def instant(self, expr: str, at: float) -> list[dict[str, object]]: ...


@dataclass(frozen=True)
class Gpu:
    labels: Mapping[str, str]
    board: Board
    jobs: frozenset[str]


@dataclass(frozen=True)
class Port:
    labels: Mapping[str, str]
    bytes_per_second: float


@dataclass(frozen=True)
class Fleet:
    """The devices a preview's Prometheus knows, with what each can do at most."""

    gpus: tuple[Gpu, ...]
    ports: tuple[Port, ...]

    @classmethod
    def read(cls, prometheus: Querier, at: float) -> Fleet:
        jobs: dict[tuple[str, str], set[str]] = {}
        for item in prometheus.instant("nvwatch_gpu_allocation_info", at):
            labels = _labels(item)
            jobs.setdefault((labels.get("instance", ""), labels.get("gpu", "")), set()).add(
                labels.get("job_id", "")
            )
        gpus = []
        for item in prometheus.instant("nvwatch_gpu_info", at):
            labels = _labels(item)
            board = board_of(labels.get("name", ""))
            if board is not None:
                key = (labels.get("instance", ""), labels.get("gpu", ""))
                gpus.append(Gpu(labels, board, frozenset(jobs.get(key, ()))))
        ports = [
            Port(_labels(item), float(_value(item)))
            for item in prometheus.instant("nvwatch_ib_port_rate_bytes_per_second", at)
        ]
        return cls(tuple(gpus), tuple(ports))

    def gpus_of(self, labels: Mapping[str, str]) -> list[Gpu]:
        job = labels.get("job_id")
        return [
            g
            for g in self.gpus
            if _agrees(g.labels, labels, _SCOPE_LABELS) and (job is None or job in g.jobs)
        ]

    def ports_of(self, labels: Mapping[str, str]) -> list[Port]:
        gpus_nodes = {g.labels.get("instance") for g in self.gpus_of(labels)}
        return [
            p
            for p in self.ports
            if _agrees(p.labels, labels, _PORT_LABELS)
            and ("job_id" not in labels or p.labels.get("instance") in gpus_nodes)
        ]


def _labels(item: Mapping[str, object]) -> dict[str, str]:
    metric = item.get("metric", {})
    return {str(k): str(v) for k, v in metric.items()} if isinstance(metric, dict) else {}


def _value(item: Mapping[str, object]) -> str:
    value = item.get("value", (0, "nan"))
    return str(value[1]) if isinstance(value, (list, tuple)) else "nan"


def _agrees(device: Mapping[str, str], series: Mapping[str, str], names: Sequence[str]) -> bool:
    return all(device.get(n) == series[n] for n in names if n in series and n in device)


@dataclass(frozen=True)
class Quantity:
    """What a series measures, and the most its scope's hardware can do of it."""

    name: str
    maximum: Callable[[Fleet, Mapping[str, str], int, float], float]


def _directions(expr: str, transmit: str, receive: str) -> int:
    return max(1, (transmit in expr) + (receive in expr))


def _nvlink(fleet: Fleet, labels: Mapping[str, str], directions: int, _range_s: float) -> float:
    gpus = fleet.gpus_of(labels)
    links = (lambda g: 1) if "link" in labels else (lambda g: g.board.nvlink_links)
    return directions * sum(links(g) * g.board.nvlink_bytes_per_link for g in gpus)


def _infiniband(fleet: Fleet, labels: Mapping[str, str], directions: int, _r: float) -> float:
    return directions * sum(p.bytes_per_second for p in fleet.ports_of(labels))


def _pcie(fleet: Fleet, labels: Mapping[str, str], directions: int, _range_s: float) -> float:
    both = 1 if "direction" in labels else 2
    gpus = fleet.gpus_of(labels)
    return min(directions, both) * sum(PCIE_X16_BYTES[g.board.pcie_generation] for g in gpus)


def _gpu_watts(fleet: Fleet, labels: Mapping[str, str], _d: int, _range_s: float) -> float:
    return sum(g.board.tdp_watts for g in fleet.gpus_of(labels))


def _node_watts(fleet: Fleet, labels: Mapping[str, str], _d: int, _range_s: float) -> float:
    return sum(g.board.system_watts_per_gpu for g in fleet.gpus_of(labels))


def _gpu_kwh(fleet: Fleet, labels: Mapping[str, str], d: int, range_s: float) -> float:
    return _gpu_watts(fleet, labels, d, range_s) * range_s / JOULES_PER_KWH


def _node_kwh(fleet: Fleet, labels: Mapping[str, str], d: int, range_s: float) -> float:
    return _node_watts(fleet, labels, d, range_s) * range_s / JOULES_PER_KWH


def _gpu_hours(fleet: Fleet, labels: Mapping[str, str], _d: int, range_s: float) -> float:
    return len(fleet.gpus_of(labels)) * range_s / 3600


def _gpus(fleet: Fleet, labels: Mapping[str, str], _d: int, _range_s: float) -> float:
    """Seconds throttled per second: at most one per GPU."""
    return float(len(fleet.gpus_of(labels)))


def _ratio(_fleet: Fleet, _labels: Mapping[str, str], _d: int, _range_s: float) -> float:
    return 1.0


def _quantity(expr: str, unit: str) -> tuple[Quantity, int] | None:
    """What `expr` drawn in `unit` measures, with the directions it reads; None: no
    published maximum applies (error rates, temperatures, clocks, queue waits)."""
    metrics = " ".join(_METRIC.findall(expr))
    rates = unit in ("Bps", "binBps", "decbytes/sec")
    table: list[tuple[bool, Quantity, int]] = [
        (unit == "percentunit", Quantity("ratio", _ratio), 1),
        (rates and "nvwatch_nvlink_" in metrics, Quantity("NVLink bytes/s", _nvlink),
         _directions(metrics, "nvlink_transmit", "nvlink_receive")),
        (rates and "nvwatch_ib_port_" in metrics, Quantity("InfiniBand bytes/s", _infiniband),
         _directions(metrics, "port_transmit", "port_receive")),
        (rates and "pcie_throughput" in metrics, Quantity("PCIe bytes/s", _pcie), 2),
        (unit == "watt" and "nvwatch_bmc_power_watts" in metrics,
         Quantity("node power", _node_watts), 1),
        (unit == "watt" and "nvwatch_gpu_power" in metrics, Quantity("GPU power", _gpu_watts), 1),
        (unit == "kwatth" and "nvwatch_bmc_power_watts" in metrics,
         Quantity("node energy", _node_kwh), 1),
        (unit == "kwatth" and "nvwatch_gpu_energy" in metrics,
         Quantity("GPU energy", _gpu_kwh), 1),
        (unit == "h", Quantity("GPU-hours", _gpu_hours), 1),
        (unit == "s" and "throttle_seconds" in metrics,
         Quantity("seconds throttled per second", _gpus), 1),
    ]  # fmt: skip
    return next(((q, d) for applies, q, d in table if applies), None)


@dataclass(frozen=True)
class Beyond:
    """One series that showed more than its hardware can."""

    dashboard: str
    panel: str
    legend: str
    quantity: str
    value: float
    maximum: float

    def line(self) -> str:
        return (
            f"{self.dashboard}: panel {self.panel!r}, {self.legend or 'its series'}: "
            f"{self.quantity} {self.value:.4g} above the hardware's maximum {self.maximum:.4g}"
        )


@dataclass(frozen=True)
class Drawn:
    """A series as a panel drew it: the query that made it and the panel's unit."""

    dashboard: str
    panel: str
    unit: str
    expr: str
    series: Series


def sampling_slack(expr: str, scrape_s: float | None) -> float:
    """How far above the truth polling can make `expr` read: a counter's rate over a
    window of w seconds spans at least w - scrape between its samples, and may hold one
    poll (a scrape interval) more than that span; 1 for anything else."""
    if scrape_s is None:
        return 1.0
    windows = []
    for text in _RATE_WINDOW.findall(expr):
        try:
            windows.append(parse_duration(text, "rate window"))
        except DurationError:
            continue  # a Grafana variable left unexpanded: no window to reason from
    if not windows:
        return 1.0
    span = min(windows) - scrape_s
    # a window of one scrape or less holds at most two samples: the rate can be anything
    return math.inf if span <= 0 else (span + scrape_s) / span


def beyond_maxima(
    drawn: Iterable[Drawn], fleet: Fleet, range_s: float, scrape_s: float | None = None
) -> list[Beyond]:
    """Every drawn series whose largest value exceeds its scope's maximum; with
    `scrape_s`, a counter's rate may exceed it by one poll too (`sampling_slack`)."""
    found = []
    for item in drawn:
        measured = _quantity(item.expr, item.unit)
        values = [v for _, v in item.series.points if math.isfinite(v)]
        if measured is None or not values:
            continue
        quantity, directions = measured
        if not fleet.gpus_of(item.series.labels):
            continue  # a scope with no GPU known (a controller's series): nothing to bound
        maximum = quantity.maximum(fleet, item.series.labels, directions, range_s)
        if max(values) > maximum * TOLERANCE * sampling_slack(item.expr, scrape_s):
            found.append(
                Beyond(item.dashboard, item.panel, item.series.legend, quantity.name,
                       max(values), maximum)
            )  # fmt: skip
    return found
