"""The cardinality benchmark's section of docs/scale.md, written from one run."""

from __future__ import annotations

import datetime
import textwrap

from benchmarks.cardinality import (
    BEGIN,
    END,
    FLEETS,
    JOB_LABELS,
    PROCESS_LABELS,
    SERVER_RSS_GIB,
    Cardinality,
    SettingRow,
    attribution_labels,
    families_with,
)

DEFAULT_ORDER = (("link", "default"), ("gpu", "default"))  # most detail first


def section(result: Cardinality, command: str) -> str:
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    how = (
        f"`{command}`, {date}, {result.seconds:.0f} s. Each profile of the fleet mix rendered "
        "by the agent's own code at each setting (sim/series_budget.py), with every bounded "
        "family at its bound (8 processes per GPU, every flagged InfiniBand counter pinned): "
        "a node's most, not its typical."
    )
    return "\n".join(
        [
            BEGIN,
            "## Cardinality: series per node at each setting (measured)",
            "",
            _wrap(how),
            "",
            "| profile | `--nvlink-detail` | `--ib-hw-counters` | series per node | per GPU "
            "| NVLink | InfiniBand |",
            "|---|---|---|---|---|---|---|",
            *(_setting_row(row) for row in result.rows),
            "",
            *_labels(result),
            "",
            *_defaults(result),
            END,
            "",
        ]
    )


def _setting_row(row: SettingRow) -> str:
    return (
        f"| `{row.profile}` | {row.nvlink_detail} | {row.ib_hw_counters} | {row.ceiling:,} "
        f"| {row.ceiling / row.gpus:,.0f} | {row.nvlink:,} | {row.infiniband:,} |"
    )


def _labels(result: Cardinality) -> list[str]:
    attribution = attribution_labels()
    hardware = [g for g in result.labels if g.label not in attribution]
    growing = [g for g in hardware if g.own_per_node > 0]
    bounded = sorted(g.label for g in hardware if g.own_per_node == 0)
    per_node = result.allocation_series_per_day / FLEETS[0]
    h100 = next(r for r in result.rows if r.profile == "dgx-h100")  # link, default
    churn = per_node / h100.ceiling
    [allocation] = families_with(JOB_LABELS)
    processes = families_with(PROCESS_LABELS)
    after = (
        f"Every other label of the hardware ({', '.join(f'`{b}`' for b in bounded)}) takes "
        "the same values on every node of a profile: indexes, bus ids, counter and sensor "
        "names, versions. The target labels add `instance` (one value per node), `rack` "
        "(one per rack), `cluster` and `node_class` (a few). The labels that grow with "
        f"time, not nodes, are attribution's ({', '.join(f'`{a}`' for a in sorted(attribution))}"
        f"): on `{allocation}`, one series per GPU a job holds, and on "
        f"{', '.join(f'`{p}`' for p in processes)}, one per process (at most 8 per GPU). "
        f"Over a month of the job mix (sim/history/job_mix.py) the {FLEETS[0]}-node cluster "
        f"starts {result.jobs_per_day:,.0f} jobs a day and creates "
        f"{result.allocation_series_per_day:,.0f} allocation series a day, "
        f"{per_node:.1f} per node: at {FLEETS[1]:,} nodes about "
        f"{per_node * FLEETS[1]:,.0f} a day, {churn:.1%} of its active series at the "
        "default setting: the series that jobs create are not where the cost lies. "
        "No job label is put on the GPU, link or port families (a job id on every series "
        "multiplies them all by the jobs; dcgm-exporter's users removed one for that): the "
        "dashboards join the allocation series at query time."
    )
    return [
        "Labels whose values are new on every node (two `dgx-h100` nodes with different "
        "seeds compared, attribution's labels aside):",
        "",
        "| label | families | values on one node | of them its own |",
        "|---|---|---|---|",
        *(
            f"| `{g.label}` | {g.families} | {g.values_per_node:,} | {g.own_per_node:,} |"
            for g in growing
        ),
        "",
        _wrap(after),
    ]


RULE_BUDGET = 0.10  # of a rule group's interval


def _defaults(result: Cardinality) -> list[str]:
    h100 = {(r.nvlink_detail, r.ib_hw_counters): r for r in result.rows if r.profile == "dgx-h100"}
    rss, shares = result.rss_mb_per_100k, result.rule_share_per_node
    lines = [
        "### Default per fleet size (DGX H100 nodes)",
        "",
        "| nodes | setting | active series | Prometheus RSS | costliest rule group | default |",
        "|---|---|---|---|---|---|",
    ]
    for nodes in FLEETS:
        chosen, chosen_mark = _chosen(nodes, h100, rss, shares)
        for detail, counters in DEFAULT_ORDER:
            series = nodes * h100[(detail, counters)].ceiling
            memory = f"{series * rss / 1e5 / 1024:,.1f} GiB" if rss else "not measured"
            share = f"{nodes * shares[detail]:.1%}" if detail in shares else "not measured"
            mark = chosen_mark if chosen == (detail, counters) else ""
            lines.append(
                f"| {nodes:,} | `--nvlink-detail {detail}` | {series:,} | {memory} | {share} "
                f"| {mark} |"
            )
    extra = h100[("link", "all")].ceiling - h100[("link", "default")].ceiling
    rule = (
        f"The rule: the most detail whose series one Prometheus holds within "
        f"{SERVER_RSS_GIB:g} GiB"
        + (
            f", at the {rss:,.0f} MB per 100k active series measured above"
            if rss
            else " (its memory per series was not measured: run benchmarks/scale_bench.py)"
        )
        + f", and whose costliest rule group takes at most {RULE_BUDGET:.0%} of its "
        "interval there: its share per node on Prometheus as the 1,000-node runs below "
        "measured it at each setting (docs/scale-thousand*.json; a group's cost grows with "
        "the series it reads), on this machine's 2 cores; not measured, memory alone "
        "decides. Where neither setting fits, `--nvlink-detail gpu` and more than one "
        "server (*Past one server*): a Prometheus per rack or pod holds a few dozen nodes, "
        "well within both, and VictoriaMetrics evaluated the per-link rules of 1,000 nodes "
        "within budget. Per-link NVLink series are what find the one bad link of a "
        "GPU; per GPU they still show a GPU's errors and bandwidth, and the node "
        "dashboard's per-link panels then read one series per GPU. `--ib-hw-counters all` "
        f"is never a default: {extra:,} more series per node for counters a fabric engineer "
        "reads while debugging one port, better turned on for the nodes under study."
    )
    return [*lines, "", _wrap(rule)]


def _chosen(
    nodes: int,
    h100: dict[tuple[str, str], SettingRow],
    rss: float | None,
    shares: dict[str, float] | None = None,
) -> tuple[tuple[str, str] | None, str]:
    """(the default setting, its mark): the first of DEFAULT_ORDER that one server holds
    and evaluates the rules of within budget (where measured), else the least detailed,
    sharded."""
    if rss is None:
        return None, ""
    shares = shares or {}
    for setting in DEFAULT_ORDER:
        held = nodes * h100[setting].ceiling * rss / 1e5 / 1024 <= SERVER_RSS_GIB
        if held and nodes * shares.get(setting[0], 0.0) <= RULE_BUDGET:
            return setting, "**default**"
    return DEFAULT_ORDER[-1], "**default**, more than one server"


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=90, break_on_hyphens=False, break_long_words=False)
