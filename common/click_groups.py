"""`HelpGroup`: a click group that, called bare, prints its help and exits 0.

Click 8.2 turned a missing subcommand into a usage error (exit 2, help on stderr); the
commands here treat `nvwatch`, `nvwatch simulate`, `nvwatch alerts` as a request for
help, as click 8.1 and most command-line tools do. Parsing it here rather than relying
on `no_args_is_help` keeps the behaviour the same on every click in the pinned range.
"""

from __future__ import annotations

import click


class HelpGroup(click.Group):
    """A group whose bare invocation prints its help to stdout and exits 0."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)


def bad_parameter_line(exc: click.BadParameter) -> str:
    """A bad value as one short line: `--config: cannot read ...`, or with the variable
    it came from, `NVWATCH_CONFIG (--config): ...`, instead of click's "Invalid value for
    '--config' (env var: 'NVWATCH_CONFIG'): ..."."""
    param = exc.param
    if param is None or not param.opts:
        return exc.format_message()
    name = max(param.opts, key=len)  # the long form: --config, not -c
    source = exc.ctx.get_parameter_source(param.name) if exc.ctx and param.name else None
    envvar = param.envvar if isinstance(param.envvar, str) else None
    if source is click.core.ParameterSource.ENVIRONMENT and envvar:
        name = f"{envvar} ({name})"
    return f"{name}: {exc.message}"
