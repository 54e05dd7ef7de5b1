"""A fixture's recorded NVML answers played through the agent's NVML source again."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.real_gpu.tape import read_tape, replaying


@dataclass(frozen=True)
class Replay:
    calls: list[dict[str, Any]]
    exposition: str  # what the agent exports for the recorded answers now
    misses: list[str]  # calls the agent made that the tape has no answer for


def meta(fixture: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((fixture / "meta.json").read_text())
    return data


def recorded_exposition(fixture: Path, phase: str) -> str:
    return gzip.decompress((fixture / f"exposition-{phase}.prom.gz").read_bytes()).decode()


def replay(fixture: Path, phase: str) -> Replay:
    """Two polls of NvmlSource on the tape of `phase`, the clock moved by the recorded
    settle time between them (GPM and rates need it), rendered as the agent renders."""
    from nvwatch.agent.exposition.render import prepare
    from nvwatch.agent.exposition.text import render_text
    from nvwatch.agent.sources.nvml.source import NvmlSource

    info = meta(fixture)
    calls = read_tape(fixture / f"tape-{phase}.json.gz")["calls"]
    now = [1000.0]
    with replaying(calls) as lib:
        source = NvmlSource(nvlink_detail=info.get("nvlink_detail", "link"), clock=lambda: now[0])
        try:
            source.collect()
            now[0] += float(info.get("settle_s", 1.0))
            sample = source.collect()
        finally:
            source.close()
        exposition = render_text([prepare("nvml", sample)]).decode()
        misses = list(lib.misses)
    return Replay(calls, exposition, misses)
