"""Which series the report reads: nvwatch-report-*.rules' when they cover the window, the
scraped samples otherwise.

The recorded series give the same numbers from one sample per `report_interval` (a
month of a thousand nodes in a minute or two instead of an hour), but only from the time
the rules were first evaluated: a server whose rules came later than its data, or a
history imported without `nvwatch alerts backfill-rules`, would lose the time before.
So `auto` compares, at points spread over the window, how many GPUs each source holds,
and reads the recorded series only when they hold every GPU the samples do at every
point; the BMC reads likewise by BMCs (nvwatch-report-bmc.rules can come later than the
GPUs' groups, or a site probe its BMCs only from some date). A few small queries: a few
points of a count each.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvwatch.alerts.recording_report import REPORT_RULES, report_reads
from nvwatch.alerts.recording_report_bmc import BMC_GROUP
from nvwatch.alerts.windowed_read import WindowedRead
from nvwatch.common.durations import parse_duration, prometheus_duration
from nvwatch.mixin.config import MixinConfig
from nvwatch.report.errors import ReportError
from nvwatch.report.prom import PrometheusClient
from nvwatch.report.queries import cluster_matchers
from nvwatch.report.window import Window, iso_time

CHOICES = ("auto", "rules", "raw")
PROBES = 24  # points of the window compared


@dataclass(frozen=True)
class Source:
    recorded: bool
    words: str  # how the report says where its numbers come from
    bmc_recorded: bool = False  # the BMC reads from the rules too (only with `recorded`)

    @classmethod
    def scraped(cls, why: str = "") -> Source:
        return cls(False, "scraped samples" + (f" ({why})" if why else ""))


def recorded_words(cfg: MixinConfig) -> str:
    return f"{REPORT_RULES} (one sample per {cfg.report_interval})"


def interval_seconds(cfg: MixinConfig) -> float:
    return parse_duration(cfg.report_interval, "report_interval")


def choose_source(
    client: PrometheusClient,
    cfg: MixinConfig,
    window: Window,
    cluster: str | None,
    wanted: str,
) -> Source:
    """`wanted` is one of CHOICES; ReportError when `rules` cannot be had."""
    if wanted == "raw":
        return Source.scraped()
    if window.step < interval_seconds(cfg):
        if wanted == "rules":
            raise ReportError(
                f"--read rules: the step {window.step_text} is shorter than the rules' "
                f"report_interval {cfg.report_interval}"
            )
        return Source.scraped(f"the step is shorter than report_interval {cfg.report_interval}")
    # the GPUs' rules first; the BMCs' are judged on their own once the GPUs' hold
    gpus = _first_shortfall(client, cfg, window, cluster, _read("gpu_up"), "GPUs")
    bmcs = None
    if gpus is None:
        bmcs = _first_shortfall(client, cfg, window, cluster, _read("bmc_up"), "BMCs", BMC_GROUP)
    short = gpus or bmcs
    if short is not None and wanted == "rules":
        raise ReportError(f"--read rules: {short}")
    if gpus is not None:
        return Source.scraped(gpus)
    if bmcs is not None:
        words = f"{recorded_words(cfg)}; BMC figures from the scraped samples ({bmcs})"
        return Source(True, words)
    return Source(True, recorded_words(cfg), bmc_recorded=True)


def _read(name: str) -> WindowedRead:
    return next(read for read in report_reads() if read.name == name)


def _first_shortfall(
    client: PrometheusClient,
    cfg: MixinConfig,
    window: Window,
    cluster: str | None,
    up: WindowedRead,
    things: str,
    rules: str = REPORT_RULES,
) -> str | None:
    """Where `up`'s recorded series hold fewer `things` (one scraped series each) than
    the samples: a phrase naming `rules`, or None."""
    extra = cluster_matchers(cfg, cluster)
    # two intervals, or a step when longer: a history backfilled at a coarser interval
    # still has a sample in each probe's window
    lookback = prometheus_duration(max(2 * interval_seconds(cfg), window.step))
    probes = {
        "raw": f"count(count_over_time({up.metric}{up.selector(cfg, *extra)}[{lookback}]))",
        "recorded": f"count(count_over_time({up.record()}{{{', '.join(extra)}}}[{lookback}]))",
    }
    spacing = max((window.end - window.start) / PROBES, window.step)
    first = window.start + min(spacing, window.end - window.start)
    counts: dict[str, dict[float, float]] = {}
    for source, expr in probes.items():
        result = client.query_range(expr, first, window.end, spacing)
        counts[source] = {float(t): float(v) for _, values in result.series for t, v in values}
    for at, gpus in sorted(counts["raw"].items()):
        held = counts["recorded"].get(at, 0.0)
        if held < gpus:
            return (
                f"{rules}' series hold {held:g} of the {gpus:g} {things} at {iso_time(at)} "
                "(`nvwatch alerts backfill-rules` writes them for the past)"
            )
    return None
