"""read_attribute, the one sysfs file reader: regular files only, and it never blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvwatch.agent.sources.sysfs_read import NotARegularFile, read_attribute

from .sysfs_tree import fifo_in_place, returns_within


def test_read_attribute_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    with fifo_in_place(tmp_path / "counter") as fifo, pytest.raises(NotARegularFile, match="FIFO"):
        returns_within(5.0, lambda: read_attribute(str(fifo)))


def test_read_attribute_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(NotARegularFile, match="directory"):
        read_attribute(str(tmp_path))


def test_read_attribute_reads_at_most_its_limit(tmp_path: Path) -> None:
    (tmp_path / "attribute").write_bytes(b"x" * 10_000)
    assert read_attribute(str(tmp_path / "attribute")) == b"x" * 4096
    assert read_attribute(str(tmp_path / "attribute"), 8) == b"x" * 8


def test_read_attribute_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_attribute(str(tmp_path / "nothing"))
