"""Read one sysfs attribute without ever blocking: the one file reader of every source.

A sysfs attribute is a regular file whose read returns at once. Anything else found where
an attribute should be (a FIFO, a character device, a directory) is not an attribute,
and opening a FIFO for reading blocks until a writer comes along: one such file left in
the tree (a mistake, a test harness, a hostile container mount) would wedge the worker
thread that opened it, and with it every value of its source, forever. So the file is
opened non-blocking and checked with fstat before anything is read; a non-regular file
costs its one value, like garbage does.
"""

from __future__ import annotations

import os
import stat

from nvwatch.common.regular_files import file_kind

# A page is the most sysfs ever returns for one attribute (PAGE_SIZE on x86 and arm64).
PAGE = 4096

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


class NotARegularFile(OSError):
    """The path is a FIFO, device, socket or directory, not a sysfs attribute."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path}: {kind}, not a regular file")
        self.path = path
        self.kind = kind


def read_attribute(path: str, limit: int = PAGE) -> bytes:
    """At most `limit` bytes of the regular file at `path`.

    Raises OSError as os.open and os.read do (FileNotFoundError, PermissionError, EIO
    from a failed PMA query, ...) and NotARegularFile for anything that is not a regular
    file; never blocks on one.
    """
    fd = os.open(path, _FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(path, _kind(mode))
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    return file_kind(mode) or "a special file"
