"""A finding of the real-GPU check (benchmarks/real_gpu/assumptions.py): the measured
value, a verdict and the raw file that shows it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.real_gpu.evidence import Evidence

CONFIRMED = "confirmed"
WRONG = "wrong"
ONE_GPU = "not testable on one GPU"
INCONCLUSIVE = "inconclusive"
NOT_MEASURED = "not measured"
MIB = 1024 * 1024


@dataclass
class Finding:
    id: str
    what: str
    assumption: str
    where: str
    verdict: str = NOT_MEASURED
    measured: str = ""
    raw: list[str] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Judge = Callable[[Evidence, Finding], None]


def ratio_of(a: float, b: float) -> float:
    return a / b if b else float("inf")
