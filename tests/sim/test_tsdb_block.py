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
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from nvwatch.sim.tsdb.block import BlockWriter, new_ulid
from nvwatch.sim.tsdb.xor import Grid, uvarint, varint
from tests.conftest import require_tool
from tests.prometheus_on_blocks import prometheus_on

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


def test_a_series_of_part_of_the_range_ends_stale(tmp_path: Path) -> None:
    """A span's samples only, then Prometheus' staleness marker (a NaN of its own bit
    pattern) at the next step unless the span reaches the block's end; a span across a
    chunk boundary is cut there as a whole series is."""
    promtool = require_tool("promtool")
    grid = Grid(START_MS, 30_000, 250)
    writer = BlockWriter(tmp_path, grid)
    writer.add([(("__name__", "whole"),)], np.full((1, 250), 3.0))
    spans = {"early": (0, 5), "across": (118, 123), "to_the_end": (200, 250)}
    for name, (first, end) in spans.items():
        writer.add_span((("__name__", "held"), ("job_id", name)), first, end)
    block = writer.close()
    found = _dump(promtool, tmp_path)
    for name, (first, end) in spans.items():
        samples = found[(("__name__", "held"), ("job_id", name))]
        times = [t for t, _ in samples]
        last = min(end + 1, 250)
        assert times == [grid.time_ms(k) for k in range(first, last)], name
        assert [v for _, v in samples[: end - first]] == [1.0] * (end - first)
        if end < 250:
            assert math.isnan(samples[-1][1]), name  # promtool prints any NaN alike
    assert len(found[(("__name__", "whole"),)]) == 250
    meta = json.loads((block / "meta.json").read_text())
    assert meta["stats"]["numSeries"] == 4
    assert meta["stats"]["numSamples"] == sum(len(v) for v in found.values())
    # whole: 3 chunks; early: 1; across: 2 (cut at 120); to the end: 2 (cut at 240)
    assert meta["stats"]["numChunks"] == 3 + 1 + 2 + 2


def test_prometheus_stops_seeing_a_span_at_its_end(tmp_path: Path) -> None:
    """The marker is Prometheus' staleness NaN: a query one step after a span's last
    sample finds nothing, where a plain NaN (or no marker) would answer for 5 minutes."""
    grid = Grid(START_MS, 30_000, 250)
    writer = BlockWriter(tmp_path / "data", grid)
    writer.add_span((("__name__", "held"), ("job_id", "early")), 0, 5)
    writer.add_span((("__name__", "held"), ("job_id", "to_the_end")), 200, 250)
    writer.close()
    with prometheus_on(tmp_path / "data", tmp_path) as url:

        def held_at(index: int) -> set[str]:
            at = grid.time_ms(index) / 1000
            query = urllib.parse.urlencode({"query": "held", "time": f"{at:.3f}"})
            with urllib.request.urlopen(f"{url}/api/v1/query?{query}") as answer:
                body = json.load(answer)
            return {r["metric"]["job_id"] for r in body["data"]["result"]}

        assert held_at(4) == {"early"}
        assert held_at(5) == set()  # the marker, one step after the last sample
        assert held_at(249) == {"to_the_end"}


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
