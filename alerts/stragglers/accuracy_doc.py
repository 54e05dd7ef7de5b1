"""The measured accuracy of the straggler rules in docs/alerts.md, from the benchmark's
figures (benchmarks/stragglers.py writes BENCHMARK; `nvwatch alerts build` renders it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nvwatch.alerts.stragglers.goals import result_lines

BENCHMARK = Path(__file__).resolve().parent / "benchmark.json"


def accuracy_lines(path: Path = BENCHMARK) -> list[str]:
    if not path.is_file():
        return ["Not measured yet: run `python benchmarks/stragglers.py`, then the build."]
    figures: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    corpus, seconds = figures["corpus"], figures["seconds"]
    return [
        f"Measured on {figures['date']} with the default mixin config by "
        "`python benchmarks/stragglers.py` (`nvwatch simulate stragglers --seed "
        f"{corpus['seed']} --episodes {corpus['episodes']} --max-nodes "
        f"{corpus['max_nodes']}`, then `nvwatch alerts evaluate-stragglers`): "
        f"{corpus['episodes']} jobs of 2 to {corpus['max_nodes']} nodes "
        f"({corpus['nodes']} nodes in all, {corpus['stragglers']} with a straggler), "
        f"{corpus['hours']} hours sampled every {corpus['step_seconds']:g} s; generated in "
        f"{seconds['generate']:.0f} s and evaluated in {seconds['evaluate']:.0f} s on "
        f"{figures['machine']['cpu']} with {figures['machine']['prometheus']}. A straggler "
        "is found when an alert names its GPU, port or node with its cause; time to "
        "detect runs from when the rules could first see it (its onset, or the end of "
        "the job's warm-up if later) to the alert firing. CI evaluates a smaller corpus "
        "of fixed seed and fails below the goals (tests/stragglers/test_evaluate.py). "
        "Read it as what the rules do when a job behaves as the simulator models it, "
        "not as a field figure: simulated ranks differ by little more than their "
        "faults (the MAD is near 0 and the floors decide), where real ones differ by "
        "silicon, cooling and data; a fleet's own false alerts are what tunes the "
        "floors and `straggler_mad_multiple`.",
        "",
        *result_lines(figures["result"]),
    ]
