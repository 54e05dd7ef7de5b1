"""`nvwatch web-config init`: the secure setup (TLS and basic auth) in one step; `get`:
its client side, for a probe that must verify the agent and send the password."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from nvwatch.agent.cli.credentials import read_credential
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


@web_config_group.command("get")
@click.argument("url")
@option(
    "--ca-file",
    type=click.Path(dir_okay=False),
    help="CA certificate to verify the agent against (init's nvwatch.crt); the system's "
    "CAs without it.",
)
@option("--basic-auth-user", default=None, help="The basic-auth user.")
@option(
    "--basic-auth-user-file",
    default=None,
    help="File holding the basic-auth user (init's prometheus.username).",
)
@option(
    "--basic-auth-password-file",
    default=None,
    help="File holding the basic-auth password (init's prometheus.password).",
)
@option(
    "--timeout",
    type=click.FloatRange(0.1, 300),
    default=5.0,
    show_default=True,
    help="Seconds to wait for the answer.",
)
def get_command(
    url: str,
    ca_file: str | None,
    basic_auth_user: str | None,
    basic_auth_user_file: str | None,
    basic_auth_password_file: str | None,
    timeout: float,
) -> None:
    """GET URL as Prometheus scrapes the agent (TLS verified against --ca-file, basic
    auth from files) and exit 0 on 200, else 1 with one line: a liveness probe that can
    verify and authenticate, e.g. `nvwatch web-config get https://127.0.0.1:9477/livez`."""
    from nvwatch.agent.webconfig_get import Unreachable, get
    from nvwatch.common.http_connection import Connection, ConnectionSetupError

    if basic_auth_user is not None and basic_auth_user_file is not None:
        raise click.UsageError("give --basic-auth-user or --basic-auth-user-file, not both")
    user = basic_auth_user or read_credential(basic_auth_user_file, "--basic-auth-user-file")
    password = read_credential(basic_auth_password_file, "--basic-auth-password-file")
    if password is not None and not user:
        raise click.UsageError("--basic-auth-password-file needs a --basic-auth-user(-file)")
    try:
        connection = Connection(
            url=url,
            basic_auth=(user, password or "") if user else None,
            ca_file=Path(ca_file) if ca_file else None,
            timeout_seconds=timeout,
        )
        answer = get(connection)
    except ConnectionSetupError as exc:  # the URL or the CA file: bad input
        raise click.ClickException(str(exc)) from None
    except Unreachable as exc:
        _failed(str(exc))
    if answer.status != 200:
        _failed(answer.describe(url))
    click.echo(answer.describe(url))


def _failed(line: str) -> NoReturn:
    # exit 1 as doctor's "down": the answer is the finding, not a mistake of the caller
    click.echo(f"nvwatch: {line}", err=True)
    sys.exit(1)
