"""What the running stack costs, asked of the processes themselves: their /metrics
(series, samples appended, rule group durations), their data directories on disk,
and the time each dashboard panel's query takes over 1 h and 24 h.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from nvwatch.alerts.recording import recording_groups
from nvwatch.dashboards.build import build_all
from nvwatch.mixin.config import MixinConfig

# Grafana's data points per panel: a range query's step is range / this, rounded up to
# a multiple of the scrape interval (as Grafana's $__interval with max data points)
MAX_DATA_POINTS = 1000
QUERY_REPEATS = 3


# a process' own /metrics, read: family name -> [(labels, value)]
Metrics = dict[str, list[tuple[dict[str, str], float]]]


def scrape_metrics(url: str) -> Metrics:
    """A process's own /metrics: family name -> [(labels, value)]."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    out: Metrics = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def one(metrics: Metrics, name: str) -> float:
    return sum(v for _, v in metrics.get(name, []))


def api(url: str, path: str, params: dict[str, str], timeout: float = 120) -> Any:
    full = f"{url}{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(full, timeout=timeout) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body}")
    return body["data"]


def query(url: str, expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector."""
    result: list[dict[str, Any]] = api(url, "/api/v1/query", {"query": expr})["result"]
    return result


def du_bytes(path: Path, tries: int = 5) -> int:
    """`du -sb` of `path`. An engine that is running merges and removes its files as du
    walks them: du then says a file vanished and exits 1, and is asked again."""
    for attempt in range(1, tries + 1):
        done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True)
        vanished = "No such file or directory" in done.stderr
        if done.returncode == 0 or not vanished or attempt == tries:
            break
    done.check_returncode()
    return int(done.stdout.split()[0])


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    title: str
    expr: str
    instant: bool
    # the dashboard's variables that offer no "All" (Grafana selects their first value
    # when the dashboard opens), each with its label_values() query
    narrowed: tuple[tuple[str, str], ...] = ()


def panel_queries(cfg: MixinConfig) -> list[PanelQuery]:
    out = []
    for name, dash in build_all(cfg).items():
        narrowed = _narrowed_variables(dash, cfg)
        for panel in dash["panels"]:
            for target in panel["targets"]:
                instant = bool(target.get("instant"))
                out.append(PanelQuery(name, panel["title"], target["expr"], instant, narrowed))
    return out


def _narrowed_variables(dash: dict[str, Any], cfg: MixinConfig) -> tuple[tuple[str, str], ...]:
    """The query variables without "All", the cluster aside (the benchmark names it)."""
    return tuple(
        (v["name"], v["query"]["query"])
        for v in dash["templating"]["list"]
        if v.get("type") == "query" and not v.get("includeAll") and v["name"] != "cluster"
    )


_LABEL_VALUES = re.compile(r"label_values\((.*), *(\w+)\)$", re.S)


def first_values(url: str, query: PanelQuery, cluster: str) -> dict[str, str]:
    """The value Grafana selects for each narrowed variable of the query's dashboard: the
    first of its label_values(), sorted (every variable here sorts alphabetically)."""
    chosen: dict[str, str] = {}
    for name, definition in query.narrowed:
        found = _LABEL_VALUES.match(definition)
        if found is None:
            raise ValueError(f"variable {name}: not a label_values() query: {definition}")
        matcher = _substitute(found.group(1), {"cluster": cluster, **chosen})
        # a variable with "All" before it (the jobs dashboard's user): every value
        matcher = re.sub(r"\$\{?\w+\}?", ".*", matcher)
        values = api(url, f"/api/v1/label/{found.group(2)}/values", {"match[]": matcher})
        if not values:
            raise RuntimeError(f"variable {name}: {matcher} has no {found.group(2)}")
        chosen[name] = sorted(values)[0]
    return chosen


def step_for(range_s: int, scrape_s: int) -> int:
    raw = -(-range_s // MAX_DATA_POINTS)
    return max(scrape_s, -(-raw // scrape_s) * scrape_s)


def fill(
    expr: str,
    cluster: str,
    range_s: int,
    step_s: int,
    scrape_s: int,
    chosen: dict[str, str] | None = None,
) -> str:
    """Grafana's variables and macros: every node, every GPU, the panel's range; a
    variable in `chosen` (one without "All") as chosen."""
    values = {
        "instance": ".*",
        "gpu": ".*",
        **(chosen or {}),
        "cluster": cluster,
        # Grafana: max(4 x scrape interval, step + scrape interval)
        "__rate_interval": f"{max(4 * scrape_s, step_s + scrape_s)}s",
        "__interval": f"{step_s}s",
        "__range_s": str(range_s),
        "__range": f"{range_s}s",
    }
    expr = _substitute(expr, values)
    # every other dashboard variable (the jobs dashboard's $user, $job_id) is a label
    # matcher: "All"
    expr = re.sub(r"\$\{?(?!__)\w+\}?", ".*", expr)
    if re.search(r"\$\{?\w", expr):
        raise ValueError(f"unfilled variable in {expr}")
    return expr


def _substitute(expr: str, values: dict[str, str]) -> str:
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr


def time_query(url: str, query: PanelQuery, cluster: str, range_s: int, scrape_s: int) -> float:
    """Median wall seconds of the panel's query as Grafana would send it, ending now."""
    step = step_for(range_s, scrape_s)
    expr = fill(query.expr, cluster, range_s, step, scrape_s)
    seconds = []
    for _ in range(QUERY_REPEATS):
        end = time.time()
        began = time.perf_counter()
        if query.instant:
            api(url, "/api/v1/query", {"query": expr, "time": f"{end:.3f}"})
        else:
            params = {"query": expr, "start": f"{end - range_s:.3f}", "end": f"{end:.3f}"}
            api(url, "/api/v1/query_range", {**params, "step": f"{step}s"})
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds)


