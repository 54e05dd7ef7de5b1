"""A small, fully known fleet history for the report tests, written as OpenMetrics.

Every value is generated here from simple rules, and the test's expectations are
computed from these same arrays (integrals, sums, episode windows), never from the
report's own code. Episodes sit in known weeks of a 21-day range:

- week 1: thermal runaway on node-c GPU 2 (day 3, 06:00-16:00, sw_thermal_slowdown);
  node-a GPU 3 lost for 6 h (day 5); alice's job holds node-a's 4 GPUs days 1-6, busy.
- week 2: node-b power-capped (days 8-12, every GPU at TDP with sw_power_cap);
  node-d idle (days 7-14); node-c mlx5_0 link down twice (day 10); 3 corrected ECC
  errors on node-c GPU 0 (day 12).
- week 3: IB congestion on node-a mlx5_1 (days 15-16, 20 % transmit wait); bob's job
  holds node-b's 4 GPUs days 14-17 at 2 % utilization; XID 79 on node-c GPU 1 (day 18);
  node-b's agent down for 12 h (day 19).

Every node has a BMC (the `nvwatch-bmc` probe job, with its node's labels): node power
is its GPUs' power plus a known rest, read by DCMI or a "Total Power" sensor, with each
supply's input power beside it; inlet, exhaust and CPU air; four fans; two supplies.
Its episodes: node-b's PSU2 failed (days 4-5, 36 h); rack-01 warm, 32 °C inlet, above
the DGX A100's 30 °C and below the DGX-1's 35 °C (day 10, 3 h); node-c's FAN3 stopped
(day 11, 12 h), and its GPU 3 slows down for it; node-d's BMC unreachable (day 13, 6 h);
node-d's FAN1 slow, 900 rpm and critical (day 14, 4 h); a hot aisle on rack-00, 41 °C
inlet (day 16, 8 h), and node-a's GPU 0 slows down for it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]

START = dt.datetime(2026, 10, 5, tzinfo=dt.timezone.utc).timestamp()  # a Monday
DAYS = 21
INTERVAL = 900.0  # a 15-minute scrape keeps the backfill small; 1 h steps see 4 samples
END = START + DAYS * 86400
TIMES = START + INTERVAL * np.arange(int(DAYS * 86400 / INTERVAL) + 1)
DAY = 86400.0
HOUR = 3600.0
WAIT_TICK = 4e-9  # the mixin's ib_transmit_wait_tick_seconds
IB_RATE = 12.5e9  # EDR
NVLINK_SPEED = 25e9


@dataclass(frozen=True)
class Node:
    name: str
    node_class: str
    rack: str
    tdp: float
    slowdown: float
    hbm: bool  # A100: HBM temperature and GPM activity
    phase: float

    @property
    def instance(self) -> str:
        return f"{self.name}:9477"

    def labels(self) -> dict[str, str]:
        return {
            "job": "nvwatch",
            "cluster": "lab",
            "rack": self.rack,
            "node_class": self.node_class,
            "instance": self.instance,
        }


NODES = (
    Node("node-a", "dgx1-v100", "rack-00", 300.0, 87.0, False, 0.0),
    Node("node-b", "dgx1-v100", "rack-00", 300.0, 87.0, False, 1.0),
    Node("node-c", "dgx-a100", "rack-01", 400.0, 89.0, True, 2.0),
    Node("node-d", "dgx-a100", "rack-01", 400.0, 89.0, True, 3.0),
)
GPUS = 4
PORTS = ("mlx5_0", "mlx5_1")


def during(first_day: float, last_day: float) -> npt.NDArray[np.bool_]:
    """Samples with START + first_day <= t < START + last_day (days may be fractional)."""
    return (START + first_day * DAY <= TIMES) & (START + last_day * DAY > TIMES)


# episode windows, shared with the tests' expectations
THERMAL = ("node-c", 2, during(3.25, 3 + 16 / 24))
LOST = ("node-a", 3, during(5, 5.25))
ALICE = ("node-a", during(1, 6))
POWER_CAP = ("node-b", during(8, 13))
IDLE = ("node-d", during(7, 14))
LINK_DOWN = ("node-c", "mlx5_0", 10.5, 2)
ECC = ("node-c", 0, 12.0, 3)
CONGESTION = ("node-a", "mlx5_1", during(15, 17), 0.2)
BOB = ("node-b", during(14, 17), 0.02)
XID = ("node-c", 1, 18.25, "79")
AGENT_DOWN = ("node-b", during(19, 19.5))
# --- the BMCs' episodes (node or rack, sensor, window, value)
PSU_FAILURE = ("node-b", "PSU2", during(4 + 2 / 24, 5 + 14 / 24))
WARM = ("rack-01", during(10.5, 10.5 + 3 / 24), 32.0)
FAN_FAILURE = ("node-c", "FAN3", during(11 + 8 / 24, 11 + 20 / 24))
BMC_DOWN = ("node-d", during(13.25, 13.5))
FAN_SLOW = ("node-d", "FAN1", during(14 + 10 / 24, 14 + 14 / 24), 900.0)
HOT_AISLE = ("rack-00", during(16.25, 16.25 + 8 / 24), 41.0)

BMC_JOB = "nvwatch-bmc"
# The BMC job scrapes half an interval after the agents (as a second scrape job does,
# at its own offset): no BMC sample sits on a report step's edge, where Prometheus 2
# counts it in both steps (3 in the one it ends), so a step holds exactly four.
BMC_OFFSET = INTERVAL / 2
# Operating inlet air maxima as NVIDIA publishes them: the DGX-1 white paper's 5-35 °C,
# the DGX A100 user guide's 5-30 °C.
ENVELOPE = {"dgx1-v100": 35.0, "dgx-a100": 30.0}
# What each node draws beyond its GPUs (CPUs, fans, memory, NICs), W: a base, plus this
# much more with every GPU busy.
REST = {"dgx1-v100": (300.0, 200.0), "dgx-a100": (500.0, 300.0)}
# How each node's BMC reports node power: DCMI, or a "Total Power" sensor; node-a and
# node-b also report each supply's input power (about half the node each), which the
# report must not take for the node's.
DCMI_NODES = ("node-a", "node-c")
SUPPLY_INPUT_NODES = ("node-a", "node-b")
FANS = 4
FAN_CRITICAL_RPM = 1200.0  # the fans' lower critical threshold
SUPPLIES = ("PSU1", "PSU2")
# GPUs that slow down for the BMC episodes' heat (node, GPU, window, die °C): one in the
# hot aisle's last 6 h, one in the last 6 h of its node's stopped fan, both above their
# board's slowdown threshold (V100 87 °C, A100 89 °C)
ROOM_SLOWDOWN = ("node-a", 0, HOT_AISLE[1] & during(16 + 8 / 24, 17), 89.0)
NODE_SLOWDOWN = ("node-c", 3, FAN_FAILURE[2] & during(11 + 14 / 24, 12), 90.0)


@dataclass
class Series:
    family: str
    kind: str  # gauge, counter, info
    labels: dict[str, str]
    values: Array  # NaN where there is no sample
    offset: float = 0.0  # seconds after TIMES its samples are taken


@dataclass
class History:
    series: list[Series] = field(default_factory=list)
    # truths the tests read: per node and GPU, the generated per-sample arrays
    util: dict[tuple[str, int], Array] = field(default_factory=dict)
    power: dict[tuple[str, int], Array] = field(default_factory=dict)
    up: dict[tuple[str, int], Array] = field(default_factory=dict)
    # what each GPU drew, whether its agent reported it or not (a lost GPU draws nothing)
    drawn: dict[tuple[str, int], Array] = field(default_factory=dict)
    # per node, as its BMC reported them (at TIMES + BMC_OFFSET): node power (the
    # reading the report must use) and its warmest inlet sensor
    node_power: dict[str, Array] = field(default_factory=dict)
    inlet: dict[str, Array] = field(default_factory=dict)

    def add(
        self,
        family: str,
        kind: str,
        labels: dict[str, str],
        values: Array,
        offset: float = 0.0,
    ) -> None:
        self.series.append(Series(family, kind, labels, values, offset))


def _utilization(node: Node, gpu: int) -> Array:
    daily = 0.55 + 0.35 * np.sin(2 * math.pi * (TIMES - START) / DAY + node.phase + gpu / 4)
    util = np.round(np.clip(daily, 0.0, 1.0), 2)
    if node.name == IDLE[0]:
        util[IDLE[1]] = 0.0
    if node.name == POWER_CAP[0]:
        util[POWER_CAP[1]] = 0.98
    if node.name == BOB[0]:
        util[BOB[1]] = BOB[2]
    return util


def node_utilization(node: Node) -> Array:
    """The mean utilization of the node's GPUs, whether its agent reported them or not."""
    util: Array = np.mean([_utilization(node, g) for g in range(GPUS)], axis=0)
    return util


