"""How each family's series move with their GPU's load: the table of MOTIONS.

A gauge that follows load goes from its idle to its busy value, each a figure or a
share of a reference series of the same device (a GPU's power from a tenth to 85 % of
its TDP, its memory used to 80 % of its total), kept at the resolution the hardware
reports. A counter that follows load adds its rate each step (a link's bytes at up to
30 % of its line rate, a GPU's joules at its power). A node's own series (host, ports,
its BMC's power and fans) follow the mean of its GPUs. Every other series keeps its
rendered value: limits, totals, states, info series and the error counters of a
healthy fleet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from nvwatch.sim.bulk.templates import Template

Array = npt.NDArray[np.float64]
MIB = 1024.0 * 1024.0


@dataclass(frozen=True)
class Motion:
    """`gauge`: idle + (busy - idle) x load; `counter`: that as a rate, added up;
    `clock`: the sample's own time in seconds. With `reference`, idle and busy are
    shares of the summed values of that family's series on the same `match` labels."""

    kind: str
    idle: float = 0.0
    busy: float = 0.0
    resolution: float = 0.0
    reference: str = ""
    match: tuple[str, ...] = field(default=())


GPU = ("gpu",)
LINK = ("gpu", "link")
PORT = ("device", "port")
SENSOR = ("method", "sensor")  # a BMC sensor's own series: a share of its rendered reading
MOTIONS: dict[str, Motion] = {
    "nvwatch_gpu_utilization_ratio": Motion("gauge", 0.0, 1.0, 0.01),
    "nvwatch_gpu_memory_utilization_ratio": Motion("gauge", 0.0, 0.6, 0.01),
    "nvwatch_gpu_sm_active_ratio": Motion("gauge", 0.0, 0.85, 1e-4),
    "nvwatch_gpu_sm_occupancy_ratio": Motion("gauge", 0.0, 0.45, 1e-4),
    "nvwatch_gpu_tensor_active_ratio": Motion("gauge", 0.0, 0.55, 1e-4),
    "nvwatch_gpu_dram_active_ratio": Motion("gauge", 0.0, 0.5, 1e-4),
    "nvwatch_gpu_temperature_celsius": Motion("gauge", 31.0, 72.0, 1.0),
    "nvwatch_gpu_power_watts": Motion(
        "gauge", 0.1, 0.85, 0.001, "nvwatch_gpu_power_tdp_watts", GPU
    ),
    "nvwatch_gpu_energy_joules_total": Motion(
        "counter", 0.1, 0.85, 0.001, "nvwatch_gpu_power_tdp_watts", GPU
    ),
    "nvwatch_gpu_memory_used_bytes": Motion(
        "gauge", 0.005, 0.8, MIB, "nvwatch_gpu_memory_total_bytes", GPU
    ),
    "nvwatch_gpu_memory_free_bytes": Motion(
        "gauge", 0.995, 0.2, MIB, "nvwatch_gpu_memory_total_bytes", GPU
    ),
    "nvwatch_gpu_clock_hertz": Motion(
        "gauge", 0.2, 1.0, 1e6, "nvwatch_gpu_clock_max_hertz", ("gpu", "clock")
    ),
    "nvwatch_gpu_pcie_throughput_bytes_per_second": Motion("gauge", 0.0, 4e9, 1024.0),
    "nvwatch_nvlink_transmit_bytes_total": Motion(
        "counter", 0.0, 0.3, 1.0, "nvwatch_nvlink_speed_bytes_per_second", LINK
    ),
    "nvwatch_nvlink_receive_bytes_total": Motion(
        "counter", 0.0, 0.3, 1.0, "nvwatch_nvlink_speed_bytes_per_second", LINK
    ),
    "nvwatch_ib_port_transmit_bytes_total": Motion(
        "counter", 1e-4, 0.4, 1.0, "nvwatch_ib_port_rate_bytes_per_second", PORT
    ),
    "nvwatch_ib_port_receive_bytes_total": Motion(
        "counter", 1e-4, 0.4, 1.0, "nvwatch_ib_port_rate_bytes_per_second", PORT
    ),
    # packets of the MTU's 4 KiB
    "nvwatch_ib_port_transmit_packets_total": Motion(
        "counter", 1e-4 / 4096, 0.4 / 4096, 1.0, "nvwatch_ib_port_rate_bytes_per_second", PORT
    ),
    "nvwatch_ib_port_receive_packets_total": Motion(
        "counter", 1e-4 / 4096, 0.4 / 4096, 1.0, "nvwatch_ib_port_rate_bytes_per_second", PORT
    ),
    "nvwatch_ib_port_transmit_wait_total": Motion("counter", 0.0, 2e4, 1.0),
    "nvwatch_host_cpu_utilization_ratio": Motion("gauge", 0.02, 0.35, 1e-4),
    "nvwatch_host_load1": Motion("gauge", 0.3, 24.0, 0.01),
    "nvwatch_agent_last_poll_timestamp_seconds": Motion("clock", resolution=0.001),
    # the simulated BMC renders a node at work: a DGX idles at about a third of that
    "nvwatch_bmc_power_watts": Motion("gauge", 0.35, 1.0, 1.0, "nvwatch_bmc_power_watts", SENSOR),
    "nvwatch_bmc_fan_speed_rpm": Motion(
        "gauge", 0.6, 1.0, 100.0, "nvwatch_bmc_fan_speed_rpm", SENSOR
    ),
}


