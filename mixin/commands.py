"""`nvwatch dashboards build` and `nvwatch alerts build`: the one build path of the mixin.

`agent/cli` registers these groups on `nvwatch`; `python -m nvwatch.dashboards.build` and
`python -m nvwatch.alerts.build` run the same commands, and tests/mixin/test_generated.py
compares the committed files with what they write. They live here rather than in
agent/cli so that building the mixin needs the mixin only, not the whole agent.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from nvwatch.common.click_groups import HelpGroup
from nvwatch.common.outputs import output_directory, output_file, writing
from nvwatch.mixin.config import MixinConfig, load

# The command for each committed generated file, named by the staleness test.
REFRESH_ALERTS = "nvwatch alerts build --out alerts/generated"
REFRESH_DASHBOARDS = "nvwatch dashboards build --out dashboards/generated"

F = TypeVar("F", bound=Callable[..., Any])


def _option(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """click.option with the `NVWATCH_<FLAG>` environment variable every nvwatch flag has."""
    long_name = next(d for d in decls if d.startswith("--"))[2:]
    attrs.setdefault("envvar", "NVWATCH_" + long_name.upper().replace("-", "_"))
    attrs.setdefault("show_envvar", True)
    return click.option(*decls, **attrs)


def _mixin_config(path: str | None) -> MixinConfig:
    try:
        return load(Path(path) if path else None)
    except (OSError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--config") from exc


_config_option = _option(
    "--config",
    "mixin_config",
    type=click.Path(dir_okay=False),
    envvar="NVWATCH_MIXIN_CONFIG",
    help="Mixin config, a YAML file of the mixin/config.py fields to override (selectors, "
    "thresholds, durations, node classes, production: true); example: "
    "deploy/mixin.example.yaml.",
)
_out_option = _option(
    "--out", required=True, type=click.Path(file_okay=False), help="Directory to write into."
)


_kubernetes_option = _option(
    "--kubernetes",
    type=click.Path(file_okay=False),
    help="Directory for the Kubernetes manifest [default: deploy/kubernetes of the source "
    "checkout nvwatch runs from; none when installed without one].",
)
_no_kubernetes_option = _option("--no-kubernetes", is_flag=True, help="No Kubernetes manifest.")


def _kubernetes_dir(kubernetes: str | None, no_kubernetes: bool) -> Path | None:
    from nvwatch.alerts.kubernetes import default_dir

    if no_kubernetes and kubernetes:
        raise click.UsageError("--kubernetes and --no-kubernetes contradict each other")
    return None if no_kubernetes else Path(kubernetes) if kubernetes else default_dir()


@click.group("dashboards", cls=HelpGroup)
def dashboards_group() -> None:
    """Grafana dashboards generated from the mixin config."""


@dashboards_group.command("build")
@_out_option
@_config_option
@_kubernetes_option
@_no_kubernetes_option
def dashboards_build(
    out: str, mixin_config: str | None, kubernetes: str | None, no_kubernetes: bool
) -> None:
    """Write the dashboards as Grafana JSON into OUT, and as Grafana-sidecar ConfigMaps
    (nvwatch-dashboards.yaml) into the Kubernetes directory."""
    from nvwatch.dashboards.build import write, write_kubernetes

    target = _kubernetes_dir(kubernetes, no_kubernetes)
    config = _mixin_config(mixin_config)
    out_dir = output_directory(out)
    if target is not None:
        output_directory(target, "--kubernetes")
    with writing():
        written = write(out_dir, config)
        if target is not None:
            written.append(write_kubernetes(target, config))
    for path in written:
        click.echo(str(path))


@click.group("alerts", cls=HelpGroup)
def alerts_group() -> None:
    """Prometheus alert/recording rules and Grafana alert rules from the mixin config."""


@alerts_group.command("build")
@_out_option
@_config_option
@_option(
    "--docs",
    type=click.Path(dir_okay=False),
    help="Where to write the alert index, with the runbooks in runbooks/ beside it "
    "[default: docs/alerts.md of the source checkout nvwatch runs from; none when "
    "installed without one].",
)
@_option("--no-docs", is_flag=True, help="No runbooks.")
@_kubernetes_option
@_no_kubernetes_option
def alerts_build(
    out: str,
    mixin_config: str | None,
    docs: str | None,
    no_docs: bool,
    kubernetes: str | None,
    no_kubernetes: bool,
) -> None:
    """Write Prometheus rule files and Grafana alert provisioning into OUT, the alert
    index (docs/alerts.md) with the runbooks their runbook_url names (docs/runbooks/),
    and the same rules as a prometheus-operator PrometheusRule (nvwatch-rules.yaml) into
    the Kubernetes directory."""
    from nvwatch.alerts.build import build, default_docs

    if no_docs and docs:
        raise click.UsageError("--docs and --no-docs contradict each other")
    target = None if no_docs else Path(docs) if docs else default_docs()
    manifests = _kubernetes_dir(kubernetes, no_kubernetes)
    config = _mixin_config(mixin_config)
    out_dir = output_directory(out)
    if target is not None:
        output_file(target, "--docs")
    if manifests is not None:
        output_directory(manifests, "--kubernetes")
    with writing():
        written = build(out_dir, config, target, manifests)
    for path in written:
        click.echo(str(path))


@alerts_group.command("backfill-rules")
@_option(
    "--step",
    required=True,
    metavar="DURATION",
    help="Time between the history's samples (simulate history's --step).",
)
@_option("--out", required=True, type=click.Path(dir_okay=False), help="Rule file to write.")
@_config_option
def alerts_backfill_rules(step: str, out: str, mixin_config: str | None) -> None:
    """Write the recording rules for `promtool tsdb create-blocks-from rules` over a
    history sampled every STEP, so a backfilled history has the recorded series the
    dashboards' capacity panels read: each rule stands alone (promtool cannot read what
    another rule records), every group is evaluated once per STEP and every rate window
    spans at least two steps."""
    from nvwatch.alerts.backfill import backfill_rules
    from nvwatch.alerts.render import dump_yaml
    from nvwatch.common.durations import DurationBounds, parse_duration

    step_s = parse_duration(step, "step", DurationBounds(1.0, 86400.0))
    text = dump_yaml(backfill_rules(_mixin_config(mixin_config), step_s))
    target = output_file(out)
    with writing():
        target.write_text(text, encoding="utf-8")
    click.echo(str(target))


@alerts_group.command("evaluate-stragglers")
@click.argument("corpus", type=click.Path(file_okay=False))
@_option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: Markdown tables and the goals; json: one object (precision, recall, f1, "
    "false_alerts_on_healthy, median_detect_seconds, per cause and band, the goals).",
)
@_option(
    "--check",
    is_flag=True,
    help="Exit 1 when a goal is missed (F1, recall of large slowdowns, alerts on healthy "
    "episodes, median time to detect).",
)
@_option(
    "--workdir",
    type=click.Path(file_okay=False),
    help="Where the TSDB and Prometheus' files go [default: a temporary directory, removed after].",
)
@_config_option
def alerts_evaluate_stragglers(
    corpus: str, output_format: str, check: bool, workdir: str | None, mixin_config: str | None
) -> None:
    """Run the straggler rules over the labelled CORPUS (`nvwatch simulate stragglers`)
    in a real Prometheus (prometheus and promtool on PATH, on 127.0.0.1) and print their
    precision, recall, F1 and time to detect, per cause and per slowdown band.

    The corpus is backfilled, the recording rules are evaluated over it level by level
    (promtool's rule backfill), and the alert's expression over each episode at the
    rules' evaluation interval, with its `for:`. The corpus's pipeline-parallel marker is
    applied unless the mixin config sets one. Progress goes to stderr."""
    import json
    import tempfile

    from nvwatch.alerts.stragglers.corpus import load_corpus
    from nvwatch.alerts.stragglers.evaluate import corpus_config, evaluate
    from nvwatch.alerts.stragglers.goals import as_json, goals, report_lines
    from nvwatch.alerts.stragglers.server import EvaluationError

    cfg = _mixin_config(mixin_config)
    work = output_directory(workdir, "--workdir") if workdir else None
    try:
        loaded = load_corpus(Path(corpus))
        with tempfile.TemporaryDirectory(prefix="nvwatch-stragglers-", dir=work) as scratch:
            score = evaluate(
                loaded,
                corpus_config(cfg, loaded),
                Path(scratch),
                lambda line: click.echo(line, err=True),
            )
    except EvaluationError as exc:
        raise click.ClickException(str(exc)) from exc
    if output_format == "json":
        click.echo(json.dumps(as_json(score), indent=2))
    else:
        click.echo("\n".join(report_lines(score)))
    if check and not all(goal.met for goal in goals(score)):
        raise SystemExit(1)
