"""The straggler rules' accuracy on the full labelled corpus, for docs/alerts.md.

    python benchmarks/stragglers.py [--seed 2026] [--episodes 112] [--max-nodes 32]
                                    [--out alerts/stragglers/benchmark.json]

Writes the corpus with `nvwatch simulate stragglers` (jobs of 2 to --max-nodes nodes,
eight of each kind of episode at the defaults), evaluates the mixin's rules over it
with `nvwatch alerts evaluate-stragglers --format json` (a real Prometheus), and writes
the result with the corpus's parameters, the machine and the time each part took to
--out. `nvwatch alerts build` renders docs/alerts.md's accuracy tables from that file:
rerun this, then the build, after any change to the straggler rules or the corpus.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import REPO_ROOT, cpu_model, tool_version

DEFAULT_OUT = REPO_ROOT / "alerts" / "stragglers" / "benchmark.json"
NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
TIMEOUT_S = 3 * 3600


def run(args: list[str]) -> tuple[str, float]:
    """stdout of `nvwatch ARGS` and its wall time; stops this script on failure."""
    started = time.monotonic()
    done = subprocess.run(
        [*NVWATCH, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    if done.returncode not in (0, 1):  # 1: a goal missed, still a result to record
        sys.exit(f"nvwatch {' '.join(args[:2])} failed: {done.stderr.strip()[-500:]}")
    return done.stdout, time.monotonic() - started


def measure(seed: int, episodes: int, max_nodes: int, scratch: Path) -> dict[str, object]:
    corpus = scratch / "corpus"
    _, generate_s = run(
        ["simulate", "stragglers", "--seed", str(seed), "--episodes", str(episodes),
         "--max-nodes", str(max_nodes), "--out", str(corpus)]
    )  # fmt: skip
    truth = json.loads((corpus / "truth.json").read_text(encoding="utf-8"))
    samples = sum(1 for _ in (corpus / "corpus.om").open("rb")) - 1  # but # EOF
    output, evaluate_s = run(
        ["alerts", "evaluate-stragglers", str(corpus), "--format", "json",
         "--workdir", str(scratch)]
    )  # fmt: skip
    return {
        "corpus": {
            "seed": seed,
            "episodes": episodes,
            "max_nodes": max_nodes,
            "step_seconds": truth["step_seconds"],
            "hours": round((truth["end"] - truth["start"]) / 3600, 1),
            "nodes": sum(len(e["nodes"]) for e in truth["episodes"]),
            "stragglers": sum(1 for e in truth["episodes"] if e["alert_expected"]),
            "lines": samples,
        },
        "seconds": {"generate": round(generate_s, 1), "evaluate": round(evaluate_s, 1)},
        "machine": {
            "cpu": cpu_model(),
            "python": platform.python_version(),
            "prometheus": tool_version(["prometheus", "--version"]),
        },
        "date": datetime.date.today().isoformat(),
        "result": json.loads(output),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--episodes", type=int, default=112)
    parser.add_argument("--max-nodes", type=int, default=32)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvwatch-straggler-bench-") as scratch:
        figures = measure(options.seed, options.episodes, options.max_nodes, Path(scratch))
    options.out.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    print(options.out)


if __name__ == "__main__":
    main()
