"""The 1,000-node section of docs/scale.md, written from one run's figures."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from benchmarks.common import replace_section
from benchmarks.thousand.report_section import report_lines
from benchmarks.thousand.rule_timing import SETTLED
from benchmarks.thousand.stand_in_section import recorded, vm_gap
from nvwatch.sim.bulk.load import BUSY_SHARE

BEGIN = "<!-- thousand:begin -->"
END = "<!-- thousand:end -->"
MEDIAN_TARGET_S = 1.0
WORST_TARGET_S = 2.0
RULE_BUDGET = 0.10  # of a group's interval
ENGINES = {"prometheus": "Prometheus", "victoria-metrics": "VictoriaMetrics"}
RANGE_NAMES = {3600: "1 h", 86400: "24 h"}


# the same fleet measured at the other --nvlink-detail, its figures in a file of their own
COMPARED_BEGIN = "<!-- thousand-compared:begin -->"
COMPARED_END = "<!-- thousand-compared:end -->"


def write_section(path: Path, figures: dict[str, Any], compared: bool = False) -> None:
    if compared:
        replace_section(path, compared_section(figures), COMPARED_BEGIN, COMPARED_END)
    else:
        replace_section(path, section(figures), BEGIN, END)


def compared_section(figures: dict[str, Any]) -> str:
    """A run at another setting, beside the main one: what it held, its rule groups,
    panels and report."""
    g, engines = figures["generation"], figures["engines"]
    peaks = ", ".join(
        f"{ENGINES[e]} {engines[e]['peak_rss_mb'] / 1024:.1f} GiB" for e in ENGINES if e in engines
    )
    parts = [
        f"## The same {figures['nodes']:,} nodes with `--nvlink-detail "
        f"{figures['nvlink_detail']}` (measured)",
        "",
        f"`python -m benchmarks.thousand.run --nodes {figures['nodes']} --hours "
        f"{figures['hours']:g} --scrape {figures['scrape_s']} --nvlink-detail "
        f"{figures['nvlink_detail']}`, {figures['date']}, the same fleet mix and job model: "
        f"{g['series']:,} series, {g['samples']:,} samples; peak RSS {peaks}. The "
        "cardinality section's default per fleet size reads this run's costliest rule "
        "group.",
        "",
        *_rules(figures),
        *_panels(figures),
        *report_lines(figures),
    ]
    return "\n".join([COMPARED_BEGIN, *parts, COMPARED_END, ""])


def section(figures: dict[str, Any]) -> str:
    parts = [
        *_run(figures),
        *_rules(figures),
        *_panels(figures),
        *report_lines(figures),
        *_past_one_server(figures),
    ]
    return "\n".join([BEGIN, *parts, END, ""])


def _run(figures: dict[str, Any]) -> list[str]:
    g = figures["generation"]
    nodes, hours, scrape = figures["nodes"], figures["hours"], figures["scrape_s"]
    mix = ", ".join(f"{n} `{p}`" for p, n in sorted(g["profiles"].items()))
    lines = [
        f"## {nodes:,} nodes for {hours:g} h (measured)",
        "",
        f"`python -m benchmarks.thousand.run --nodes {nodes} --hours {hours:g} --scrape "
        f"{scrape} --nvlink-detail {figures['nvlink_detail']} --out docs/scale.md`, "
        f"{figures['date']}. {nodes:,} nodes ({mix}; four to a "
        f"rack), `--nvlink-detail {figures['nvlink_detail']}`, every series each profile's "
        f"agent renders{_bmcs(g)}, scraped every {scrape} s: {g['series']:,} series, "
        f"{g['samples']:,} samples.{_jobs(g)}",
        "",
        f"Why {scrape} s: the recommended interval from a few hundred nodes up. The mixin's "
        f"5-minute rate windows still hold {300 // scrape} samples (Grafana's "
        f"$__rate_interval needs four), the agent's poll is cached so a scrape costs the "
        f"node nothing more, and against the 15 s of the 124-node run it halves samples "
        f"per second and disk while active series, and so Prometheus' memory, stay the "
        f"same. Large sites run 30 s or 60 s; at 60 s a 5-minute window holds five samples "
        f"and a GPU's thermal excursion of under a minute can fall between two.",
        "",
        "| history written straight into a block (sim/bulk, sim/tsdb) | |",
        "|---|---|",
        f"| wall time, from nothing to a queryable block | {g['seconds'] / 60:.1f} min |",
        f"| CPU time (one process) | {g['cpu_seconds'] / 60:.1f} min |",
        f"| samples per second | {g['samples'] / g['seconds'] / 1e6:.2f} M |",
        f"| block on disk | {g['block_bytes'] / 2**30:.2f} GiB, "
        f"{g['block_bytes'] / g['samples']:.2f} bytes per sample |",
        f"| generator's peak RSS | {g['peak_rss_mb'] / 1024:.1f} GiB |",
        "",
        *_gap(g, scrape),
    ]
    engines = figures["engines"]
    lines += _machine(figures)
    if "prometheus" in engines:
        p = engines["prometheus"]
        lines.append(
            f"Prometheus opened the block and answered in {p['ready_seconds']:.1f} s, held "
            f"{p['head_series']:,.0f} live series (the replaying targets' minutes and the "
            f"rules' outputs) and peaked at {p['peak_rss_mb'] / 1024:.1f} GiB RSS." + recorded(p)
        )
    if "victoria-metrics" in engines:
        v = engines["victoria-metrics"]
        lines.append(
            f"VictoriaMetrics took the block from vmctl in {v['import_seconds'] / 60:.1f} min, "
            f"stored it in {v['data_bytes'] / 2**30:.2f} GiB and peaked at "
            f"{v['peak_rss_mb'] / 1024:.1f} GiB RSS." + recorded(v) + vm_gap(figures)
        )
    return [*lines, ""]


def _bmcs(generation: dict[str, Any]) -> str:
    if not generation.get("bmc_series"):
        return " (no BMCs)"
    return (
        f" and every series one probe of its simulated BMC exports ({generation['bmc_series']:,}"
        " in all, under the `nvwatch-bmc` job)"
    )


def _jobs(generation: dict[str, Any]) -> str:
    if not generation.get("jobs"):
        return ""
    return (
        f" {generation['jobs']:,} Slurm jobs hold whole nodes for hours at a time (the "
        f"nodes busy {BUSY_SHARE:.0%} of the time), each with an allocation series per GPU "
        "for its life, as `--attribution slurm` exports them; the jobs still running go "
        "on in the live minutes."
    )


def _machine(figures: dict[str, Any]) -> list[str]:
    """The machine's limits, and what they left out."""
    machine = figures.get("machine") or this_machine()
    missing = [name for key, name in ENGINES.items() if key not in figures["engines"]]
    left_out = (
        f" {' and '.join(missing)} did not run at this size here (`--engines`): the "
        "machine holds one engine with a thousand nodes' live series at a time, and "
        "tests/benchmarks/test_thousand.py runs both at 20 nodes."
        if missing
        else ""
    )
    return [
        f"The machine: {machine['cores']} cores and {machine['memory_gib']:.0f} GiB of "
        "memory, shared by the engine, the replaying targets (a process of their own) and "
        f"the benchmark; the engines ran one after the other.{left_out}",
        "",
    ]