def _counter(rate_per_second: Array) -> Array:
    """A counter growing at `rate_per_second` between samples (the value at each sample)."""
    increments = np.concatenate([[0.0], rate_per_second[1:] * INTERVAL])
    return np.cumsum(increments)


def _absent(node: Node, gpu: int | None = None) -> npt.NDArray[np.bool_]:
    """Samples missing: the agent down, or (for one GPU's detail series) the GPU lost."""
    gone = np.zeros(TIMES.size, dtype=bool)
    if node.name == AGENT_DOWN[0]:
        gone |= AGENT_DOWN[1]
    if gpu is not None and (node.name, gpu) == LOST[:2]:
        gone |= LOST[2]
    return gone


def _masked(values: Array, gone: npt.NDArray[np.bool_]) -> Array:
    out = values.astype(float)
    out[gone] = np.nan
    return out


def build() -> History:
    history = History()
    for node in NODES:
        _gpus(history, node)
        _ports(history, node)
        _allocations(history, node)
        _bmc(history, node)
    return history


def _gpus(history: History, node: Node) -> None:
    for gpu in range(GPUS):
        labels = {**node.labels(), "gpu": str(gpu), "uuid": f"GPU-{node.name}-{gpu}"}
        node_gone, gone = _absent(node), _absent(node, gpu)
        up = np.ones(TIMES.size)
        if (node.name, gpu) == LOST[:2]:
            up[LOST[2]] = 0.0
        util = _utilization(node, gpu)
        power = 60.0 + util * (node.tdp - 60.0)
        capped = np.zeros(TIMES.size)
        if node.name == POWER_CAP[0]:
            power[POWER_CAP[1]] = node.tdp
            capped[POWER_CAP[1]] = 1.0
        temp = 35.0 + 40.0 * util
        slowed = np.zeros(TIMES.size)
        if (node.name, gpu) == THERMAL[:2]:
            temp[THERMAL[2]] = 91.0
            slowed[THERMAL[2]] = 1.0
        for hot_node, hot_gpu, window, celsius in (ROOM_SLOWDOWN, NODE_SLOWDOWN):
            if (node.name, gpu) == (hot_node, hot_gpu):
                temp[window] = celsius
                slowed[window] = 1.0
        history.drawn[(node.name, gpu)] = np.where(up == 1.0, power, 0.0)
        history.up[(node.name, gpu)] = _masked(up, node_gone)
        history.util[(node.name, gpu)] = _masked(util, gone)
        history.power[(node.name, gpu)] = _masked(power, gone)
        history.add("nvwatch_gpu_up", "gauge", labels, _masked(up, node_gone))
        history.add("nvwatch_gpu_utilization_ratio", "gauge", labels, _masked(util, gone))
        history.add("nvwatch_gpu_power_watts", "gauge", labels, _masked(power, gone))
        history.add(
            "nvwatch_gpu_power_tdp_watts",
            "gauge",
            labels,
            _masked(np.full(TIMES.size, node.tdp), gone),
        )
        history.add(
            "nvwatch_gpu_temperature_celsius",
            "gauge",
            {**labels, "sensor": "gpu"},
            _masked(temp, gone),
        )
        for reason, active in (("sw_power_cap", capped), ("sw_thermal_slowdown", slowed)):
            history.add(
                "nvwatch_gpu_clock_event_active",
                "gauge",
                {**labels, "reason": reason},
                _masked(active, gone),
            )
        history.add(
            "nvwatch_gpu_temperature_threshold_celsius",
            "gauge",
            {**labels, "threshold": "slowdown"},
            _masked(np.full(TIMES.size, node.slowdown), gone),
        )
        if node.hbm:
            history.add(
                "nvwatch_gpu_temperature_celsius",
                "gauge",
                {**labels, "sensor": "memory"},
                _masked(temp + 2, gone),
            )
            history.add(
                "nvwatch_gpu_temperature_threshold_celsius",
                "gauge",
                {**labels, "threshold": "memory_max"},
                _masked(np.full(TIMES.size, 95.0), gone),
            )
            history.add("nvwatch_gpu_sm_active_ratio", "gauge", labels, _masked(util * 0.8, gone))
        link = {**labels, "link": "0"}
        history.add(
            "nvwatch_nvlink_transmit_bytes",
            "counter",
            link,
            _masked(_counter(util * 0.4 * NVLINK_SPEED), gone),
        )
        history.add(
            "nvwatch_nvlink_speed_bytes_per_second",
            "gauge",
            link,
            _masked(np.full(TIMES.size, NVLINK_SPEED), gone),
        )
        if (node.name, gpu) == ECC[:2]:
            ecc = np.where(START + ECC[2] * DAY <= TIMES, float(ECC[3]), 0.0)
            ecc_labels = {**labels, "type": "corrected", "scope": "aggregate"}
            history.add("nvwatch_gpu_ecc_errors", "counter", ecc_labels, _masked(ecc, gone))
        if (node.name, gpu) == XID[:2]:
            # an XID counter appears at its first event, already at 1
            xid = np.where(START + XID[2] * DAY <= TIMES, 1.0, np.nan)
            history.add(
                "nvwatch_gpu_xid_errors", "counter", {**labels, "xid": XID[3]}, _masked(xid, gone)
            )


