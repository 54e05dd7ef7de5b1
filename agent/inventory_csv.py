"""An inventory CSV read a record at a time, for agent/inventory.py to check as it goes.

Read whole, a 200,000-row file took 240 MB of lists and dicts before its first bad row
(line 252) was found; read a record at a time, a mistake is found with only the rows
before it in memory. The text is UTF-8 with or without a byte-order mark: Excel's
"CSV UTF-8" writes one, which read as part of the first column's name
('\\ufeffhostname'). Every problem is one ConfigError line naming the file.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
from collections.abc import Iterator
from pathlib import Path

from nvwatch.common.regular_files import open_regular
from nvwatch.common.yaml_safe import ConfigError

# a record: the number of its (last) line in the file, and its fields as written
Record = tuple[int, list[str]]


@contextlib.contextmanager
def csv_records(path: Path, limit: int) -> Iterator[Iterator[Record]]:
    """The records of the CSV file `path` (a regular file of at most `limit` bytes),
    blank lines and `#` comment lines left out: address plans carry notes."""
    try:
        binary = open_regular(path)
    except OSError as exc:
        raise ConfigError(f"cannot read inventory {path}: {exc.strerror or exc}") from exc
    with binary:
        if os.fstat(binary.fileno()).st_size > limit:
            raise ConfigError(f"inventory {path} is larger than the limit of {limit:,} bytes")
        # newline="": the csv module reads the line ends itself (a quoted field may hold one)
        with io.TextIOWrapper(binary, encoding="utf-8-sig", newline="") as text:
            yield _records(path, _DataLines(path, text))


def _records(path: Path, lines: _DataLines) -> Iterator[Record]:
    reader = csv.reader(lines, skipinitialspace=True)
    while True:
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ConfigError(f"{path}:{lines.number}: not valid CSV: {exc}") from None
        yield lines.number, values


class _DataLines:
    """The lines of a text that hold data, and the number of the last one handed out."""

    def __init__(self, path: Path, text: io.TextIOWrapper) -> None:
        self._path = path
        self._text = text
        self.number = 0

    def __iter__(self) -> Iterator[str]:
        number = 0
        try:
            for number, line in enumerate(self._text, 1):
                if "\x00" in line:
                    raise ConfigError(
                        f"inventory {self._path} contains NUL bytes (line {number}): "
                        "is it a binary file?"
                    )
                stripped = line.strip()
                if stripped and not stripped.startswith("#"):
                    self.number = number
                    yield line
        except UnicodeDecodeError:
            raise ConfigError(
                f"inventory {self._path} is not UTF-8 text (after line {number}): "
                "is it a binary file?"
            ) from None
