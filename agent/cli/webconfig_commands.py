"""`nvwatch web-config init`: the secure setup (TLS and basic auth) in one step."""

from __future__ import annotations

import click

from nvwatch.agent.cli.options import option
from nvwatch.agent.webconfig import load_web_config
from nvwatch.agent.webconfig_init import (
    DEFAULT_COST,
    DEFAULT_DAYS,
    WebConfigInitError,
    init_web_config,
    scrape_config,
)
from nvwatch.common.click_groups import HelpGroup
from nvwatch.common.outputs import OutputError, output_directory, writing


@click.group("web-config", cls=HelpGroup)
def web_config_group() -> None:
    """The --web-config file: TLS and basic auth for /metrics (exporter-toolkit format)."""


@web_config_group.command("init")
@option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory for web-config.yml, the certificate, its key, the user name and password "
    "(created if missing); copy it to every node as it is.",
)
@option("--user", default="prometheus", show_default=True, help="The basic-auth user.")
@option(
    "--host",
    "hosts",
    multiple=True,
    help="A name or address the certificate also holds (repeatable); it always holds "
    "nvwatch, localhost, 127.0.0.1 and ::1.",
)
@option(
    "--days",
    type=click.IntRange(1, 3650),
    default=DEFAULT_DAYS,
    show_default=True,
    help="Validity of the certificate.",
)
@option(
    "--bcrypt-cost",
    type=click.IntRange(4, 31),
    default=DEFAULT_COST,
    show_default=True,
    help="bcrypt cost of the password's hash.",
)
@option("--force", is_flag=True, help="Replace the files if they exist.")
def init_command(
    out: str, user: str, hosts: tuple[str, ...], days: int, bcrypt_cost: int, force: bool
) -> None:
    """Write a web config with TLS (a self-signed certificate for the fleet) and one
    basic-auth user with a generated password, then the Prometheus scrape settings that
    go with it; `nvwatch serve --web-config` takes the web-config.yml it writes."""
    directory = output_directory(out)
    try:
        with writing():
            written = init_web_config(
                directory, user=user, hosts=hosts, days=days, cost=bcrypt_cost, force=force
            )
    except WebConfigInitError as exc:
        raise OutputError(str(exc)) from None
    load_web_config(written.config)  # what serve would refuse, refused here instead
    click.echo(f"wrote {written.config} (and its certificate, key, user name and password)")
    click.echo("Prometheus, with the certificate and the password file beside its config:")
    click.echo(scrape_config(written), nl=False)
