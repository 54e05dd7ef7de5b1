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
