"""Blocks written by sim/tsdb read back sample for sample by Prometheus' own promtool.

The values are chosen for the XOR encoding's edge cases: a constant, a counter, random
floats with every mantissa bit in play, XORs with more than 31 leading zeros (clamped to
31), with all 64 bits meaningful (written as 0 in six bits), infinities; chunks of 120
samples, a last chunk of one sample, and a block of a single sample.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nvwatch.sim.tsdb.block import BlockWriter, new_ulid
from nvwatch.sim.tsdb.xor import Grid, uvarint, varint
from tests.conftest import require_tool

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
_LINE = re.compile(r"^\{(.*)\} (\S+) (-?\d+)$")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _edge_values(count: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    steps = np.arange(count, dtype=np.float64)
    sign_and_last_bit = np.where(
        steps % 2 == 0, 1.0, -np.nextafter(1.0, 2.0)
    )  # XOR 0x8000000000000001: leading 0, trailing 0, 64 meaningful bits
    return {
        "constant": np.full(count, 42.5),
        "counter": np.cumsum(rng.integers(0, 10**9, count)).astype(np.float64),
        "random": rng.standard_normal(count) * 1e6,
        "tiny_steps": 1.0 + steps * 2.0**-50,  # XORs with over 31 leading zeros
        "sign_and_last_bit": sign_and_last_bit,
        "infinite": np.where(steps % 3 == 0, math.inf, -math.inf),
        "zero_then_one": (steps > count // 2).astype(np.float64),
    }


def _dump(promtool: str, data: Path) -> dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]:
    """Every sample promtool reads from `data`, by label set (it opens the directory as
    a Prometheus data directory, which has a write-ahead log: an empty one here)."""
    (data / "wal").mkdir(exist_ok=True)
    text = subprocess.run(
        [promtool, "tsdb", "dump", str(data)], capture_output=True, text=True, check=True,
        timeout=120,
    ).stdout  # fmt: skip
    found: dict[tuple[tuple[str, str], ...], list[tuple[int, float]]] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        assert match, line
        labels = tuple(sorted(_PAIR.findall(match.group(1))))
        found.setdefault(labels, []).append((int(match.group(3)), float(match.group(2))))
    return found


@pytest.mark.parametrize("count", [1, 121, 250])
def test_promtool_reads_every_sample_back(tmp_path: Path, count: int) -> None:
    promtool = require_tool("promtool")
    rng = np.random.default_rng(count)
    grid = Grid(START_MS, 15_000, count)
    values = _edge_values(count, rng)
    # given out of order and with unsorted labels: the index sorts both
    labels = [
        (("node", f"dgx-{n % 3}"), ("__name__", f"edge_{kind}"), ("unicode", "é✓"))
        for n, kind in enumerate(values)
    ]
    writer = BlockWriter(tmp_path, grid)
    matrix = np.stack(list(values.values()))
    writer.add(labels[:3], matrix[:3])
    writer.add(labels[3:], matrix[3:])
    block = writer.close()
    found = _dump(promtool, tmp_path)
    times = [START_MS + 15_000 * k for k in range(count)]
    expected = {
        tuple(sorted(pairs)): list(zip(times, row.tolist(), strict=True))
        for pairs, row in zip(labels, matrix, strict=True)
    }
    assert found == expected
    meta = json.loads((block / "meta.json").read_text())
    assert (meta["minTime"], meta["maxTime"]) == (START_MS, times[-1] + 1)
    assert meta["stats"]["numSamples"] == len(labels) * count
    assert meta["stats"]["numChunks"] == len(labels) * math.ceil(count / 120)


def test_promtool_analyzes_the_index(tmp_path: Path) -> None:
    """promtool reads the postings: label names and values with their series counts."""
    promtool = require_tool("promtool")
    writer = BlockWriter(tmp_path, Grid(START_MS, 60_000, 30))
    labels = [(("__name__", "up"), ("instance", f"dgx-{n:03d}"), ("rack", f"r{n % 4}"))
              for n in range(40)]  # fmt: skip
    writer.add(labels, np.ones((40, 30)))
    block = writer.close()
    text = subprocess.run(
        [promtool, "tsdb", "analyze", str(tmp_path), block.name], capture_output=True,
        text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    assert re.search(r"^Series: 40$", text, re.M), text
    assert re.search(r"^40 instance$", text, re.M), text  # 40 values of `instance`
    assert re.search(r"^4 rack$", text, re.M), text


def test_same_labels_twice_is_refused(tmp_path: Path) -> None:
    writer = BlockWriter(tmp_path, Grid(START_MS, 1000, 2))
    writer.add([(("__name__", "a"),), (("__name__", "a"),)], np.zeros((2, 2)))
    with pytest.raises(ValueError, match="same labels"):
        writer.close()


def test_varints_are_go_s() -> None:
    """Go's binary.PutUvarint and PutVarint, worked by hand."""
    assert uvarint(0) == b"\x00"
    assert uvarint(300) == b"\xac\x02"
    assert varint(-1) == b"\x01"
    assert varint(1) == b"\x02"
    assert varint(-64) == b"\x7f"
    assert varint(START_MS) == uvarint(2 * START_MS)


def test_ulid_sorts_by_time_and_uses_crockford() -> None:
    early, late = new_ulid(1_000), new_ulid(2_000)
    assert len(early) == 26 and early < late
    assert set(early + late) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
