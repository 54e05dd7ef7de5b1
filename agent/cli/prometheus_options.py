"""The flags of a command that queries a (possibly secured) Prometheus, and the
Connection they make: `report` and `job` take the same ones."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from nvwatch.agent.cli.credentials import read_credential
from nvwatch.agent.cli.options import option
from nvwatch.common.http_connection import Connection

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class PrometheusFlags:
    """What the shared flags say: how to reach a (possibly secured) Prometheus."""

    basic_auth_user: str | None
    basic_auth_password_file: str | None
    bearer_token_file: str | None
    ca_file: str | None
    insecure_skip_verify: bool
    timeout: float

    def connection(self, url: str) -> Connection:
        """The Connection to `url`; a password without a user is a usage error."""
        password = read_credential(self.basic_auth_password_file, "--basic-auth-password-file")
        if password is not None and self.basic_auth_user is None:
            raise click.UsageError("--basic-auth-password-file needs --basic-auth-user")
        return Connection(
            url=url,
            url_flag="--prometheus",
            basic_auth=(self.basic_auth_user, password or "") if self.basic_auth_user else None,
            bearer_token=read_credential(self.bearer_token_file, "--bearer-token-file"),
            ca_file=Path(self.ca_file) if self.ca_file else None,
            insecure_tls=self.insecure_skip_verify,
            timeout_seconds=self.timeout,
        )


_FLAG_NAMES = tuple(f.name for f in fields(PrometheusFlags))


def prometheus_client_options(timeout_s: float) -> Callable[[F], F]:
    """--basic-auth-user, --basic-auth-password-file, --bearer-token-file, --ca-file,
    --insecure-skip-verify and --timeout (default `timeout_s`), handed to the command as
    one `prometheus: PrometheusFlags` argument."""
    flags = (
        option("--basic-auth-user", default=None, help="User for HTTP basic auth."),
        option(
            "--basic-auth-password-file", default=None, help="File holding the basic auth password."
        ),
        option("--bearer-token-file", default=None, help="File holding a bearer token."),
        option(
            "--ca-file", type=click.Path(dir_okay=False, exists=True), help="CA bundle for https."
        ),
        option(
            "--insecure-skip-verify", is_flag=True, help="Do not verify the server's certificate."
        ),
        option(
            "--timeout", default=timeout_s, show_default=True, help="Seconds to wait for one query."
        ),
    )

    def apply(command: F) -> F:
        # wraps() carries the options declared below this decorator (__click_params__)
        @functools.wraps(command)
        def with_flags(*args: Any, **kwargs: Any) -> Any:
            given = PrometheusFlags(**{name: kwargs.pop(name) for name in _FLAG_NAMES})
            return command(*args, prometheus=given, **kwargs)

        taking: Any = with_flags
        for flag in reversed(flags):
            taking = flag(taking)
        return cast(F, taking)

    return apply
