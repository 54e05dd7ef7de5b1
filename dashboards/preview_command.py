"""`nvwatch dashboards preview` (dashboards/preview.py), beside `dashboards build`.

`build` is defined with the mixin (mixin/commands.py) so that `python -m
nvwatch.dashboards.build` runs the very same command without importing the agent; this
module adds `preview` to that group. It needs Prometheus and matplotlib, so the `nvwatch`
command line loads it only when `dashboards` is asked for.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from nvwatch.common.durations import DurationBounds, parse_duration
from nvwatch.common.outputs import output_directory, writing
from nvwatch.mixin.commands import _mixin_config, dashboards_group

if TYPE_CHECKING:
    from nvwatch.dashboards.preview import PanelResult, Prometheus
    from nvwatch.dashboards.preview_maxima import Beyond

RANGE_BOUNDS = DurationBounds(60.0, 90 * 86400.0)
SCRAPE_BOUNDS = DurationBounds(1.0, 3600.0)


def _variables(pairs: tuple[str, ...]) -> dict[str, str]:
    chosen = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{pair!r}: use NAME=VALUE", param_hint="--var")
        chosen[name.strip()] = value
    return chosen


def _end(text: str | None) -> float | None:
    """--end as unix seconds (the report's grammar); None: now."""
    if text is None:
        return None
    from nvwatch.report.errors import ReportError
    from nvwatch.report.window import parse_time

    try:
        return parse_time(text, now=time.time())
    except ReportError as exc:
        raise click.BadParameter(str(exc), param_hint="--end") from None


@dashboards_group.command("preview")
@click.option("--prometheus", "url", required=True, help="Prometheus base URL to query.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="PNG directory.")
@click.option("--range", "range_", default="1h", show_default=True, help="Time range drawn.")
@click.option("--scrape-interval", default="15s", show_default=True, help="For $__rate_interval.")
@click.option("--var", "variables", multiple=True, metavar="NAME=VALUE",
              help="A template variable's value (default: All, or the first value).")  # fmt: skip
@click.option("--config", "mixin_config", type=click.Path(dir_okay=False), help="Mixin YAML.")
@click.option("--end", "end_text", metavar="TIME",
              help="End of the range drawn: unix seconds or 2026-11-01T00:00:00Z "
              "[default: now].")  # fmt: skip
@click.option("--dashboard", "only", multiple=True, metavar="NAME",
              help="Draw only this dashboard (its file name, with or without .json); "
              "repeat for more [default: every one].")  # fmt: skip
@click.option("--strict", is_flag=True, help="Exit 1 when a panel has no data.")
@click.option("--check-maxima", is_flag=True,
              help="Exit 1 when a panel shows more than its hardware's published maximum "
              "(NVLink, InfiniBand or PCIe bytes/s, power, energy, GPU-hours, a ratio above "
              "100 %).")  # fmt: skip
def dashboards_preview(
    url: str,
    out: str,
    range_: str,
    scrape_interval: str,
    variables: tuple[str, ...],
    mixin_config: str | None,
    end_text: str | None,
    only: tuple[str, ...],
    strict: bool,
    check_maxima: bool,
) -> None:
    """Draw every dashboard's panels (their queries, units, thresholds and layout) from
    PROMETHEUS into one PNG per dashboard in OUT; list the panels with no data."""
    from nvwatch.report import style

    range_s = parse_duration(range_, "range", RANGE_BOUNDS)
    scrape_s = parse_duration(scrape_interval, "scrape interval", SCRAPE_BOUNDS)
    chosen = _variables(variables)
    end = _end(end_text)
    try:
        # before anything imports numpy or matplotlib: without the extra, one line
        style.require()
    except style.PlottingUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    from nvwatch.dashboards.build import build_all
    from nvwatch.dashboards.preview import PreviewError, Prometheus, preview

    dashboards = _chosen(build_all(_mixin_config(mixin_config)), only)
    out_dir = output_directory(out)
    prometheus = Prometheus(url)
    at = time.time() if end is None else end
    try:
        with writing():
            drawn = preview(
                dashboards, prometheus, out_dir, range_s=range_s, scrape_s=scrape_s,
                chosen=chosen, end=at,
            )  # fmt: skip
        beyond = _beyond_maxima(drawn, prometheus, at, range_s, scrape_s) if check_maxima else []
    except PreviewError as exc:
        raise click.ClickException(str(exc)) from exc
    for finding in beyond:
        click.echo(finding.line(), err=True)
    empty = 0
    for name, panels in drawn.items():
        click.echo(str(Path(out) / (Path(name).stem + ".png")))
        for panel in panels:
            if panel.empty:
                empty += 1
                click.echo(f"{name}: no data in panel {panel.title!r}", err=True)
    if (strict and empty) or beyond:
        raise SystemExit(1)


def _chosen(
    dashboards: dict[str, dict[str, Any]], only: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """The dashboards --dashboard names (all of them when it names none)."""
    if not only:
        return dashboards
    wanted = {name if name.endswith(".json") else f"{name}.json" for name in only}
    unknown = sorted(wanted - dashboards.keys())
    if unknown:
        raise click.BadParameter(
            f"{', '.join(unknown)}: not a dashboard; choose from {', '.join(sorted(dashboards))}",
            param_hint="--dashboard",
        )
    return {name: d for name, d in dashboards.items() if name in wanted}


def _beyond_maxima(
    drawn: dict[str, list[PanelResult]],
    prometheus: Prometheus,
    at: float,
    range_s: float,
    scrape_s: float,
) -> list[Beyond]:
    from nvwatch.dashboards.preview import drawn_series
    from nvwatch.dashboards.preview_maxima import Fleet, beyond_maxima

    return beyond_maxima(drawn_series(drawn), Fleet.read(prometheus, at), range_s, scrape_s)
