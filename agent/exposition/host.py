"""HostSample -> nvwatch_host_* families."""

from __future__ import annotations

from agent.exposition.families import FamilySet
from agent.sources.host import HostSample

_NO_LABELS: dict[str, str] = {}


def render(sample: HostSample, out: FamilySet) -> None:
    out.add("nvwatch_host_cpu_utilization_ratio", _NO_LABELS, sample.cpu_utilization_ratio)
    out.add("nvwatch_host_cpu_iowait_ratio", _NO_LABELS, sample.cpu_iowait_ratio)
    out.add("nvwatch_host_memory_used_bytes", _NO_LABELS, sample.memory_used_bytes)
    out.add("nvwatch_host_memory_total_bytes", _NO_LABELS, sample.memory_total_bytes)
    out.add("nvwatch_host_load1", _NO_LABELS, sample.load1)
