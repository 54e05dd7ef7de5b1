"""`nvwatch dashboards build` and `nvwatch alerts build`: the mixin, as files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from agent.cli import cli
from agent.cli.options import option

if TYPE_CHECKING:
    from mixin.config import MixinConfig


def _mixin_config(path: str | None) -> MixinConfig:
    from mixin.config import load

    try:
        return load(Path(path) if path else None)
    except (OSError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--config") from exc


_config_option = option(
    "--config",
    "mixin_config",
    type=click.Path(dir_okay=False),
    envvar="NVWATCH_MIXIN_CONFIG",
    help="Mixin YAML overriding selectors and thresholds (see mixin/config.py).",
)
_out_option = option(
    "--out", required=True, type=click.Path(file_okay=False), help="Directory to write into."
)


@cli.group("dashboards")
def dashboards_group() -> None:
    """Grafana dashboards generated from the mixin config."""


@dashboards_group.command("build")
@_out_option
@_config_option
def dashboards_build(out: str, mixin_config: str | None) -> None:
    """Write the dashboards as Grafana JSON into OUT."""
    from dashboards.build import write

    for path in write(Path(out), _mixin_config(mixin_config)):
        click.echo(str(path))


@cli.group("alerts")
def alerts_group() -> None:
    """Prometheus alert/recording rules and Grafana alert rules from the mixin config."""


@alerts_group.command("build")
@_out_option
@_config_option
def alerts_build(out: str, mixin_config: str | None) -> None:
    """Write Prometheus rule files and Grafana alert provisioning into OUT."""
    from alerts.build import write

    for path in write(Path(out), _mixin_config(mixin_config)):
        click.echo(str(path))
