"""A block's `index` file (format version 2): the symbol table, every series with its
labels and chunk references, the postings of every label pair and the tables that find
them. Each section is its length, its bytes and their CRC-32C, as Prometheus writes it.

The label sets arrive in any order; the index holds them sorted, as Prometheus requires,
and a series' number is its 16-byte-aligned offset over 16.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import google_crc32c
import numpy as np
import numpy.typing as npt

from nvwatch.sim.tsdb.xor import uvarint, varint

INDEX_MAGIC = 0xBAAAD700
INDEX_VERSION = 2

Labels = tuple[tuple[str, str], ...]


def crc32c(data: bytes) -> bytes:
    return struct.pack(">I", google_crc32c.value(data))


class _File:
    """An output file that knows its offset and pads to an alignment."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.offset = 0

    def write(self, data: bytes) -> None:
        self.out.write(data)
        self.offset += len(data)

    def align(self, to: int) -> None:
        self.write(b"\0" * ((-self.offset) % to))

    def section(self, body: bytes) -> None:
        """A 4-byte length, the body, its CRC."""
        self.write(struct.pack(">I", len(body)) + body + crc32c(body))


# A series' chunks: each one's first and last sample's time, and where it lies in the
# chunk files (segment << 32 | offset)
ChunkMetas = tuple[Sequence[tuple[int, int]], Sequence[int]]


def write_index(
    path: Path, labels: Sequence[Labels], chunks_of: Callable[[int], ChunkMetas]
) -> None:
    """The index of series `labels[i]`, each with the chunks `chunks_of(i)`."""
    order = sorted(range(len(labels)), key=labels.__getitem__)
    symbols = sorted({text for pairs in labels for pair in pairs for text in pair})
    symbol_of = {text: number for number, text in enumerate(symbols)}
    with path.open("wb") as handle:
        out = _File(handle)
        out.write(struct.pack(">IB", INDEX_MAGIC, INDEX_VERSION))
        toc = [out.offset]
        out.section(_symbol_table(symbols))
        toc.append(out.offset)
        refs = [_write_series(out, labels[i], symbol_of, *chunks_of(i)) for i in order]
        postings = _postings([labels[i] for i in order], refs)
        toc.append(out.offset)
        label_offsets = _write_label_indices(out, postings, symbol_of)
        toc.append(out.offset)
        out.section(_offset_table([((name,), offset) for name, offset in label_offsets]))
        toc.append(out.offset)
        posting_offsets = _write_postings(out, postings)
        toc.append(out.offset)
        out.section(_offset_table(posting_offsets))
        body = struct.pack(">6Q", *toc)
        out.write(body + crc32c(body))


def _symbol_table(symbols: list[str]) -> bytes:
    parts = [struct.pack(">I", len(symbols))]
    for text in symbols:
        raw = text.encode()
        parts.append(uvarint(len(raw)) + raw)
    return b"".join(parts)


def _write_series(
    out: _File,
    labels: Labels,
    symbol_of: dict[str, int],
    chunk_times: Sequence[tuple[int, int]],
    refs: Sequence[int],
) -> int:
    """One series entry at the next 16-byte boundary; its number (offset / 16)."""
    out.align(16)
    number = out.offset // 16
    parts = [uvarint(len(labels))]
    parts.extend(uvarint(symbol_of[name]) + uvarint(symbol_of[value]) for name, value in labels)
    parts.append(uvarint(len(chunk_times)))
    previous_max = previous_ref = 0
    for position, ((mint, maxt), ref) in enumerate(zip(chunk_times, refs, strict=True)):
        if position == 0:
            parts.append(varint(mint) + uvarint(maxt - mint) + uvarint(ref))
        else:
            parts.append(uvarint(mint - previous_max) + uvarint(maxt - mint))
            parts.append(varint(ref - previous_ref))
        previous_max, previous_ref = maxt, ref
    body = b"".join(parts)
    out.write(uvarint(len(body)) + body + crc32c(body))
    return number


def _postings(
    labels: Sequence[Labels], refs: list[int]
) -> dict[tuple[str, str], npt.NDArray[np.uint32]]:
    """Every label pair's series numbers in order, and all of them under ("", "")."""
    found: dict[tuple[str, str], list[int]] = {}
    for pairs, ref in zip(labels, refs, strict=True):
        for pair in pairs:
            found.setdefault(pair, []).append(ref)
    postings = {pair: np.array(numbers, dtype=">u4") for pair, numbers in found.items()}
    postings[("", "")] = np.array(refs, dtype=">u4")
    return dict(sorted(postings.items()))


def _write_label_indices(
    out: _File, postings: dict[tuple[str, str], npt.NDArray[np.uint32]], symbol_of: dict[str, int]
) -> list[tuple[str, int]]:
    """Each label name's values as symbol references (no longer read by Prometheus,
    written as it writes them)."""
    values: dict[str, list[int]] = {}
    for name, value in postings:
        if name:
            values.setdefault(name, []).append(symbol_of[value])
    offsets = []
    for name, refs in values.items():
        out.align(4)
        offsets.append((name, out.offset))
        out.section(struct.pack(">II", 1, len(refs)) + np.array(refs, dtype=">u4").tobytes())
    return offsets


def _write_postings(
    out: _File, postings: dict[tuple[str, str], npt.NDArray[np.uint32]]
) -> list[tuple[tuple[str, ...], int]]:
    offsets: list[tuple[tuple[str, ...], int]] = []
    for pair, numbers in postings.items():
        out.align(4)
        offsets.append((pair, out.offset))
        out.section(struct.pack(">I", len(numbers)) + numbers.tobytes())
    return offsets


def _offset_table(entries: Sequence[tuple[tuple[str, ...], int]]) -> bytes:
    """A label offset or postings offset table: key strings, then the offset."""
    parts = [struct.pack(">I", len(entries))]
    for key, offset in entries:
        parts.append(bytes([len(key)]))
        for text in key:
            raw = text.encode()
            parts.append(uvarint(len(raw)) + raw)
        parts.append(uvarint(offset))
    return b"".join(parts)
