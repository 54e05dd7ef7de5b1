"""The one way the agent opens a file it is given by path: a regular file, or an OSError.

open() of a FIFO that no process writes to blocks until one does, so `--config`,
`--bmc-config` or `inventory --in` naming a FIFO hung the start-up forever; a device
(/dev/zero, /dev/urandom) reads without end and may act on being opened (a tape
rewinds). A config file is a page of text on a disk: anything else is refused, before
it is opened where the path says so and again, without blocking, on what was opened (the
path may change in between).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

# O_NONBLOCK: opening a FIFO returns at once; O_NOCTTY: a terminal never becomes ours
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str | None:
    """What a file of `st_mode` is, in words ("a FIFO (named pipe)"), for a refusal; None
    for a kind without a name here."""
    return next((name for test, name in _KINDS if test(mode)), None)


class NotRegularFile(OSError):
    """`path` is no regular file; `strerror` says what it is, as OSError's would."""

    def __init__(self, path: Path, mode: int) -> None:
        what = file_kind(mode) or "not a file"
        code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
        super().__init__(code, f"{what}, not a regular file", str(path))


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading in binary; OSError (NotRegularFile for a FIFO, device,
    socket or directory) otherwise, at once: this never waits for a writer."""
    _check(path, os.stat(path).st_mode)  # a device is refused before it is opened
    fd = os.open(path, _FLAGS)
    try:
        _check(path, os.fstat(fd).st_mode)
        os.set_blocking(fd, True)  # no effect on a regular file's reads; said plainly
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int) -> bytes:
    """At most `limit + 1` bytes of the regular file `path`: one more than a caller
    allows tells it the file is too large without reading the rest."""
    with open_regular(path) as file:
        return file.read(limit + 1)


def regular_size(path: Path) -> int:
    """The size of the regular file `path`, for a reader that opens it itself (OpenSSL)."""
    with open_regular(path) as file:
        return os.fstat(file.fileno()).st_size


def _check(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, mode)