def raw_equivalent(cfg: MixinConfig, record: str) -> str:
    """A recording rule's expression with every recorded name it reads replaced by its
    own expression: what a dashboard would run without the recording rules."""
    exprs = {r.record: r.expr for g in recording_groups(cfg) for r in g.rules}
    expr = exprs[record]
    for _ in range(3):  # cluster: reads instance:, which reads raw series
        for name in sorted(exprs, key=len, reverse=True):
            if name != record and re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr):
                expr = re.sub(rf"(?<![\w:]){re.escape(name)}(?![\w:])", f"({exprs[name]})", expr)
    return expr


def time_range_query(url: str, expr: str, range_s: int, scrape_s: int) -> float:
    step = step_for(range_s, scrape_s)
    end = time.time()
    seconds = []
    for _ in range(QUERY_REPEATS):
        began = time.perf_counter()
        params = {"query": expr, "start": f"{end - range_s:.3f}", "end": f"{end:.3f}"}
        api(url, "/api/v1/query_range", {**params, "step": f"{step}s"})
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds)


def rule_group_seconds(metrics: Metrics) -> dict[str, float]:
    """Prometheus: each group's last evaluation time, by group name."""
    out = {}
    for labels, value in metrics.get("prometheus_rule_group_last_duration_seconds", []):
        out[labels["rule_group"].rsplit(";", 1)[-1]] = value
    return out


def vmalert_group_seconds(metrics: Metrics, since: Metrics | None = None) -> dict[str, float]:
    """vmalert: each group's mean iteration time (its summary's sum / count), over the
    iterations ended after the metrics `since` were read where given."""

    def by_group(family: str) -> dict[str, float]:
        now = {labels["group"]: v for labels, v in metrics.get(family, [])}
        before = {labels["group"]: v for labels, v in (since or {}).get(family, [])}
        return {g: v - before.get(g, 0.0) for g, v in now.items()}

    sums = by_group("vmalert_iteration_duration_seconds_sum")
    counts = by_group("vmalert_iteration_duration_seconds_count")
    return {g: sums[g] / counts[g] for g in sums if counts.get(g)}


def merging(metrics: Metrics, since: Metrics) -> dict[str, float]:
    """VictoriaMetrics' background merges between two readings of its /metrics: rows
    merged in between, and merges running at the later reading (a big import is merged
    for a long while after it ends, on the cores the rules' queries need)."""
    return {
        "rows_merged": one(metrics, "vm_rows_merged_total") - one(since, "vm_rows_merged_total"),
        "active_merges": one(metrics, "vm_active_merges"),
    }


def vmalert_written_series(metrics: Metrics) -> dict[str, float]:
    """vmalert: the series each recorded name's rules wrote in their last evaluation."""
    written: dict[str, float] = {}
    for labels, v in metrics.get("vmalert_recording_rules_last_evaluation_samples", []):
        written[labels["recording"]] = written.get(labels["recording"], 0.0) + v
    return written


def prometheus_snapshot_bytes(url: str, data_dir: Path) -> int:
    """Compact the head into a block (a TSDB snapshot) and measure that block's size."""
    req = urllib.request.Request(f"{url}/api/v1/admin/tsdb/snapshot", method="POST")
    with urllib.request.urlopen(req, timeout=300) as response:
        name = json.load(response)["data"]["name"]
    return du_bytes(data_dir / "snapshots" / name)