def _ports(history: History, node: Node) -> None:
    node_util = np.mean([_utilization(node, g) for g in range(GPUS)], axis=0)
    gone = _absent(node)
    for device in PORTS:
        labels = {**node.labels(), "device": device, "port": "1"}
        wait_share = np.full(TIMES.size, 0.0004)
        if (node.name, device) == CONGESTION[:2]:
            wait_share[CONGESTION[2]] = CONGESTION[3]
        history.add(
            "nvwatch_ib_port_transmit_bytes",
            "counter",
            labels,
            _masked(_counter(node_util * 0.3 * IB_RATE), gone),
        )
        history.add(
            "nvwatch_ib_port_receive_bytes",
            "counter",
            labels,
            _masked(_counter(node_util * 0.25 * IB_RATE), gone),
        )
        history.add(
            "nvwatch_ib_port_transmit_wait",
            "counter",
            labels,
            _masked(_counter(wait_share / WAIT_TICK), gone),
        )
        history.add(
            "nvwatch_ib_port_rate_bytes_per_second",
            "gauge",
            labels,
            _masked(np.full(TIMES.size, IB_RATE), gone),
        )
        downs = np.zeros(TIMES.size)
        if (node.name, device) == LINK_DOWN[:2]:
            downs = np.where(START + LINK_DOWN[2] * DAY <= TIMES, float(LINK_DOWN[3]), 0.0)
        history.add(
            "nvwatch_ib_port_errors",
            "counter",
            {**labels, "type": "link_downed"},
            _masked(downs, gone),
        )


