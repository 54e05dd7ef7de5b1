"""Running the mixin's straggler rules over a labelled corpus in a real Prometheus.

The corpus is backfilled into a TSDB (promtool), then the straggler recording rules are
evaluated over it level by level (alerts/stragglers/levels.py): promtool's rule backfill
evaluates each level against a Prometheus serving everything recorded so far, and its
blocks join the TSDB before the next level. Last, the alert's own expression is
evaluated over each episode at the rules' evaluation interval (a query_range), and
scoring.py applies its `for:` and compares what fires with the truth.

Backfilled series carry no staleness marker where they end, as a live server's would;
the server's lookback is one evaluation interval plus one sample step instead of five
minutes, so a series that ended is gone by the next evaluation, as it is live.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from nvwatch.alerts.recording_straggler import straggler_groups
from nvwatch.alerts.rules.straggler import job_straggler
from nvwatch.alerts.stragglers.corpus import Corpus
from nvwatch.alerts.stragglers.levels import rule_levels
from nvwatch.alerts.stragglers.scoring import Evaluated, Score, score
from nvwatch.alerts.stragglers.server import LocalPrometheus, promtool, tool
from nvwatch.common.durations import parse_duration
from nvwatch.mixin.config import MixinConfig

# Prometheus answers a range query with at most 11,000 points per series
MAX_POINTS = 10_000
PROMTOOL_TIMEOUT_S = 3600.0
LEVEL_GROUP = "nvwatch-straggler-levels"

Progress = Callable[[str], None]


def corpus_config(cfg: MixinConfig, corpus: Corpus) -> MixinConfig:
    """`cfg` with the corpus's site markers (its pipeline-parallel jobs' account) where
    `cfg` does not set its own."""
    markers = {k: v for k, v in corpus.site_markers().items() if not getattr(cfg, k, "")}
    return cfg.with_overrides(**markers) if markers else cfg


def evaluate(
    corpus: Corpus, cfg: MixinConfig, workdir: Path, progress: Progress = lambda _: None
) -> Score:
    """The straggler alert's precision, recall and time to detect on `corpus`."""
    tool("promtool"), tool("prometheus")  # both, before minutes of work
    interval = parse_duration(cfg.evaluation_interval, "evaluation_interval")
    lookback = interval + corpus.step
    tsdb = workdir / "tsdb"
    progress(f"backfilling {corpus.series.name}")
    span_hours = math.ceil((corpus.end - corpus.start) / 3600) + 2
    promtool(
        "tsdb",
        "create-blocks-from",
        f"--max-block-duration={span_hours}h",
        "openmetrics",
        "--quiet",
        str(corpus.series),
        str(tsdb),
        timeout=PROMTOOL_TIMEOUT_S,
    )
    record_levels(corpus, cfg, tsdb, workdir, lookback, progress)
    alert = job_straggler(cfg)
    progress("evaluating the alert over each episode")
    with LocalPrometheus(tsdb, workdir, lookback_s=lookback) as prometheus:
        evaluated = {
            episode["job_id"]: alert_series(prometheus, alert.expr, episode, interval)
            for episode in corpus.episodes
        }
    return score(
        corpus.episodes,
        evaluated,
        interval=interval,
        for_s=parse_duration(alert.for_, "straggler_for"),
        warmup_s=parse_duration(cfg.straggler_warmup, "straggler_warmup"),
    )


def record_levels(
    corpus: Corpus, cfg: MixinConfig, tsdb: Path, workdir: Path, lookback: float, progress: Progress
) -> None:
    """Every straggler recording rule over the whole corpus, into `tsdb`, with the
    servers' lookback `lookback`."""
    interval = parse_duration(cfg.evaluation_interval, "evaluation_interval")
    rules = [rule for group in straggler_groups(cfg) for rule in group.rules]
    levels = rule_levels(rules)
    # on the evaluation grid: corpus start and every block boundary on it
    start = math.floor(corpus.start / interval) * interval
    block_hours = max(1, min(math.ceil((corpus.end - start) / 3600) + 2,
                             int(MAX_POINTS * interval // 3600)))  # fmt: skip
    for number, level in enumerate(levels, 1):
        progress(f"recording rules, level {number} of {len(levels)}: {len(level)} rules")
        rule_file = workdir / "levels.yaml"
        group = {
            # one group name and one file for every level: promtool, as Prometheus,
            # offsets a group's evaluations by a hash of both, and every level must be
            # evaluated at the same instants to see the last one's samples as the
            # rules of one live group see each other's
            "name": LEVEL_GROUP,
            "interval": cfg.evaluation_interval,
            "rules": [{"record": rule.record, "expr": rule.expr} for rule in level],
        }
        rule_file.write_text(yaml.safe_dump({"groups": [group]}), encoding="utf-8")
        blocks = workdir / f"level-{number}-blocks"
        with LocalPrometheus(tsdb, workdir, lookback_s=lookback) as prometheus:
            promtool(
                "tsdb",
                "create-blocks-from",
                f"--max-block-duration={block_hours}h",
                "rules",
                "--quiet",
                f"--url={prometheus.url}",
                f"--start={int(start)}",
                f"--end={math.ceil(corpus.end)}",
                f"--output-dir={blocks}",
                str(rule_file),
                timeout=PROMTOOL_TIMEOUT_S,
            )
        if blocks.is_dir():
            for block in blocks.iterdir():
                shutil.move(str(block), str(tsdb / block.name))


def alert_series(
    prometheus: LocalPrometheus, expr: str, episode: dict[str, Any], interval: float
) -> Sequence[Evaluated]:
    """The alert expression's series over one episode, at each evaluation of the grid,
    in windows Prometheus answers whole."""
    first = math.ceil(float(episode["start"]) / interval) * interval
    end = float(episode["end"])
    times: dict[tuple[tuple[str, str], ...], list[float]] = {}
    window = MAX_POINTS * interval
    while first <= end:
        last = min(end, first + window - interval)
        for series in prometheus.query_range(expr, first, last, interval):
            key = tuple(sorted(series["metric"].items()))
            times.setdefault(key, []).extend(float(t) for t, _ in series["values"])
        first = last + interval
    # every series, whatever job it names: one naming another job is a false alert
    return [Evaluated(dict(key), sorted(at)) for key, at in times.items()]
