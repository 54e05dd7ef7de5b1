"""Where a report's time went (`nvwatch report --timings FILE`): choosing what to read,
each query, the analysis and the writing, so a report slow on a large fleet can be
traced to the query or phase that made it slow.

A query's seconds are its own wall time: the report runs several at once, so their sum
exceeds the querying phase's wall time, which the file states apart.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class QueryTiming:
    name: str
    seconds: float
    series: int  # series in the answer
    requests: int  # range queries sent: more than one where the server refused the range


@dataclass
class Timings:
    phases: dict[str, float] = field(default_factory=dict)  # in the order they ran
    queries: list[QueryTiming] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = time.perf_counter() - began

    def query(self, timing: QueryTiming) -> None:
        with self._lock:  # the report's query threads add theirs at once
            self.queries.append(timing)

    def as_json(self) -> dict[str, object]:
        slowest_first = sorted(self.queries, key=lambda q: -q.seconds)
        return {
            "phases": {name: round(s, 3) for name, s in self.phases.items()},
            "total_seconds": round(sum(self.phases.values()), 3),
            "queries": [
                {
                    "name": q.name,
                    "seconds": round(q.seconds, 3),
                    "series": q.series,
                    "requests": q.requests,
                }
                for q in slowest_first
            ],
        }

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.as_json(), indent=1) + "\n", encoding="utf-8")