def _allocations(history: History, node: Node) -> None:
    jobs = []
    if node.name == ALICE[0]:
        jobs.append(("101", "alice", "physics", ALICE[1]))
    if node.name == BOB[0]:
        jobs.append(("202", "bob", "chemistry", BOB[1]))
    for job_id, user, account, held in jobs:
        for gpu in range(GPUS):
            labels = {
                **node.labels(),
                "gpu": str(gpu),
                "uuid": f"GPU-{node.name}-{gpu}",
                "scheduler": "slurm",
                "job_id": job_id,
                "user": user,
                "account": account,
                "pod": "",
                "namespace": "",
                "container": "",
            }
            values = np.where(held, 1.0, np.nan)
            history.add(
                "nvwatch_gpu_allocation_info", "gauge", labels, _masked(values, _absent(node, gpu))
            )


def _bmc(history: History, node: Node) -> None:
    """The node's BMC: its power, air, fans and supplies, absent while it is unreachable."""
    labels = {**node.labels(), "job": BMC_JOB, "bmc": f"{node.name}-bmc"}
    down = BMC_DOWN[1] if node.name == BMC_DOWN[0] else np.zeros(TIMES.size, dtype=bool)
    history.add("nvwatch_bmc_up", "gauge", labels, np.where(down, 0.0, 1.0), BMC_OFFSET)
    util = node_utilization(node)

    def gauge(family: str, extra: dict[str, str], values: Array) -> None:
        history.add(family, "gauge", {**labels, **extra}, _masked(values, down), BMC_OFFSET)

    base, busy = REST[node.node_class]
    gpus = np.sum([history.drawn[(node.name, g)] for g in range(GPUS)], axis=0)
    watts = np.round(gpus + base + busy * util)
    history.node_power[node.name] = _masked(watts, down)
    if node.name in DCMI_NODES:
        gauge("nvwatch_bmc_power_watts", {"method": "dcmi", "sensor": "dcmi"}, watts)
    else:
        gauge("nvwatch_bmc_power_watts", {"method": "sensor", "sensor": "Total Power"}, watts)
    failed = {psu: np.zeros(TIMES.size) for psu in SUPPLIES}
    if node.name == PSU_FAILURE[0]:
        failed[PSU_FAILURE[1]][PSU_FAILURE[2]] = 1.0
    if node.name in SUPPLY_INPUT_NODES:
        # the working supplies share the load; a failed one delivers nothing
        working = sum(1.0 - f for f in failed.values())
        for psu in SUPPLIES:
            share = (1.0 - failed[psu]) / working
            sensor = {"method": "sensor", "sensor": f"{psu} Input Power"}
            gauge("nvwatch_bmc_power_watts", sensor, np.round(watts * share))
    for psu in SUPPLIES:
        sensor = {"sensor": f"{psu} Status"}
        gauge("nvwatch_bmc_power_supply_present", sensor, np.ones(TIMES.size))
        gauge("nvwatch_bmc_power_supply_failed", sensor, failed[psu])
        state = {**sensor, "type": "Power Supply"}
        gauge("nvwatch_bmc_sensor_state", state, 2.0 * failed[psu])
    _air(history, node, util, gauge)
    _fans(node, util, gauge)


