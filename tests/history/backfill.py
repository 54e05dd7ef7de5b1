"""A month of simulated fleet history in a real Prometheus, for any test that needs one.

`backfilled_prometheus()` generates a history with `nvwatch simulate history`'s code
(nvwatch.sim.history.history), backfills it with `promtool tsdb create-blocks-from openmetrics`,
and starts Prometheus on that TSDB on 127.0.0.1; it stops Prometheus on exit. The
session fixture `history_prometheus` (tests/conftest.py) wraps it, so every test module
(tests/history, the report's) shares one.

Samples are STEP apart, longer than Prometheus' default 5-minute lookback, so the server
runs with `--query.lookback-delta` a little over one step: an instant query anywhere in
the range finds the latest sample, as it would on a server scraping every STEP.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nvwatch.common.durations import prometheus_duration
from nvwatch.sim.history.history import generate, truth_path_for
from nvwatch.sim.history.plan import DAY_S, plan_history
from tests.conftest import require_tool
from tests.prometheus_on_blocks import prometheus_on

HOST = "127.0.0.1"
# the suite's history: six nodes (every episode on its own node, three node classes),
# 30 days at a 15-minute step: ~4 M samples, generated and backfilled in well under a
# minute on two cores
NODES = 6
DAYS = 30.0
STEP_S = 900.0


@dataclass
class HistoryPrometheus:
    """A Prometheus serving a backfilled history, and that history's ground truth."""

    url: str
    truth: dict[str, Any]
    workdir: Path

    @property
    def start(self) -> float:
        return float(self.truth["start"])

    @property
    def end(self) -> float:
        return float(self.truth["end"])

    @property
    def step(self) -> float:
        return float(self.truth["step_seconds"])

    @property
    def range(self) -> str:
        """The PromQL range that, evaluated at `end`, holds every sample but the first
        (a second short of the span: Prometheus 2 includes a range's left end, 3 not)."""
        return prometheus_duration(self.end - self.start - 1)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr, "time": repr(self.end if at is None else at)}
        return self._get("query", params)  # type: ignore[no-any-return]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        params = {"query": expr, "start": repr(start), "end": repr(end), "step": repr(step)}
        return self._get("query_range", params)  # type: ignore[no-any-return]

    def _get(self, endpoint: str, params: dict[str, str]) -> Any:
        url = f"{self.url}/api/v1/{endpoint}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=60) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise AssertionError(f"query failed: {params}: {body}")
        return body["data"]["result"]


def backfill(history: Path, tsdb: Path, days: float) -> None:
    """promtool: the OpenMetrics file -> TSDB blocks in `tsdb`, in blocks longer than the
    range (promtool reads the whole file once per block: 2 h blocks would read a month's
    file 360 times)."""
    promtool = require_tool("promtool")
    hours = int(days * 24) + 48
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            f"--max-block-duration={hours}h",
            "openmetrics",
            "--quiet",
            str(history),
            str(tsdb),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )


@contextlib.contextmanager
def backfilled_prometheus(
    workdir: Path,
    *,
    nodes: int = NODES,
    days: float = DAYS,
    step: float = STEP_S,
    end: float | None = None,
) -> Iterator[HistoryPrometheus]:
    require_tool("prometheus")
    require_tool("promtool")
    plan = plan_history(nodes=nodes, days=days, step=step, end=time.time() if end is None else end)
    history = workdir / "history.om"
    generate(plan, history)
    tsdb = workdir / "tsdb"
    backfill(history, tsdb, days)
    history.unlink()  # gigabytes for a large fleet; the blocks hold it all
    truth = json.loads(truth_path_for(history).read_text(encoding="utf-8"))
    with serve_tsdb(tsdb, workdir, step=step) as url:
        yield HistoryPrometheus(url, truth, workdir)


@contextlib.contextmanager
def serve_tsdb(tsdb: Path, workdir: Path, *, step: float) -> Iterator[str]:
    """Prometheus on `tsdb` (tests/prometheus_on_blocks), its lookback a little over one
    step; yields its URL once it is ready, stops it on exit."""
    with prometheus_on(tsdb, workdir, f"--query.lookback-delta={int(step + 60)}s") as url:
        yield url


def backfill_recording_rules(
    url: str,
    tsdb: Path,
    workdir: Path,
    *,
    start: float,
    end: float,
    step: float,
    config: Path | None = None,
    only_groups: tuple[str, ...] = (),
) -> None:
    """The mixin's recording rules over the history `url` serves, as the README's flow
    makes them (`nvwatch alerts backfill-rules`, then promtool's rule backfill), their
    blocks moved into `tsdb`: the server picks them up when next started on it.
    `config`: the mixin config file (default: the defaults); `only_groups`: those
    groups alone (default: all)."""
    from nvwatch.alerts.backfill import backfill_rules
    from nvwatch.mixin.config import load

    made = backfill_rules(load(config), step)
    if only_groups:
        made["groups"] = [g for g in made["groups"] if g["name"] in only_groups]
        assert len(made["groups"]) == len(only_groups), f"not all of {only_groups}"
    rules = workdir / "backfill-rules.yaml"
    rules.write_text(yaml.safe_dump(made), encoding="utf-8")
    blocks = workdir / "rule-blocks"
    hours = int((end - start) / 3600) + 48
    subprocess.run(
        [
            require_tool("promtool"),
            "tsdb",
            "create-blocks-from",
            f"--max-block-duration={hours}h",
            "rules",
            f"--url={url}",
            f"--start={int(start)}",
            f"--end={int(end)}",
            f"--output-dir={blocks}",
            str(rules),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    for block in blocks.iterdir():
        block.rename(tsdb / block.name)


__all__ = [
    "DAY_S",
    "HistoryPrometheus",
    "backfill_recording_rules",
    "backfilled_prometheus",
    "serve_tsdb",
]
