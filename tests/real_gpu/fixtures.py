"""The recorded runs under tests/real_gpu/ (one folder each, made by
scripts/import-real-gpu-run) and their phases, for parametrizing."""

from __future__ import annotations

from pathlib import Path

from benchmarks.real_gpu.replay import meta

HERE = Path(__file__).resolve().parent
FIXTURES = sorted(path.parent for path in HERE.glob("*/meta.json"))
CASES = [(fixture, phase) for fixture in FIXTURES for phase in meta(fixture)["phases"]]


def case_id(case: object) -> str:
    if isinstance(case, tuple):
        return f"{case[0].name}-{case[1]}"
    return case.name if isinstance(case, Path) else str(case)
