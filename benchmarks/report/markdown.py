"""The whole report: a header describing the run, the targets table, then each section."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.report.attribution import attribution_section
from benchmarks.report.cost import (
    nvml_share_section,
    poll_section,
    poll_top_section,
    render_split_section,
    series_section,
)
from benchmarks.report.hot_path import own_share_section
from benchmarks.report.memory import rss_section
from benchmarks.report.misses import misses_section
from benchmarks.report.model import Machine, Results
from benchmarks.report.nvml_calls import nvml_calls_section
from benchmarks.report.peer import peer_section
from benchmarks.report.real_gpu import real_nvml_section
from benchmarks.report.serving import scrape_section, side_by_side_section
from benchmarks.report.sim_cost import sim_cost_section
from benchmarks.report.verdicts import verdicts
from benchmarks.startup import startup_section

# in document order; a section with nothing measured returns "" and is left out
_SECTIONS: tuple[Callable[[Results], str], ...] = (
    poll_section,
    nvml_share_section,
    own_share_section,
    poll_top_section,
    render_split_section,
    series_section,
    nvml_calls_section,
    sim_cost_section,
    peer_section,
    attribution_section,
    scrape_section,
    side_by_side_section,
    rss_section,
    real_nvml_section,
    lambda results: startup_section(results.startup),
    misses_section,
)


def render_markdown(results: Results, machine: Machine) -> str:
    parts = [_header(results, machine), _targets(results)]
    parts += [section(results) for section in _SECTIONS]
    return "\n".join(p for p in parts if p).rstrip() + "\n"


def _header(results: Results, machine: Machine) -> str:
    packages = ", ".join(f"{k} {v}" for k, v in machine.packages.items())
    tools = "; ".join(f"{k}: {v}" for k, v in machine.tools.items())
    return f"""# nvwatch performance

Written by `benchmarks/run.py`; every figure below comes from the run described here.
Re-run it to refresh this file; do not edit numbers by hand.

| | |
|---|---|
| date | {machine.date} |
| machine | {machine.cpu}, {machine.cores} cores, {machine.kernel} |
| Python | {machine.python} |
| packages | {packages} |
| tools | {tools} |
| command | `{machine.command}` |
| run time | {results.seconds:.0f} s |

All GPUs here are **simulated** (`sim`, the simulated libnvidia-ml under the real
pynvml bindings, and a simulated sysfs tree on tmpfs). No H100/H200 or any NVIDIA GPU
was available to this run, so there are no real-GPU figures in this file; see
"Real GPUs" at the end for how to take them.
"""


def _targets(results: Results) -> str:
    rows = [f"| {v.target} | {v.figure} | {v.mark} |" for v in verdicts(results)]
    return "\n".join(
        ["## Targets", "", "| target | measured | result |", "|---|---|---|", *rows, ""]
    )
