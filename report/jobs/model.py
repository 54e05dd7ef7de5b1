"""A job's summary: what it held, how well it used it, what it cost in energy.

The same object is printed by `nvwatch job`, written as JSON, and kept past Prometheus'
retention in a store (codec.py, store.py). `to_dict` rounds floats to 4 significant
digits (a Slurm AdminComment holds it) and `from_dict` reads it back exactly: what the
command prints has been through that round, so a stored summary prints the same.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA = 1
J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class GpuUse:
    """One GPU over the job's life on it (None: the series is absent, e.g. no GPM)."""

    instance: str
    gpu: str
    model: str = ""
    utilization: float | None = None  # mean, 0..1
    sm_active: float | None = None
    tensor_active: float | None = None
    memory_peak_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_mean_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None  # the GPU's own energy counter over the life
    nvlink_bytes: float | None = None  # transmitted and received, every link
    clock_events: dict[str, float] = field(default_factory=dict)  # reason: share of life


@dataclass(frozen=True)
class PortUse:
    """One InfiniBand port of a node the job ran on, over the job's life."""

    instance: str
    device: str
    port: str
    transmit_bytes: float
    receive_bytes: float


@dataclass(frozen=True)
class NodeShare:
    """A node's energy from its BMC over the job's life, and the job's share of it."""

    instance: str
    gpus_held: int
    gpus_total: int
    # EXCLUSIVE: no other job held a GPU of the node during the life; else GPU_SHARE
    method: str
    node_energy_joules: float | None  # None: no BMC power for this node

    @property
    def share(self) -> float:
        return 1.0 if self.method == EXCLUSIVE else self.gpus_held / max(self.gpus_total, 1)

    @property
    def energy_joules(self) -> float | None:
        return None if self.node_energy_joules is None else self.node_energy_joules * self.share


EXCLUSIVE = "exclusive"
GPU_SHARE = "gpu-share"


@dataclass(frozen=True)
class Note:
    """Advice in plain words, the threshold that raised it, the GPU-hours it concerns."""

    code: str
    text: str
    threshold: str
    gpu_hours: float


@dataclass(frozen=True)
class JobSummary:
    job_id: str
    cluster: str
    user: str
    account: str
    start: float  # Unix seconds: the first and last time the job was seen holding GPUs
    end: float
    gpus: tuple[GpuUse, ...]
    ports: tuple[PortUse, ...] = ()
    nodes: tuple[NodeShare, ...] = ()
    notes: tuple[Note, ...] = ()
    grid_intensity_g_per_kwh: float = 0.0  # 0: not configured
    partition: str = ""
    # the job's totals, kept beside the rows: a store may drop the rows to fit
    gpu_count: int = 0
    utilization: float | None = None  # the mean of its GPUs' means
    gpu_energy_joules: float | None = None
    truncated: bool = False  # per-GPU and per-port rows dropped to fit a store
    runs: int = 1  # 2 or more: Slurm requeued the job, and this is its last run
    # from submission to the (last run's) start, from Slurm's accounting; None: not known
    # (Prometheus does not hold it, and only the Slurm store reads it)
    queue_wait_s: float | None = None

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end - self.start)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_count * self.duration_s / 3600.0

    @property
    def node_energy_joules(self) -> float | None:
        known = [n.energy_joules for n in self.nodes if n.energy_joules is not None]
        return sum(known) if known else None

    @property
    def energy_joules(self) -> float | None:
        """What the job cost: its share of its nodes' energy, else its GPUs' own."""
        node = self.node_energy_joules
        return node if node is not None else self.gpu_energy_joules

    @property
    def carbon_kg(self) -> float | None:
        energy = self.energy_joules
        if not self.grid_intensity_g_per_kwh or energy is None:
            return None
        return energy / J_PER_KWH * self.grid_intensity_g_per_kwh / 1000.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _compact(asdict(self))
        # instants to the millisecond: 4 digits of a Unix time would be 28 hours
        out["start"], out["end"] = round(self.start, 3), round(self.end, 3)
        out["schema"] = SCHEMA
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSummary:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"a job summary of schema {data.get('schema')!r}, not {SCHEMA}")
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["gpus"] = tuple(GpuUse(**g) for g in data.get("gpus", ()))
        values["ports"] = tuple(PortUse(**p) for p in data.get("ports", ()))
        values["nodes"] = tuple(NodeShare(**n) for n in data.get("nodes", ()))
        values["notes"] = tuple(Note(**n) for n in data.get("notes", ()))
        return cls(**values)


def totals(gpus: tuple[GpuUse, ...]) -> dict[str, Any]:
    """JobSummary's total fields from its GPU rows."""
    util = [g.utilization for g in gpus if g.utilization is not None]
    energy = [g.energy_joules for g in gpus if g.energy_joules is not None]
    return {
        "gpu_count": len(gpus),
        "utilization": sum(util) / len(util) if util else None,
        "gpu_energy_joules": sum(energy) if energy else None,
    }


def _compact(value: Any) -> Any:
    """Floats to 3 significant digits: what a summary needs, and a 64-GPU job's summary then
    fits an AdminComment whole."""
    if isinstance(value, float):
        return float(f"{value:.3g}")
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_compact(v) for v in value]
    return value
