"""A credential named by a file: kept out of argv, `ps` and shell history."""

from __future__ import annotations

from pathlib import Path

import click

from nvwatch.common.regular_files import read_regular

_SECRET_BYTES = 64 * 1024  # a password or a bearer token, with room for a long JWT


def read_credential(path: str | None, what: str) -> str | None:
    """The file's text stripped of surrounding whitespace (a trailing newline), or None
    without a path; click.BadParameter, naming `what` (the flag), when it cannot be read."""
    if path is None:
        return None
    try:
        # a FIFO would block the command until something writes it: refused at once
        secret = read_regular(Path(path), _SECRET_BYTES)
        if len(secret) > _SECRET_BYTES:
            raise click.BadParameter(f"{path} is larger than a credential", param_hint=what)
        return secret.decode("utf-8").strip()
    except OSError as err:
        raise click.BadParameter(f"cannot read {path}: {err.strerror}", param_hint=what) from None
    except UnicodeDecodeError:
        raise click.BadParameter(f"{path} is not UTF-8 text", param_hint=what) from None
