"""--sources: its help and default read from the sources' declarations when shown or
used (agent/sources/declaration.py), so a source registered after the options were
defined is listed, and polled by default when it is declared so."""

from __future__ import annotations

from typing import Any

import click

from nvwatch.agent.sources.declaration import declarations, default_sources


def sources_help() -> str:
    """--sources' help: the sources it selects, as declared, with each one's note."""
    chosen = [d for d in declarations() if d.selectable]
    notes = "".join(f" ({d.name}: {d.note})" for d in chosen if d.note)
    return f"Comma-separated sources to poll, of {', '.join(d.name for d in chosen)}{notes}."


class _DeclaredDefault:
    """--sources' default, read whenever click asks (to parse, or to show it: click
    prints a default that is no plain function as its text)."""

    def __call__(self) -> str:
        return ",".join(default_sources()) or "none"  # AgentConfig's, as a flag takes it

    def __str__(self) -> str:
        return self()


class SourcesOption(click.Option):
    """--sources, as the sources are declared when it is shown or read."""

    def __init__(self, *decls: Any, **attrs: Any) -> None:
        super().__init__(*decls, **{**attrs, "default": _DeclaredDefault(), "help": sources_help()})

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = sources_help()
        return super().get_help_record(ctx)