def this_machine() -> dict[str, Any]:
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"cores": os.cpu_count(), "memory_gib": pages / 2**30}


def _gap(generation: dict[str, Any], scrape_s: int) -> list[str]:
    """The history's end against the live minutes' start, where they are apart."""
    gap = generation.get("live_from", 0.0) - generation.get("history_end", 0.0)
    if "live_from" not in generation or abs(gap) <= scrape_s:
        return []
    foreseen = "(the writing time was foreseen from a trial of one node per profile)"
    if gap > 0:
        return [
            f"The history ended {gap / 60:.1f} min before the replaying targets took over "
            f"{foreseen}: the 1 h queries read that much less data.",
            "",
        ]
    return [
        f"The history ended {-gap / 60:.1f} min after the replaying targets took over "
        f"{foreseen}: Prometheus refused their samples of those minutes, older than its "
        "newest block's end, and every query read the history's there.",
        "",
    ]


def _rules(figures: dict[str, Any]) -> list[str]:
    engines = [e for e in ENGINES if e in figures["engines"]]
    costs = {e: {r["group"]: r for r in figures["engines"][e]["rules"]} for e in engines}
    groups = sorted({g for per in costs.values() for g in per})
    header = " | ".join(f"{ENGINES[e]} (s) | share" for e in engines)
    lines = [
        f"### Rule groups at {figures['nodes']:,} nodes",
        "",
        f"{_rules_read(figures, engines)} Budget {RULE_BUDGET:.0%} of the group's interval.",
        "",
        f"| group | {header} |",
        "|---|" + "---|---|" * len(engines),
    ]
    for group in groups:
        cells = []
        for e in engines:
            r = costs[e].get(group)
            if r is None:
                cells.append("| |")
                continue
            share = r["seconds"] / r["interval_s"]
            mark = "" if share <= RULE_BUDGET else " **over**"
            cells.append(f"{r['seconds']:.3f} | {share:.1%}{mark}")
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    busy = cores_busy(figures, engines)
    return [*lines, "", *([busy, ""] if busy else [])]


