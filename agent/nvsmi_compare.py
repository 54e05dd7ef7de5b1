"""Compare nvwatch's exposition with `nvidia-smi --query-gpu` on a real GPU node.

    python -m agent.nvsmi_compare            # runs both, prints a table, exit 1 on mismatch

Each row pairs one catalogue series with the nvidia-smi field it must agree with, the
unit conversion between them, and a tolerance: instantaneous readings (power, clocks,
utilization) are sampled at slightly different moments, so they get a sampling margin;
static values (memory total, limits, link width) must match exactly.
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

MIB = 1024 * 1024


@dataclass(frozen=True)
class Pairing:
    query: str  # nvidia-smi --query-gpu field
    metric: str  # nvwatch sample name
    labels: Mapping[str, str]  # extra labels selecting the series
    scale: float  # nvidia-smi value x scale = nvwatch value
    tolerance: float  # allowed |difference| in nvwatch units
    relative: float = 0.0  # or this fraction of the value, whichever is larger


PAIRINGS = (
    Pairing("memory.total", "nvwatch_gpu_memory_total_bytes", {}, MIB, MIB),
    Pairing("memory.used", "nvwatch_gpu_memory_used_bytes", {}, MIB, 64 * MIB, 0.02),
    Pairing("power.draw", "nvwatch_gpu_power_watts", {}, 1.0, 15.0, 0.1),
    Pairing("enforced.power.limit", "nvwatch_gpu_power_limit_watts", {}, 1.0, 0.5),
    Pairing("power.default_limit", "nvwatch_gpu_power_tdp_watts", {}, 1.0, 0.5),
    Pairing("temperature.gpu", "nvwatch_gpu_temperature_celsius", {"sensor": "gpu"}, 1.0, 2.0),
    Pairing(
        "temperature.memory", "nvwatch_gpu_temperature_celsius", {"sensor": "memory"}, 1.0, 2.0
    ),
    Pairing("clocks.sm", "nvwatch_gpu_clock_hertz", {"clock": "sm"}, 1e6, 60e6, 0.05),
    Pairing("clocks.mem", "nvwatch_gpu_clock_hertz", {"clock": "memory"}, 1e6, 1e6),
    Pairing("clocks.max.sm", "nvwatch_gpu_clock_max_hertz", {"clock": "sm"}, 1e6, 1e6),
    Pairing("utilization.gpu", "nvwatch_gpu_utilization_ratio", {}, 0.01, 0.15),
    Pairing("pcie.link.gen.max", "nvwatch_gpu_pcie_link_generation", {"kind": "max"}, 1, 0),
    Pairing("pcie.link.width.max", "nvwatch_gpu_pcie_link_width", {"kind": "max"}, 1, 0),
    Pairing(
        "ecc.errors.uncorrected.volatile.total",
        "nvwatch_gpu_ecc_errors_total",
        {"type": "uncorrected", "scope": "volatile"},
        1,
        0,
    ),
)


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
        [sys.executable, "-m", "agent.cli", "dump", "--sources", "nvml"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    smi = subprocess.run(nvidia_smi_command(), capture_output=True, text=True, check=True)
    rows = compare(dump.stdout, smi.stdout)
    print(format_rows(rows), end="")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
