"""The words a job's verdict is given in, wherever nvwatch gives one.

`nvwatch job`'s notes (report/jobs/notes.py), the capacity report's Jobs section and the
jobs dashboard's "Verdict per job" table name what held a job back; a user who reads one
and then the other must meet the same words for the same condition. Each code is what a
note's JSON carries; its words are what people read.

The dashboard judges a job from Prometheus over the range on screen, so it has two
verdicts no note has: memory-bound (a note is advice, and a memory-bound job has nothing
to change in what it asked for) and busy.
"""

from __future__ import annotations

IDLE_GPUS = "idle-gpus"
LOW_UTILIZATION = "low-utilization"
SMALL_MEMORY = "small-memory"
POWER_CAPPED = "power-capped"
THERMAL = "thermal"
STRAGGLER = "straggler"
IDLE_INFINIBAND = "idle-infiniband"
MEMORY_BOUND = "memory-bound"
BUSY = "busy"

WORDS: dict[str, str] = {
    IDLE_GPUS: "GPUs held but idle",
    LOW_UTILIZATION: "utilization far below other jobs'",
    SMALL_MEMORY: "memory fits a smaller GPU",
    POWER_CAPPED: "power-capped",
    THERMAL: "thermally throttled",
    STRAGGLER: "a straggler held it back",
    IDLE_INFINIBAND: "InfiniBand idle across nodes",
    MEMORY_BOUND: "memory-bound",
    BUSY: "busy, no bottleneck seen",
}


def words(code: str) -> str:
    """What people read for a verdict code; an unknown code (a summary stored by a
    later nvwatch) as itself."""
    return WORDS.get(code, code)
