"""The recording rules' series over the history, for panels that read them over a day.

The history holds what the agents export, not what the rules record from it: a panel
reading a recorded series over 24 h would read the live minutes only, and its time would
be a lower bound. Evaluating every rule over a day of a thousand nodes (promtool's
`create-blocks-from rules`) costs the engine about a range query per rule per two hours,
hours on this machine. This module writes a stand-in instead: every series the rules
recorded in the live minutes, as the engine returns them (name and labels), extended
back over the history at the rules' interval into a block of its own, each holding its
live value with a per cent of noise (a constant would compress to nothing and decode
faster than a real series). A panel then reads as many recorded series and samples as
after a day of rules; the values over the history are the live ones, not the history's.
A job's series (the jobs rules, one per GPU a job holds) stand in as the jobs running
now, held over the whole day: about the samples of a day of jobs on a busy fleet, in
fewer, longer series than the day's jobs would leave.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.scale import measure as m
from nvwatch.sim.tsdb.block import BlockWriter
from nvwatch.sim.tsdb.index import Labels
from nvwatch.sim.tsdb.xor import Grid
from tests.e2e.loopback import wait_for

NOISE = 0.01
CELLS = 8_000 * 1_440  # values written at once: 8,000 series of a day at a minute
MINUTE_S = 60.0  # the mixin's rule groups' interval
Written = Callable[[], dict[str, float]]  # each recorded name's series, last evaluation


def recorded_now(url: str, intervals: dict[str, float]) -> list[tuple[Labels, float]]:
    """Every series of the recorded names in `intervals` the engine holds now, with its
    value; a name recorded less often than the engine's lookback sees (its interval
    past a minute): each series' last value within its interval and a minute. A query
    per name: every recorded series of a thousand nodes at once is more than
    VictoriaMetrics selects in one query (-search.maxUniqueTimeseries)."""
    found: dict[Labels, float] = {}
    for name, interval_s in intervals.items():
        sparse = interval_s > MINUTE_S
        # a range selector for a sparse name: every sample in it, the last one kept
        window = f"[{int(interval_s) + 60}s]" if sparse else ""
        for series in m.query(url, f'{{__name__="{name}"}}{window}'):
            value = series["values"][-1][1] if sparse else series["value"][1]
            found[tuple(sorted(series["metric"].items()))] = float(value)
    return list(found.items())


def held_once_written(url: str, intervals: dict[str, float], written: Written,
                      timeout_s: float = 300.0) -> list[tuple[Labels, float]]:  # fmt: skip
    """`recorded_now` once the engine holds, of each recorded name, as many series as
    `written()` says the rules' last evaluation wrote: vmalert sends what it recorded
    over remote write, and VictoriaMetrics answers with it seconds after the evaluation
    ended (its last 30 s not at all); a group evaluated once by then would stand in with
    none of its series. While waiting the slow names are read and the minute names only
    counted: a thousand nodes' minute series are most of them."""
    slow = {name: i for name, i in intervals.items() if i > MINUTE_S}
    minute = {name: i for name, i in intervals.items() if i <= MINUTE_S}
    latest: list[tuple[Labels, float]] = []
    short: list[str] = []

    def held() -> bool:
        latest[:] = recorded_now(url, slow)
        counts = Counter(dict(labels)["__name__"] for labels, _ in latest)
        wanted = written()
        counts.update(_counted(url, [n for n in minute if wanted.get(n, 0)]))
        short[:] = [
            f"{n} {counts[n]} of {wanted[n]:g}" for n in intervals if counts[n] < wanted.get(n, 0)
        ]
        return not short

    wait_for(f"{url} to hold every series the rule groups wrote", held, timeout_s,
             every=2, explain=lambda: "held: " + ", ".join(short))  # fmt: skip
    return latest + recorded_now(url, minute)


def _counted(url: str, names: list[str]) -> dict[str, int]:
    """How many series of each of `names` the engine holds now."""
    counts = {}
    for name in names:
        answer = m.query(url, f'count({{__name__="{name}"}})')
        counts[name] = int(float(answer[0]["value"][1])) if answer else 0
    return counts


