"""Prometheus' XOR chunks (Gorilla compression), encoded for many series at once.

A chunk holds one series' samples: a 16-bit count, the first timestamp as a varint,
the first value's 64 bits, the second timestamp's delta as a uvarint, then per sample a
delta-of-delta of timestamps and the XOR of the value with the one before, in variable
bit widths, padded to a byte. Every series here is sampled on one shared grid of
timestamps (a scrape interval), so each delta-of-delta is 0, one bit, and the bytes
before the first value are the same for every series of a chunk.

Values are encoded a whole batch of series at a time: numpy computes every XOR, its
leading and trailing zeros, and packs the variable-width fields into bytes. Where the
Go encoder reuses the previous sample's window of meaningful bits (control bits `10`) it
would save up to 13 bits; this encoder always writes the window (`11`, which every
decoder reads), so a chunk of a changing series is a few per cent larger than
Prometheus' own, and a constant series' chunk is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SAMPLES_PER_CHUNK = 120  # where Prometheus' head cuts a chunk
ENCODING_XOR = 1  # the chunk encoding byte (tsdb/chunkenc)
_LEADING_MAX = 31  # five bits of leading zeros
_BITS = np.arange(64, dtype=np.uint8)

Bits = npt.NDArray[np.uint64]


def uvarint(number: int) -> bytes:
    """Go's binary.PutUvarint: seven bits per byte, low first, high bit set but last."""
    if number < 0:
        raise ValueError(f"uvarint of a negative number {number}")
    out = bytearray()
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def varint(number: int) -> bytes:
    """Go's binary.PutVarint: the zig-zag of a signed number as a uvarint."""
    return uvarint((number << 1) ^ (number >> 63) if number < 0 else number << 1)


@dataclass(frozen=True)
class Grid:
    """The shared timestamps: `count` samples `step_ms` apart from `start_ms`."""

    start_ms: int
    step_ms: int
    count: int

    def __post_init__(self) -> None:
        if self.step_ms <= 0 or self.count <= 0:
            raise ValueError(f"a grid needs a positive step and count, not {self}")

    def chunk_bounds(self) -> list[tuple[int, int]]:
        """Each chunk's first and last sample index, end exclusive."""
        return [
            (first, min(first + SAMPLES_PER_CHUNK, self.count))
            for first in range(0, self.count, SAMPLES_PER_CHUNK)
        ]

    def time_ms(self, index: int) -> int:
        return self.start_ms + index * self.step_ms


def encode_chunk(grid: Grid, first: int, end: int, values: npt.NDArray[np.float64]) -> list[bytes]:
    """The XOR chunk of samples [first, end) of each row of `values` (series x grid)."""
    count = end - first
    head = count.to_bytes(2, "big") + varint(grid.time_ms(first))
    raw = np.ascontiguousarray(values[:, first:end], dtype=np.float64).view(np.uint64)
    fields, widths = _fields(raw, uvarint(grid.step_ms) if count > 1 else b"")
    return [head + body for body in _pack(fields, widths)]


def _fields(raw: Bits, step: bytes) -> tuple[Bits, npt.NDArray[np.uint8]]:
    """Every series' bit fields after the chunk's head, in order, with their widths:
    the first value; the second timestamp's delta; per later sample a control field
    (a delta-of-delta bit from the third sample on, then the XOR's control and window)
    and the XOR's meaningful bits; padding to a byte."""
    series, count = raw.shape
    xor = raw[:, 1:] ^ raw[:, :-1]
    control, control_width, meaningful, meaningful_width = _xor_fields(xor)
    # a delta-of-delta of 0 is one zero bit before the value's field, from sample 3 on
    control_width[:, 1:] += 1
    columns = 2 + 2 * (count - 1) + 1
    fields = np.zeros((series, columns), dtype=np.uint64)
    widths = np.zeros((series, columns), dtype=np.uint8)
    fields[:, 0], widths[:, 0] = raw[:, 0], 64
    if step:
        fields[:, 1], widths[:, 1] = int.from_bytes(step, "big"), 8 * len(step)
    fields[:, 2:-1:2], widths[:, 2:-1:2] = control, control_width
    fields[:, 3:-1:2], widths[:, 3:-1:2] = meaningful, meaningful_width
    used = widths.sum(axis=1, dtype=np.int64)
    widths[:, -1] = (-used) % 8
    return fields, widths


def _xor_fields(
    xor: Bits,
) -> tuple[Bits, npt.NDArray[np.uint8], Bits, npt.NDArray[np.uint8]]:
    """Per XOR: `0` when the value repeats; else `11`, 5 bits of leading zeros, 6 of
    meaningful bits (64 written as 0), then the meaningful bits themselves."""
    changed = xor != 0
    leading = np.minimum(_leading_zeros(xor), _LEADING_MAX)
    trailing = _trailing_zeros(xor)
    meaningful_width = np.where(changed, 64 - leading - trailing, 0).astype(np.uint8)
    control = (
        (np.uint64(0b11) << np.uint64(11))
        | (leading.astype(np.uint64) << np.uint64(6))
        | (meaningful_width.astype(np.uint64) & np.uint64(63))
    )
    control = np.where(changed, control, np.uint64(0))
    control_width = np.where(changed, 13, 1).astype(np.uint8)
    meaningful = np.where(changed, xor >> trailing.astype(np.uint64), np.uint64(0))
    return control, control_width, meaningful, meaningful_width


def _highest_bit(word: Bits) -> npt.NDArray[np.int64]:
    """Index of each nonzero word's highest set bit. A float64 holds the word rounded,
    which can round up past it by one power of two: corrected where it did."""
    _, exponent = np.frexp(word.astype(np.float64))
    bit = np.clip(exponent.astype(np.int64) - 1, 0, 63)
    over: npt.NDArray[np.int64] = ((word >> bit.astype(np.uint64)) == 0).astype(np.int64)
    highest: npt.NDArray[np.int64] = bit - over
    return highest


def _leading_zeros(word: Bits) -> npt.NDArray[np.int64]:
    return np.where(word == 0, 64, 63 - _highest_bit(word))


def _trailing_zeros(word: Bits) -> npt.NDArray[np.int64]:
    lowest = word & (~word + np.uint64(1))  # a power of two: exact as a float64
    return np.where(word == 0, 64, _highest_bit(lowest))


def _pack(fields: Bits, widths: npt.NDArray[np.uint8]) -> list[bytes]:
    """Each row's fields, their low `width` bits most significant first, as bytes (each
    row's widths add up to whole bytes)."""
    series, columns = fields.shape
    bits = np.unpackbits(fields.astype(">u8").view(np.uint8).reshape(series, columns, 8), axis=2)
    keep = _BITS[None, None, :] >= (64 - widths)[:, :, None]
    packed = np.packbits(bits[keep]).tobytes()
    ends = np.cumsum(widths.sum(axis=1, dtype=np.int64) // 8)
    starts = np.concatenate(([0], ends[:-1]))
    return [packed[start:end] for start, end in zip(starts.tolist(), ends.tolist(), strict=True)]