def _inlet(node: Node) -> Array:
    """The room's air at the node: a daily swing, warmer up the rack, and the episodes."""
    index = [n.name for n in NODES].index(node.name)
    inlet = np.round(22.0 + 1.5 * np.sin(2 * math.pi * (TIMES - START) / DAY) + 0.5 * index, 1)
    for rack, window, celsius in (WARM, HOT_AISLE):
        if node.rack == rack:
            inlet[window] = celsius
    return inlet


def _air(history: History, node: Node, util: Array, gauge: Callable[..., None]) -> None:
    inlet = _inlet(node)
    sensors = [("Inlet Temp", "inlet", inlet)]
    if node.name == "node-d":  # a second inlet sensor, cooler: the report takes the warmest
        sensors.append(("Front Inlet", "inlet", inlet - 1.5))
    sensors += [
        ("Exhaust Temp", "exhaust", np.round(inlet + 8.0 + 10.0 * util, 1)),
        ("CPU1 Temp", "cpu", np.round(45.0 + 20.0 * util, 1)),
    ]
    for name, entity, celsius in sensors:
        gauge("nvwatch_bmc_temperature_celsius", {"sensor": name, "entity": entity}, celsius)
    over = inlet - ENVELOPE[node.node_class]
    state = np.where(over > 5.0, 2.0, np.where(over > 0.0, 1.0, 0.0))
    gauge("nvwatch_bmc_sensor_state", {"sensor": "Inlet Temp", "type": "Temperature"}, state)
    down = BMC_DOWN[1] if node.name == BMC_DOWN[0] else np.zeros(TIMES.size, dtype=bool)
    history.inlet[node.name] = _masked(inlet, down)


def _fans(node: Node, util: Array, gauge: Callable[..., None]) -> None:
    for fan in range(1, FANS + 1):
        name = f"FAN{fan}"
        rpm = np.round(6000.0 + 3000.0 * util + 100.0 * fan, -1)
        if (node.name, name) == FAN_FAILURE[:2]:
            rpm[FAN_FAILURE[2]] = 0.0
        if (node.name, name) == FAN_SLOW[:2]:
            rpm[FAN_SLOW[2]] = FAN_SLOW[3]
        gauge("nvwatch_bmc_fan_speed_rpm", {"sensor": name}, rpm)
        state = np.where(rpm < FAN_CRITICAL_RPM, 2.0, 0.0)
        gauge("nvwatch_bmc_sensor_state", {"sensor": name, "type": "Fan"}, state)


def openmetrics_lines(
    history: History, chunk: npt.NDArray[np.bool_], shift: float = 0.0
) -> Iterator[str]:
    """The samples at TIMES[chunk] (`shift` seconds later) as OpenMetrics text: families
    contiguous, in time order."""
    families: dict[str, list[Series]] = {}
    for series in history.series:
        families.setdefault(series.family, []).append(series)
    for family, members in families.items():
        yield f"# TYPE {family} {members[0].kind}\n"
        suffix = "_total" if members[0].kind == "counter" else ""
        for series in members:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(series.labels.items()) if v != "")
            prefix = f"{family}{suffix}{{{labels}}} "
            present = chunk & ~np.isnan(series.values)
            times = TIMES[present] + series.offset + shift
            for time, value in zip(times, series.values[present], strict=True):
                yield f"{prefix}{value:.17g} {time:.0f}\n"
    yield "# EOF\n"


def write_openmetrics(history: History, path: Path, shift: float = 0.0) -> None:
    """The whole history as one OpenMetrics file, `shift` seconds later."""
    with path.open("w", encoding="utf-8") as handle:
        handle.writelines(openmetrics_lines(history, np.ones(TIMES.size, dtype=bool), shift))
