"""Compare nvwatch's exposition with `nvidia-smi --query-gpu` on a real GPU node.

    python -m nvwatch.agent.nvsmi_compare            # runs both, prints a table, exit 1 on mismatch

Each row pairs one catalogue series with the nvidia-smi field it must agree with, the
unit conversion between them, and a tolerance: instantaneous readings (power, clocks,
utilization) are sampled at slightly different moments, so they get a sampling margin;
static values (memory total, limits, link width) must match exactly. The pairs are the
`NvidiaSmi` entries of agent/catalogue.py: one table for the metric and its check.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.catalogue import CATALOGUE


@dataclass(frozen=True)
class Pairing:
    query: str  # nvidia-smi --query-gpu field
    metric: str  # nvwatch sample name
    labels: Mapping[str, str]  # extra labels selecting the series
    scale: float  # nvidia-smi value x scale = nvwatch value
    tolerance: float  # allowed |difference| in nvwatch units
    relative: float = 0.0  # or this fraction of the value, whichever is larger


def pairings() -> tuple[Pairing, ...]:
    """Every catalogue series that names an nvidia-smi field, in catalogue order."""
    found: list[Pairing] = []
    for metric in CATALOGUE:
        for series in metric.series:
            smi = series.nvidia_smi
            if smi is None:
                continue
            # the series' own literal labels select it (sensor="gpu", clock="sm", ...)
            own = dict(zip(metric.own_labels, series.labels, strict=True))
            labels = {k: v for k, v in own.items() if isinstance(v, str)}
            found.append(
                Pairing(smi.query, metric.name, labels, smi.scale, smi.tolerance, smi.relative)
            )
    return tuple(found)


PAIRINGS = pairings()


@dataclass(frozen=True)
class Row:
    gpu: str
    query: str
    nvidia_smi: str
    nvwatch: float | None
    ok: bool
    note: str


def nvidia_smi_command() -> list[str]:
    fields = ",".join(["index", *(p.query for p in PAIRINGS)])
    return ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]


def compare(exposition: str, nvidia_smi_csv: str) -> list[Row]:
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k != "uuid"}
            samples[(sample.name, frozenset(labels.items()))] = sample.value
    rows: list[Row] = []
    for record in csv.reader(io.StringIO(nvidia_smi_csv)):
        if not record:
            continue
        gpu, *values = (v.strip() for v in record)
        for pairing, text in zip(PAIRINGS, values, strict=True):
            key = (pairing.metric, frozenset({"gpu": gpu, **pairing.labels}.items()))
            ours = samples.get(key)
            rows.append(_judge(gpu, pairing, text, ours))
    return rows


def _judge(gpu: str, pairing: Pairing, text: str, ours: float | None) -> Row:
    unsupported = text in ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "")
    if unsupported:
        # nvidia-smi cannot read it either: nvwatch must leave the series absent, not 0
        ok = ours is None
        return Row(gpu, pairing.query, text, ours, ok, "" if ok else "exported but unsupported")
    if ours is None:
        return Row(gpu, pairing.query, text, None, False, "missing from nvwatch")
    try:
        expected = float(text) * pairing.scale
    except ValueError:
        return Row(gpu, pairing.query, text, ours, False, "nvidia-smi value not numeric")
    allowed = max(pairing.tolerance, abs(expected) * pairing.relative)
    ok = abs(ours - expected) <= allowed
    return Row(gpu, pairing.query, text, ours, ok, "" if ok else f"differs by >{allowed:g}")


def format_rows(rows: list[Row]) -> str:
    lines = [
        "| gpu | nvidia-smi field | nvidia-smi | nvwatch | ok | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        value = "absent" if r.nvwatch is None else f"{r.nvwatch:g}"
        mark = "yes" if r.ok else "NO"
        lines.append(f"| {r.gpu} | {r.query} | {r.nvidia_smi} | {value} | {mark} | {r.note} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi not found: run this on a node with the NVIDIA driver", file=sys.stderr)
        return 2
    dump = subprocess.run(
        [sys.executable, "-m", "nvwatch.agent.cli", "dump", "--sources", "nvml"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    smi = subprocess.run(nvidia_smi_command(), capture_output=True, text=True, check=True)
    rows = compare(dump.stdout, smi.stdout)
    print(format_rows(rows), end="")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
