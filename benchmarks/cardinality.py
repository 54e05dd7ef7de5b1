"""Cardinality, stated and chosen: docs/scale.md's section on series per node and per GPU at
each --nvlink-detail and --ib-hw-counters setting, the labels whose values grow with the
fleet, and the default setting per fleet size.

    python -m benchmarks.cardinality [--out docs/scale.md]

Every figure is measured: each profile of the fleet mix is rendered at each setting
(sim/series_budget.py: the agent's own exposition, ceilings with the bounded families at
their bounds); two nodes of one profile rendered with different seeds show which labels
take values of their own on every node; a month of the job mix (sim/history/job_mix.py)
gives how many allocation series jobs create a day. The fleet-size table multiplies the
per-node ceilings by the node count, and takes Prometheus' memory per active series from
docs/scale.md's measured table (the 124-node run) when it is there.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import REPO_ROOT, replace_section
from nvwatch.agent.catalogue import CATALOGUE
from nvwatch.sim.series_budget import measure, parse_series, render_profile

BEGIN, END = "<!-- cardinality:begin -->", "<!-- cardinality:end -->"
PROFILES = ("dgx-h100", "dgx-a100", "dgx1-v100")
SETTINGS = (("link", "default"), ("gpu", "default"), ("link", "all"), ("gpu", "all"))
FLEETS = (124, 1_000, 10_000)
# one Prometheus server's memory the defaults keep to (the derived table's assumption)
SERVER_RSS_GIB = 64.0
# what marks attribution's families: a new value per job (or pod), per process
JOB_LABELS = ("job_id",)
PROCESS_LABELS = ("pid",)
RSS_ROW = re.compile(r"\| Prometheus RSS per 100k active series \| ([\d,.]+) MB \|")


@dataclass(frozen=True)
class SettingRow:
    profile: str
    nvlink_detail: str
    ib_hw_counters: str
    gpus: int
    ceiling: int
    nvlink: int
    infiniband: int


@dataclass(frozen=True)
class LabelGrowth:
    label: str
    families: int
    values_per_node: int
    own_per_node: int  # values the second node does not share


@dataclass(frozen=True)
class Cardinality:
    rows: list[SettingRow]
    labels: list[LabelGrowth]
    allocation_series_per_day: float  # 124 nodes, the job mix
    jobs_per_day: float
    rss_mb_per_100k: float | None
    seconds: float
    # per --nvlink-detail: the costliest rule group's share of its interval on one
    # Prometheus, per node, as the 1,000-node runs measured it
    rule_share_per_node: dict[str, float] = field(default_factory=dict)


def measure_settings(root: Path) -> list[SettingRow]:
    rows = []
    for profile in PROFILES:
        for detail, counters in SETTINGS:
            budget = measure(profile, root / profile, nvlink_detail=detail, ib_hw_counters=counters)
            rows.append(
                SettingRow(
                    profile,
                    detail,
                    counters,
                    budget.gpus,
                    budget.ceiling,
                    budget.share("nvwatch_nvlink_"),
                    budget.share("nvwatch_ib_"),
                )
            )
    return rows


def label_growth(root: Path, profile: str = PROFILES[0]) -> list[LabelGrowth]:
    """Each label of two nodes of `profile` with different seeds: how many values one node
    exports and how many of them are its own (serials, UUIDs, GUIDs: new with every node)."""
    values: list[dict[str, set[str]]] = []
    families: dict[str, set[str]] = defaultdict(set)
    for seed in (7, 8):
        text = render_profile(profile, root / f"seed{seed}", seed=seed)
        seen: dict[str, set[str]] = defaultdict(set)
        for series in parse_series(text):
            for label, value in series.labels.items():
                seen[label].add(value)
                families[label].add(series.name)
        values.append(seen)
    first, second = values
    return sorted(
        (
            LabelGrowth(label, len(families[label]), len(vals), len(vals - second[label]))
            for label, vals in first.items()
        ),
        key=lambda g: (-g.own_per_node, -g.values_per_node, g.label),
    )


def job_churn(nodes: int = FLEETS[0]) -> tuple[float, float]:
    """(allocation series created a day, jobs a day) over a month of the job mix."""
    from benchmarks.job_cost import month_of_jobs

    jobs = month_of_jobs(nodes, end=1_800_000_000.0)
    created = sum(len(job.nodes) * len(job.gpus) for job in jobs)
    return created / 30.0, len(jobs) / 30.0


def rss_per_100k(scale_md: Path) -> float | None:
    """Prometheus' measured RSS per 100k active series in docs/scale.md, if it is there."""
    if not scale_md.exists():
        return None
    found = RSS_ROW.search(scale_md.read_text(encoding="utf-8"))
    return float(found.group(1).replace(",", "")) if found else None


THOUSAND_FIGURES = "scale-thousand*.json"  # the 1,000-node runs' figures beside docs/scale.md


def rule_share_per_node(docs: Path) -> dict[str, float]:
    """The costliest rule group's share of its interval on Prometheus, per node, from
    each 1,000-node run in `docs` by its --nvlink-detail (groups' cost grows with the
    series they read, and those with the nodes)."""
    found: dict[str, float] = {}
    for path in sorted(docs.glob(THOUSAND_FIGURES)):
        figures = json.loads(path.read_text(encoding="utf-8"))
        rules = figures.get("engines", {}).get("prometheus", {}).get("rules", [])
        if rules:
            worst = max(r["seconds"] / r["interval_s"] for r in rules)
            found[figures["nvlink_detail"]] = worst / figures["nodes"]
    return found


def collect(scale_md: Path) -> Cardinality:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nvwatch-cardinality-") as scratch:
        root = Path(scratch)
        rows = measure_settings(root)
        labels = label_growth(root)
    per_day, jobs = job_churn()
    return Cardinality(
        rows,
        labels,
        per_day,
        jobs,
        rss_per_100k(scale_md),
        time.monotonic() - started,
        rule_share_per_node(scale_md.parent),
    )


def families_with(labels: tuple[str, ...]) -> list[str]:
    """The catalogue's families that carry any of `labels`."""
    return sorted(spec.name for spec in CATALOGUE if set(spec.own_labels) & set(labels))


def attribution_labels() -> set[str]:
    """Every label of the families that carry a job id or a pid: who holds a GPU, whose
    values follow the jobs and processes over time, not the nodes."""
    marked = set(families_with(JOB_LABELS + PROCESS_LABELS))
    return {label for spec in CATALOGUE if spec.name in marked for label in spec.own_labels}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.cardinality_section import section

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "scale.md")
    args = parser.parse_args(argv)
    result = collect(args.out)
    text = section(result, "python -m benchmarks.cardinality")
    replace_section(args.out, text, BEGIN, END)
    print(f"cardinality: wrote its section of {args.out} ({result.seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