def cores_busy(figures: dict[str, Any], engines: list[str]) -> str:
    """How busy the machine was over the settled readings (runs that recorded it): a
    group's time there is waiting for a core as well as its own work."""
    said = []
    for e in engines:
        cores = figures["engines"][e].get("cores_during_rules")
        if not cores:
            continue
        # a process gone before the readings (a report) reads NaN
        own = sorted((n for n, v in cores.items()
                      if n != "machine" and not math.isnan(v) and v >= 0.005),
                     key=lambda n: -cores[n])  # fmt: skip
        parts = ", ".join(f"{n} {cores[n]:.2f}" for n in own)
        said.append(f"with {ENGINES[e]}, {cores['machine']:.2f} in all ({parts})")
    if not said:
        return ""
    return (
        f"Cores busy over those readings, of the machine's {figures['machine']['cores']}: "
        + "; ".join(said)
        + "."
    )


def _rules_read(figures: dict[str, Any], engines: list[str]) -> str:
    """When and how the groups' times were read: settled, or at the engine's start."""
    said = (
        "Each group's evaluation time as the engine reports it (Prometheus' last "
        "duration, vmalert's mean), the median of the minutes read"
    )
    if not all(figures["engines"][e].get("rules_read") == SETTLED for e in engines):
        return said + ", in the engine's first minutes (its head filling, its imports merging)."
    return (
        said + ": the groups evaluated every minute once the engine's imports, panels and "
        "report were done, the engine scraping and evaluating alone, over evaluations "
        "begun after them (vmalert's mean over those alone); the report's groups, every "
        "few minutes, as at the engine's start."
    )


def _panels(figures: dict[str, Any]) -> list[str]:
    engines = [e for e in ENGINES if e in figures["engines"]]
    lines = [
        f"### Dashboard panels at {figures['nodes']:,} nodes",
        "",
        "Every panel's query as Grafana sends it when the dashboard opens, ending now "
        "(the history's last minutes are the replayed live ones), timed to the last byte "
        "of its answer (not parsed: that is the browser's cost); median of three runs "
        f"(one when the first took over 5 s). Target: median ≤ {MEDIAN_TARGET_S:g} s and "
        f"worst ≤ {WORST_TARGET_S:g} s. {_selected(figures)} {_recorded_range(figures)}",
        "",
    ]
    for engine in engines:
        panels = figures["engines"][engine]["panels"]
        missed = [p for p in panels if _missed(p)]
        whole = sorted({p["dashboard"] for p in panels} - {p["dashboard"] for p in missed})
        lines += [
            f"{ENGINES[engine]}: {len(panels) - len(missed)} of {len(panels)} panel queries "
            f"within target, every one of {', '.join(whole) or 'no dashboard'}"
            + ("; those that are not:" if missed else "."),
            "",
        ]
        if missed:
            lines += [
                "| dashboard | panel | range | median (s) | worst (s) | answer (MB) | error |",
                "|---|---|---|---|---|---|---|",
                *(_panel_row(p) for p in sorted(missed, key=lambda p: -p["seconds"])),
                "",
            ]
    return lines


def _recorded_range(figures: dict[str, Any]) -> str:
    """What a panel reading a recorded series read over the range."""
    if all("recorded_history" in e for e in figures["engines"].values()):
        return (
            "A panel reading a recorded series read a day of it: the rules' series as "
            "recorded in the live minutes, held over the history at the rules' minute "
            "(benchmarks/thousand/recorded.py)."
        )
    return (
        "The recording rules ran over the live minutes only (the history holds the agents' "
        "series, not the rules' outputs), so a panel that reads a recorded series read "
        "minutes of it, not the range: its time is a lower bound. The panels on raw "
        "series read the whole range."
    )


def _selected(figures: dict[str, Any]) -> str:
    narrowed = _narrowed(figures)
    if not narrowed:
        return "Every node is selected."
    return (
        f"Every node is selected, except on {narrowed}: their node variable offers no "
        '"All", and Grafana opens them on the first node (the node dashboard shows one '
        "node by design; on the NVLink and InfiniBand dashboards every link or port of a "
        "fleet is more series than a query answers within seconds or a graph shows, and "
        "their fleet-wide rows read the per-node recording rules)."
    )


def _narrowed(figures: dict[str, Any]) -> str:
    """The dashboards timed on one selection, with it: "x (instance=a), y (...)"."""
    chosen = {
        p["dashboard"]: p["selection"]
        for engine in figures["engines"].values()
        for p in engine["panels"]
        if p.get("selection")
    }
    return ", ".join(f"{name} ({selection})" for name, selection in sorted(chosen.items()))