@dataclass(frozen=True)
class Moving:
    """The series of a template that one motion moves, with their reference values."""

    rows: npt.NDArray[np.int64]
    motion: Motion
    scale: Array  # the summed reference per row, 1 without one


def moving_series(template: Template) -> list[Moving]:
    """Which of `template`'s series move, grouped by motion."""
    rows: dict[str, list[int]] = {}
    for row, name in enumerate(template.names):
        if name in MOTIONS:
            rows.setdefault(name, []).append(row)
    return [
        Moving(np.array(found), MOTIONS[name], _scales(template, found, MOTIONS[name]))
        for name, found in rows.items()
    ]


def _scales(template: Template, rows: list[int], motion: Motion) -> Array:
    if not motion.reference:
        return np.ones(len(rows))
    references = [r for r, name in enumerate(template.names) if name == motion.reference]
    scales = []
    for row in rows:
        own = dict(template.labels[row])
        keys = [k for k in motion.match if k in own]
        total = sum(
            template.first[r]
            for r in references
            if all(dict(template.labels[r]).get(k) == own[k] for k in keys)
        )
        scales.append(total)
    return np.array(scales, dtype=np.float64)


def node_values(
    template: Template, moving: list[Moving], load: Array, times_s: Array, step_s: float
) -> Array:
    """Every series of one node (template rows x samples), under `load` (GPUs x samples)."""
    values = np.repeat(template.first[:, None], len(times_s), axis=1)
    by_row = np.vstack([load, load.mean(axis=0, keepdims=True)])  # row -1: the node's mean
    for group in moving:
        values[group.rows] = _moved(group, template.first[group.rows],
                                    by_row[template.gpu[group.rows]], times_s, step_s)  # fmt: skip
    return values


def _moved(group: Moving, first: Array, load: Array, times_s: Array, step_s: float) -> Array:
    motion = group.motion
    if motion.kind == "clock":
        return _resolved(np.broadcast_to(times_s, load.shape), motion.resolution)
    scale = group.scale[:, None]
    level = scale * (motion.idle + (motion.busy - motion.idle) * load)
    if motion.kind == "gauge":
        return _resolved(level, motion.resolution)
    # a counter: its rendered value, then each step's increase (the first sample's own)
    added = np.cumsum(level * step_s, axis=1) - level[:, :1] * step_s
    return _resolved(first[:, None] + added, motion.resolution)


def _resolved(values: Array, resolution: float) -> Array:
    """`values` in whole steps of `resolution`; a fraction of a unit divides a whole
    count, as the agent makes watts of NVML's milliwatts (an exact double)."""
    if resolution >= 1:
        return np.round(values / resolution) * resolution
    per_unit = round(1 / resolution)
    return np.round(values * per_unit) / per_unit