def rule_grid(start_s: float, end_s: float, interval_s: int) -> Grid:
    """The rules' evaluation times from `start_s` to before `end_s`, aligned."""
    step_ms = interval_s * 1000
    first = -(-int(start_s * 1000) // step_ms) * step_ms
    count = max(2, (int(end_s * 1000) - first) // step_ms)
    return Grid(first, step_ms, count)


def write_recorded_history(
    series: list[tuple[Labels, float]], grid: Grid, out: Path, seed: int = 1
) -> Path:
    """A block under `out` with each recorded series on `grid`: its value, noisy."""
    rng = np.random.default_rng(seed)
    writer = BlockWriter(out, grid)
    batch = max(1, CELLS // grid.count)
    for first in range(0, len(series), batch):
        part = series[first : first + batch]
        held = np.array([value for _, value in part])[:, None]
        noise = 1.0 + rng.uniform(-NOISE, NOISE, size=(len(part), grid.count))
        writer.add([labels for labels, _ in part], held * noise)
    return writer.close()


def wait_loaded(url: str, grid: Grid, name: str, timeout_s: float = 300.0) -> float:
    """Seconds until the engine answers from the block with the series `name` it holds
    on `grid` (Prometheus loads a block put in its data directory within a minute); an
    error past `timeout_s`. One name: every recorded series at once is past what
    VictoriaMetrics selects in one query at a thousand nodes (-search.maxUniqueTimeseries)."""
    began = time.monotonic()
    middle = grid.time_ms(grid.count // 2) / 1000.0
    params = {"query": f'count({{__name__="{name}"}})', "time": f"{middle:.3f}"}

    def answers() -> bool:
        return bool(m.api(url, "/api/v1/query", params)["result"])

    wait_for(f"{url} to answer from the recorded series' block", answers, timeout_s, every=2)
    return time.monotonic() - began


def blocks_loaded(url: str) -> float:
    return m.one(m.scrape_metrics(url), "prometheus_tsdb_blocks_loaded")


def wait_merged(url: str, blocks: float, timeout_s: float = 1800.0) -> float:
    """Seconds until Prometheus holds no more blocks than `blocks` again: it merged the
    one added with the one it overlaps; an error past `timeout_s`."""
    began = time.monotonic()
    wait_for(f"{url} to merge the recorded series' block",
             lambda: blocks_loaded(url) <= blocks, timeout_s, every=5)  # fmt: skip
    return time.monotonic() - began


def recorded_history(url: str, out: Path, start_s: float, end_s: float,
                     intervals: dict[str, float],
                     load: Callable[[Path], None] | None = None,
                     before_s: float = 0.0,
                     written: Written | None = None) -> dict[str, Any]:  # fmt: skip
    """The stand-in for the rules' series over the history as blocks in `out`, each
    series of a name in `intervals` at its group's interval until an interval past
    `end_s` (when the engine's rules began), and the report rules'
    series (those of the groups slower than a minute) for `before_s` before it as well,
    in a block of their own that overlaps nothing: a month's report then reads a month
    of what it reads, the scraped samples holding only the history's day. Prometheus'
    data directory loads them itself, `load` gives the directory to another engine; once
    the engine answers from them and holds them as it will. `written`: for an engine the
    rules write to from outside (vmalert), how many series each recorded name's last
    evaluation wrote, to wait for."""
    began = time.perf_counter()
    by_interval: dict[float, list[tuple[Labels, float]]] = {}
    if written is None:
        now = recorded_now(url, intervals)
    else:
        now = held_once_written(url, intervals, written)
    if not now:
        raise RuntimeError(f"{url}: no recorded series to hold over the history")
    for labels, value in now:
        name = dict(labels)["__name__"]
        by_interval.setdefault(intervals[name], []).append((labels, value))
    blocks = None if load else blocks_loaded(url)
    grids = []
    for interval_s, series in sorted(by_interval.items()):
        # an interval past `end_s`: the engine's first evaluation of a group comes up to an
        # interval after it starts (a group's offset, vmalert's jitter), and a stand-in
        # ending an interval before it starts left a gap of two, where a report's check
        # that the rules hold every GPU could find none (VictoriaMetrics' 6-hour report
        # at 1,000 nodes read the samples for it); the overlap holds the same values
        grid = rule_grid(start_s, end_s + interval_s, int(interval_s))
        write_recorded_history(series, grid, out)
        grids.append((grid, series))
    before = []
    if before_s:
        for interval_s, series in sorted(by_interval.items()):
            if interval_s > MINUTE_S:
                grid = rule_grid(start_s - before_s, start_s - interval_s, int(interval_s))
                write_recorded_history(series, grid, out, seed=2)
                before.append((grid, series))
    if load is not None:
        load(out)
    written_s = time.perf_counter() - began
    figures = {
        "series": sum(len(series) for _, series in grids),
        "samples": sum(len(series) * grid.count for grid, series in grids),
        "intervals": [
            {
                "interval_s": grid.step_ms / 1000.0,
                "series": len(series),
                "samples": len(series) * grid.count,
            }
            for grid, series in grids
        ],
        "before": [
            {
                "interval_s": grid.step_ms / 1000.0,
                "series": len(series),
                "samples": len(series) * grid.count,
                "hours": grid.step_ms * grid.count / 3.6e6,
            }
            for grid, series in before
        ],
        # per recorded name: what each engine's rules recorded, to compare the engines
        "names": dict(sorted(Counter(dict(labels)["__name__"] for labels, _ in now).items())),
        "write_seconds": written_s,
        "load_seconds": sum(
            wait_loaded(url, grid, dict(series[0][0])["__name__"])
            for grid, series in [*grids, *before]
        ),
    }
    if blocks is not None:
        # Prometheus merges a block overlapping another (vertical compaction), as a
        # day's own blocks hold the rules' series beside the scraped ones: timed after.
        # The blocks before the history overlap nothing and stay as written.
        figures["merge_seconds"] = wait_merged(url, blocks + len(before))
    return figures
