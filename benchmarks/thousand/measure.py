"""What a thousand nodes cost each engine: every dashboard panel's query timed over 1 h
and 24 h as Grafana sends it when the dashboard opens (every node selected, or the first
node where the dashboard offers no "All"), and every rule group's evaluation time as the
engine itself reports it.

A query that fails (Prometheus refuses one that would load more than its
`--query.max-samples` into memory, 50 million by default) is recorded with its error,
not retried: that is what a Grafana user would see.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.common import nvwatch_command, stop
from benchmarks.scale import measure as m
from benchmarks.scale.stack import Stack
from nvwatch.mixin.config import MixinConfig

REPEAT_BELOW_S = 5.0  # a query faster than this is timed three times (the median kept)
QUERY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class PanelTiming:
    dashboard: str
    title: str
    range_s: int
    seconds: float  # the median of the runs, or the one run
    worst: float
    answer_bytes: int  # the JSON a client (Grafana) receives
    error: str = ""
    # the variables the dashboard narrows to one value, as selected ("instance=node-0001")
    selection: str = ""


def time_panels(
    url: str, cluster: str, scrape_s: int, ranges: tuple[int, ...]
) -> list[PanelTiming]:
    """Every panel query of every dashboard, over each range ending now."""
    out = []
    chosen: dict[str, dict[str, str]] = {}
    for query in m.panel_queries(MixinConfig()):
        if query.dashboard not in chosen:
            chosen[query.dashboard] = m.first_values(url, query, cluster)
        for range_s in ranges:
            out.append(_timed(url, query, cluster, range_s, scrape_s, chosen[query.dashboard]))
    return out


def _timed(url: str, query: m.PanelQuery, cluster: str, range_s: int, scrape_s: int,
           chosen: dict[str, str]) -> PanelTiming:  # fmt: skip
    step = m.step_for(range_s, scrape_s)
    expr = m.fill(query.expr, cluster, range_s, step, scrape_s, chosen)
    selection = ", ".join(f"{name}={value}" for name, value in sorted(chosen.items()))
    runs: list[float] = []
    answer = 0
    while len(runs) < m.QUERY_REPEATS:
        end = time.time()
        began = time.perf_counter()
        try:
            answer = _send(url, query.instant, expr, end, range_s, step)
        except (RuntimeError, urllib.error.HTTPError, TimeoutError, OSError) as exc:
            seconds = time.perf_counter() - began
            return PanelTiming(query.dashboard, query.title, range_s, seconds, seconds, 0,
                               _reason(exc), selection)  # fmt: skip
        runs.append(time.perf_counter() - began)
        if runs[0] >= REPEAT_BELOW_S:
            break
    return PanelTiming(query.dashboard, query.title, range_s, statistics.median(runs), max(runs),
                       answer, "", selection)  # fmt: skip


def _send(url: str, instant: bool, expr: str, end: float, range_s: int, step: int) -> int:
    """The query's answer, read but not parsed (parsing is the client's cost, not the
    engine's); its size in bytes."""
    if instant:
        path, params = "/api/v1/query", {"query": expr, "time": f"{end:.3f}"}
    else:
        path = "/api/v1/query_range"
        params = {"query": expr, "start": f"{end - range_s:.3f}", "end": f"{end:.3f}",
                  "step": f"{step}s"}  # fmt: skip
    full = f"{url}{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(full, timeout=QUERY_TIMEOUT_S) as response:
        body: bytes = response.read()
    if not body.startswith(b'{"status":"success"'):
        raise RuntimeError(body[:200].decode(errors="replace"))
    return len(body)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        body = exc.read().decode(errors="replace")
        return f"HTTP {exc.code}: {body[:200]}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


@dataclass(frozen=True)
class GroupCost:
    group: str
    seconds: float  # the median of the evaluations read
    interval_s: float

    @property
    def share(self) -> float:
        return self.seconds / self.interval_s


def rule_costs(readings: list[dict[str, float]], intervals: dict[str, float]) -> list[GroupCost]:
    """Each group's median over several readings of its evaluation time."""
    groups = sorted({g for r in readings for g in r})
    return [
        GroupCost(g, statistics.median(r[g] for r in readings if g in r), intervals.get(g, 60.0))
        for g in groups
    ]


def as_dicts(items: list[PanelTiming] | list[GroupCost]) -> list[dict[str, object]]:
    return [asdict(item) for item in items]


REPORT_TIMEOUT_S = 3600.0


def report_cost(stack: Stack, url: str, cluster: str, hours: float, name: str,
                end: float | None = None,
                step_s: float | None = None) -> dict[str, Any]:  # fmt: skip
    """`nvwatch report` over `hours` up to `end` (now), as its users run it, as process
    `name`: wall seconds, its peak RSS (sampled), which series it read, and its
    one-line error if it failed."""
    out, timings = stack.workdir / name, stack.workdir / f"{name}-timings.json"
    argv = [*nvwatch_command(), "report", "--prometheus", url, "--range", f"{hours:g}h",
            "--cluster", cluster, "--out", str(out), "--timings", str(timings)]  # fmt: skip
    if end is not None:
        argv += ["--end", f"{end:.0f}"]
    if step_s is not None:
        argv += ["--step", f"{step_s:.0f}s"]
    began = time.perf_counter()
    stack.spawn(name, argv)
    process = stack.processes.pop(name)
    try:
        code = process.wait(timeout=REPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop(process)
        code = -1
    seconds = time.perf_counter() - began
    log = (stack.workdir / f"{name}.log").read_text(errors="replace").strip().splitlines()
    made = out / "report.json"
    written = json.loads(made.read_text()) if made.is_file() else {}
    return {
        "read_from": written.get("read_from", ""),
        "step_s": written.get("step_seconds", 0.0),
        "seconds": seconds,
        "peak_rss_mb": stack.sampler.peaks.get(name, 0.0),
        "returncode": code,
        "error": (log[-1] if log else "no output") if code else "",
        "files": sorted(p.name for p in out.iterdir()) if out.is_dir() else [],
        "timings": json.loads(timings.read_text()) if timings.is_file() else {},
    }


SHORTER = 4  # the growth is measured against a report over this fraction of the range
SHORTEST_HOURS = 1.0  # the shortest range `nvwatch report` makes
COARSER = 3  # and against the whole range at this many times its step
MONTH_DAYS = 30


def report_growth(stack: Stack, url: str, cluster: str, hours: float, name: str,
                  end: float | None = None, month: bool = False) -> dict[str, Any]:  # fmt: skip
    """The report over `hours` and, for how its time grows with the range and with its
    points, over a quarter of it (an hour at least) ending at the same time ("shorter")
    and over the whole range at a coarser step ("coarser"); with `month`, over 30 days
    as well ("month": the engine holds the report rules' series for them)."""
    short_hours = max(hours / SHORTER, SHORTEST_HOURS)
    shorter = report_cost(stack, url, cluster, short_hours, f"{name}-shorter", end)
    whole = report_cost(stack, url, cluster, hours, name, end)
    coarser = (
        report_cost(stack, url, cluster, hours, f"{name}-coarser", end, whole["step_s"] * COARSER)
        if whole["step_s"]
        else None
    )
    month_hours = MONTH_DAYS * 24.0
    made = report_cost(stack, url, cluster, month_hours, f"{name}-month", end) if month else None
    return {
        **whole,
        "shorter": {**shorter, "hours": short_hours},
        **({"coarser": {**coarser, "hours": hours}} if coarser else {}),
        **({"month": {**made, "hours": month_hours}} if made else {}),
    }
