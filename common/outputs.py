"""Where a command writes (`--out`, `--docs`, `--kubernetes`): checked before the work.

A directory must take a new file (or, if missing, the nearest directory above it, where
the writer will create it); a file's directory the same, and the file must not be a
directory. Anything else is one line naming the flag, the path and the reason
(`click.ClickException`: `nvwatch` prints it as `nvwatch: error: ...` and exits 2),
before a report queries for minutes or a history is simulated for nothing. `writing()`
turns an error while writing a file (a disk that fills, a directory removed meanwhile)
into the same line.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click


class OutputError(click.ClickException):
    """A path a command was asked to write cannot be written; the message says why."""

    exit_code = 2  # bad input, also where click prints it (python -m nvwatch.alerts.build)


def _reason(exc: OSError) -> str:
    return exc.strerror or exc.__class__.__name__


def output_directory(path: str | Path, option: str = "--out") -> Path:
    """`path`, a directory this process can write, or one it can create."""
    target = Path(path)
    _writable_directory(target, f"{option} {target}")
    return target


def output_file(path: str | Path, option: str = "--out") -> Path:
    """`path` as a file to (re)write: not a directory, in a directory this process can
    write or create."""
    target = Path(path)
    if target.is_dir():
        raise OutputError(f"cannot write to {option} {target}: it is a directory")
    _writable_directory(target.parent, f"{option} {target}")
    return target


def _writable_directory(directory: Path, where: str) -> None:
    """`directory` can take a new file, or, if missing, the nearest directory above it
    can take it (the writer creates it): checked by creating a file there, not with
    os.access(), which root passes on a read-only mount. Nothing is left behind."""
    existing = directory
    while not (existing.exists() or existing.is_symlink()) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(f"cannot write to {where}: {existing} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing, prefix=".nvwatch-write-check-"):
            pass
    except OSError as exc:
        missing = "" if existing == directory else f"cannot create {directory}: "
        raise OutputError(f"cannot write to {where}: {missing}{_reason(exc)}") from None


@contextlib.contextmanager
def writing(option: str = "--out") -> Iterator[None]:
    """An OSError on a file while writing outputs becomes one line naming the file; one
    that names no file (a socket's) is not about the outputs and goes on up."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise
        where = os.fsdecode(exc.filename)
        raise OutputError(f"cannot write {where} ({option}): {_reason(exc)}") from None
