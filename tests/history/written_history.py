"""A history written to OpenMetrics and read back: its plan, its truth and every sample of
the families the job tests read, by series."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvwatch.sim.history.history import generate
from nvwatch.sim.history.plan import HistoryPlan

_LINE = re.compile(r"^(\w+)\{(.*)\} (\S+) (\d+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
FAMILIES = (
    "nvwatch_gpu_allocation_info",
    "nvwatch_gpu_utilization_ratio",
    "nvwatch_gpu_memory_used_bytes",
    "nvwatch_gpu_memory_total_bytes",
    "nvwatch_gpu_power_watts",
    "nvwatch_gpu_power_limit_watts",
    "nvwatch_gpu_energy_joules_total",
    "nvwatch_gpu_clock_event_active",
    "nvwatch_ib_port_transmit_bytes_total",
    "nvwatch_ib_port_receive_bytes_total",
    "nvwatch_bmc_power_watts",
)

Key = tuple[tuple[str, str], ...]


@dataclass
class Written:
    plan: HistoryPlan
    truth: dict[str, Any]
    # family -> series labels -> {time: value}
    series: dict[str, dict[Key, dict[float, float]]]

    def job(self, kind: str) -> dict[str, Any]:
        (job,) = [j for j in self.truth["jobs"] if j["kind"] == kind]
        return job

    def of(self, family: str, **wanted: str) -> dict[Key, dict[float, float]]:
        return {
            key: points
            for key, points in self.series[family].items()
            if all(dict(key).get(k) == v for k, v in wanted.items())
        }

    def during(self, job: dict[str, Any], family: str, **wanted: str) -> list[float]:
        """Every value of the family's matching series in the job's life, (start, end]."""
        return [
            v
            for points in self.of(family, **wanted).values()
            for t, v in points.items()
            if job["start"] < t <= job["end"]
        ]


def write_and_read(plan: HistoryPlan, out: Path) -> Written:
    """Generate `plan` into `out` and read back what the job tests need."""
    result = generate(plan, out)
    series: dict[str, dict[Key, dict[float, float]]] = {f: defaultdict(dict) for f in FAMILIES}
    with out.open(encoding="utf-8") as lines:
        for line in lines:
            if not line.startswith(FAMILIES):
                continue
            match = _LINE.match(line.rstrip("\n"))
            assert match, line
            family, labels, value, at = match.groups()
            key = tuple(sorted(_LABEL.findall(labels)))
            series[family][key][float(at)] = float(value)
    truth = json.loads(result.truth_path.read_text(encoding="utf-8"))
    return Written(plan, truth, series)
