"""One Prometheus block: chunk segment files, the index and meta.json, in a directory
named by a new ULID, written under a temporary name and renamed when complete (as
Prometheus does, so a reader never opens half a block).

Series arrive in batches, each a list of label sets and their values on the block's
shared grid; each series' chunks are written one after another, as compaction writes
them, so a query reads a series from one place. A series that exists for part of the
grid only (a job's allocation) is added with its span, and ends with the staleness
marker Prometheus writes when a scraped series disappears.
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

from nvwatch.sim.tsdb.index import ChunkMetas, Labels, crc32c, write_index
from nvwatch.sim.tsdb.xor import ENCODING_XOR, Grid, encode_chunk, uvarint

CHUNKS_MAGIC = 0x85BD40DD
# the NaN Prometheus appends when a series leaves a scrape: queries then stop seeing it
# at once, not after the 5-minute lookback
STALE_NAN = np.array([0x7FF0000000000002], dtype=np.uint64).view(np.float64)[0]
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
        self.spans: list[tuple[Labels, ChunkMetas]] = []

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

    def add_span(self, labels: Labels, first: int, end: int, value: float = 1.0) -> None:
        """A series of `value` at grid points [first, end), then stale at `end` when the
        grid goes on."""
        if not 0 <= first < end <= self.grid.count:
            raise ValueError(f"span {first}..{end} outside {self.grid}")
        row = np.full((1, self.grid.count), value)
        last = min(end + 1, self.grid.count)
        row[0, end:last] = STALE_NAN
        times, refs = [], []
        for low, high in self.bounds:
            low, high = max(low, first), min(high, last)
            if low < high:
                refs.append(self.segments.write(encode_chunk(self.grid, low, high, row)[0]))
                times.append((self.grid.time_ms(low), self.grid.time_ms(high - 1)))
        self.spans.append((tuple(sorted(labels)), (times, refs)))

    @property
    def series(self) -> int:
        return len(self.labels) + len(self.spans)

    def close(self) -> Path:
        """Writes the index and meta.json; the finished block's directory."""
        self.segments.close()
        labels = self.labels + [pairs for pairs, _ in self.spans]
        if len(set(labels)) != len(labels):
            raise ValueError("two series of a block have the same labels")
        times = [
            (self.grid.time_ms(first), self.grid.time_ms(end - 1)) for first, end in self.bounds
        ]
        refs = np.concatenate(self.refs) if self.refs else np.empty((0, len(times)), np.uint64)
        whole = len(self.labels)

        def chunks_of(series: int) -> ChunkMetas:
            if series < whole:
                return times, refs[series].tolist()
            return self.spans[series - whole][1]

        write_index(self.temporary / "index", labels, chunks_of)
        span_samples = sum(int(np.sum(np.diff(np.array(t), axis=1) // self.grid.step_ms + 1))
                           for _, (t, _r) in self.spans)  # fmt: skip
        meta = {
            "ulid": self.ulid,
            "minTime": self.grid.start_ms,
            "maxTime": self.grid.time_ms(self.grid.count - 1) + 1,
            "stats": {
                "numSamples": whole * self.grid.count + span_samples,
                "numSeries": len(labels),
                "numChunks": whole * len(times) + sum(len(r) for _, (_t, r) in self.spans),
            },
            "compaction": {"level": 1, "sources": [self.ulid]},
            "version": 1,
        }
        (self.temporary / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        final = self.temporary.with_name(self.ulid)
        os.replace(self.temporary, final)
        return final