def _panel_row(p: dict[str, Any]) -> str:
    range_name = RANGE_NAMES.get(p["range_s"], str(p["range_s"]))
    return (
        f"| {p['dashboard']} | {p['title']} | {range_name} | {p['seconds']:.2f} "
        f"| {p['worst']:.2f} | {p['answer_bytes'] / 1e6:.1f} | {p['error'] or ''} |"
    )


def _missed(panel: dict[str, Any]) -> bool:
    return bool(
        panel["error"] or panel["seconds"] > MEDIAN_TARGET_S or panel["worst"] > WORST_TARGET_S
    )


def _past_one_server(figures: dict[str, Any]) -> list[str]:
    """How a fleet grows past one server, with what this run measured of it."""
    recorded = [
        f"{ENGINES[e]} {figures['engines'][e]['report']['seconds']:.0f} s"
        for e in ENGINES
        if figures["engines"]
        .get(e, {})
        .get("report", {})
        .get("read_from", "")
        .startswith("nvwatch-report")
        and not figures["engines"][e]["report"]["returncode"]
    ]
    measured = (
        f"Read that way, this run's report took {' and '.join(recorded)} (above)."
        if recorded
        else "This run's report did not read them (above): no figure for it here."
    )
    return [
        "### Past one server",
        "",
        "Two ways, both in deploy/scale. **vmagent shards into one VictoriaMetrics** (the "
        "124-node measurement above, and this section's second engine): every node's "
        "series in one store, so every rule, dashboard and report works unchanged, and "
        "a job spanning racks is judged whole. **A Prometheus per rack or pod and a "
        "global one** (`prometheus-global.yml`): each rack server scrapes its nodes and "
        "evaluates every rule where the data is; the global server federates the "
        "recorded series of a node, GPU, port, link or job owner, the alerts and the "
        "small raw families (BMC, Slurm queue, GPU allocations), and evaluates the "
        "roll-ups over many nodes again. The capacity report at the global server reads "
        "the report rules' series, recorded on the rack servers, and gives the numbers "
        "of one server holding every sample (tests/report/test_report_global_view.py "
        f"compares them). {measured} Per-GPU, per-link and per-port series stay on the "
        "rack servers (the node, NVLink and InfiniBand dashboards point there), and a "
        "job whose nodes span racks is judged by each rack for its part: for such jobs "
        "the VictoriaMetrics path is the one that holds them whole.",
        "",
        *_federation(figures["engines"].get("prometheus", {}).get("federation")),
    ]


def _federation(f: dict[str, Any] | None) -> list[str]:
    """The global server, measured beside this run's Prometheus (benchmarks/thousand/
    federation.py)."""
    if f is None:
        return ["The global server's own cost was not measured in this run.", ""]
    if "error" in f:
        return [f"The global server could not be measured: {f['error']}", ""]
    answer, scrapes = f["answer"], f["scrape_seconds"]
    worst = max(f["rules"], key=lambda r: r["seconds"] / r["interval_s"])
    return [
        "The global server measured: `prometheus-global.yml` run beside this run's "
        "Prometheus, which stands for every rack at once, its one target's scrape timeout "
        "raised to 55 s for that (each rack of a real fleet answers for its share).",
        "",
        "| global server | |",
        "|---|---|",
        f"| one /federate answer, every rack together | {answer['seconds']:.1f} s, "
        f"{answer['series']:,} series, {answer['bytes'] / 2**20:.0f} MiB |",
        f"| its federation scrapes (each minute) | {_seconds_range(scrapes)} |",
        f"| samples per scrape | {f['samples_scraped']:,.0f} |",
        *_second_writers(f),
        f"| series it holds | {f['head_series']:,.0f} |",
        f"| costliest rule group | {worst['group']}, {worst['seconds']:.2f} s "
        f"({worst['seconds'] / worst['interval_s']:.1%} of its interval) |",
        f"| peak RSS | {f['peak_rss_mb'] / 1024:.1f} GiB |",
        "",
    ]


def _second_writers(f: dict[str, Any]) -> list[str]:
    """The samples the global server dropped as a second value of one series at one
    timestamp, where the run counted them (runs before it did render no row)."""
    if "duplicate_samples" not in f:
        return []
    return [f"| samples dropped as a series' second writer | {f['duplicate_samples']:,.0f} |"]


def _seconds_range(values: list[float]) -> str:
    if not values:
        return "none recorded"
    return f"{min(values):.1f}-{max(values):.1f} s ({len(values)} scrapes)"
