"""One Prometheus block: chunk segment files, the index and meta.json, in a directory
named by a new ULID, written under a temporary name and renamed when complete (as
Prometheus does, so a reader never opens half a block).

Series arrive in batches, each a list of label sets and their values on the block's
shared grid; each series' chunks are written one after another, as compaction writes
them, so a query reads a series from one place.
"""

from __future__ import annotations

import json
import os
import secrets
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from nvwatch.sim.tsdb.index import Labels, crc32c, write_index
from nvwatch.sim.tsdb.xor import ENCODING_XOR, Grid, encode_chunk, uvarint

CHUNKS_MAGIC = 0x85BD40DD
SEGMENT_BYTES = 512 * 1024 * 1024  # Prometheus' largest chunk segment file
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid(now_ms: int | None = None) -> str:
    """A ULID: 48 bits of milliseconds and 80 random bits in Crockford's base32."""
    millis = int(time.time() * 1000) if now_ms is None else now_ms
    number = (millis << 80) | secrets.randbits(80)
    return "".join(_CROCKFORD[(number >> (5 * k)) & 31] for k in reversed(range(26)))


class _Segments:
    """The chunks/ directory: numbered files of at most SEGMENT_BYTES."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.sequence = -1
        self.handle: BinaryIO | None = None
        self.offset = 0

    def write(self, chunk: bytes) -> int:
        """Writes one chunk's record; its reference (segment << 32 | offset)."""
        record = uvarint(len(chunk)) + bytes([ENCODING_XOR]) + chunk
        record += crc32c(bytes([ENCODING_XOR]) + chunk)
        if self.handle is None or self.offset + len(record) > SEGMENT_BYTES:
            self._cut()
        assert self.handle is not None
        ref = (self.sequence << 32) | self.offset
        self.handle.write(record)
        self.offset += len(record)
        return ref

    def _cut(self) -> None:
        self.close()
        self.sequence += 1
        self.handle = (self.directory / f"{self.sequence + 1:06d}").open("wb")
        self.handle.write(struct.pack(">IB3x", CHUNKS_MAGIC, 1))
        self.offset = 8

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


class BlockWriter:
    """Writes one block of series sampled on `grid` into `parent`."""

    def __init__(self, parent: Path, grid: Grid) -> None:
        self.grid = grid
        self.ulid = new_ulid()
        self.temporary = parent / f"{self.ulid}.tmp"
        (self.temporary / "chunks").mkdir(parents=True)
        self.segments = _Segments(self.temporary / "chunks")
        self.bounds = grid.chunk_bounds()
        self.labels: list[Labels] = []
        self.refs: list[npt.NDArray[np.uint64]] = []

    def add(self, labels: Sequence[Labels], values: npt.NDArray[np.float64]) -> None:
        """Series `labels[i]` with `values[i]`, one value per grid point."""
        if values.shape != (len(labels), self.grid.count):
            raise ValueError(f"values {values.shape} for {len(labels)} series x {self.grid}")
        chunks = [encode_chunk(self.grid, first, end, values) for first, end in self.bounds]
        refs = np.empty((len(labels), len(self.bounds)), dtype=np.uint64)
        for series in range(len(labels)):
            for position, chunk in enumerate(chunks):
                refs[series, position] = self.segments.write(chunk[series])
        self.labels.extend(tuple(sorted(pairs)) for pairs in labels)
        self.refs.append(refs)

    def close(self) -> Path:
        """Writes the index and meta.json; the finished block's directory."""
        self.segments.close()
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("two series of a block have the same labels")
        times = [
            (self.grid.time_ms(first), self.grid.time_ms(end - 1)) for first, end in self.bounds
        ]
        refs = np.concatenate(self.refs) if self.refs else np.empty((0, len(times)), np.uint64)
        write_index(self.temporary / "index", self.labels, times, refs)
        meta = {
            "ulid": self.ulid,
            "minTime": self.grid.start_ms,
            "maxTime": self.grid.time_ms(self.grid.count - 1) + 1,
            "stats": {
                "numSamples": len(self.labels) * self.grid.count,
                "numSeries": len(self.labels),
                "numChunks": len(self.labels) * len(times),
            },
            "compaction": {"level": 1, "sources": [self.ulid]},
            "version": 1,
        }
        (self.temporary / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        final = self.temporary.with_name(self.ulid)
        os.replace(self.temporary, final)
        return final
