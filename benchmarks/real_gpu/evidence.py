"""The raw outputs of one check, read back by name (None where a step left nothing)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from benchmarks.real_gpu import smi
from benchmarks.real_gpu.tape import read_tape


class Evidence:
    def __init__(self, raw: Path, simulated: str | None, profile: str | None) -> None:
        self.raw = raw
        self.simulated = simulated
        self.profile_name = profile  # the simulated profile of this board, if any

    def text(self, name: str) -> str | None:
        path = self.raw / name
        try:
            return path.read_text()
        except (OSError, UnicodeDecodeError):
            return None

    def json(self, name: str) -> Any | None:
        text = self.text(name)
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None

    def readings(self, phase: str) -> dict[str, Any] | None:
        found = self.json(f"readings-{phase}.json")
        return found if isinstance(found, dict) else None

    def gpu(self, phase: str, index: int = 0) -> dict[str, Any] | None:
        readings = self.readings(phase)
        gpus = readings.get("gpus") if readings else None
        return gpus[index] if isinstance(gpus, list) and len(gpus) > index else None

    def tape_calls(self, phase: str) -> list[dict[str, Any]] | None:
        path = self.raw / f"tape-{phase}.json.gz"
        if not path.exists():
            return None
        try:
            return list(read_tape(path)["calls"])
        except (OSError, ValueError, KeyError):
            return None

    def query_sections(self) -> list[dict[str, str]]:
        text = self.text("nvidia-smi-q.txt")
        return smi.query_sections(text) if text else []

    def device_queries(self, name: str = "device-queries.jsonl") -> list[dict[str, Any]]:
        text = self.text(name)
        rows = []
        for line in (text or "").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows

    def profile(self) -> Any | None:
        """The simulator's Profile of this board, or None."""
        return _profile(self.profile_name) if self.profile_name else None


@cache
def _profile(name: str) -> Any | None:
    from benchmarks.real_gpu.simulator import sim_module

    return sim_module("profiles").PROFILES.get(name)


def value(reading: Any) -> Any | None:
    """The value of a probe reading {"value": ...} / {"error": ...}."""
    if isinstance(reading, dict) and "value" in reading:
        return reading["value"]
    return None


def error(reading: Any) -> str | None:
    if isinstance(reading, dict) and "error" in reading:
        return str(reading["error"])
    return None
