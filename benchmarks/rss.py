"""Resident memory of an agent polling a simulated node in a tight loop (leak check).

Runs in its own process (`python -m benchmarks.rss`), so the RSS is the agent's alone and
not that of the benchmark driver's other measurements; prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil

from benchmarks.common import REPO_ROOT

# MiB the RSS may grow over the second half of the loop and still be "flat": a leak of
# ~200 bytes per poll would add 1 MiB over 5,000 polls. The first half is reported but not
# judged: caches, allocator arenas and the simulator's state settle over the first ~1,000
# polls, which is growth that stops, not a leak.
FLAT_TOLERANCE_MIB = 1.0
# the fabric files are rewritten every this many polls: the rewrite is simulator cost
# (~30 ms on tmpfs) that would otherwise cut the number of polls the time budget allows
FABRIC_EVERY = 10
MIB = 1024 * 1024


@dataclass(frozen=True)
class RssResult:
    profile: str
    polls: int
    target_polls: int
    warm_mib: float
    final_mib: float
    peak_mib: float
    checkpoints: list[tuple[int, float]]  # (polls done, RSS MiB)
    seconds: float

    @property
    def growth_mib(self) -> float:
        return self.final_mib - self.warm_mib

    @property
    def second_half_growth_mib(self) -> float:
        """RSS growth from the checkpoint nearest half the polls to the last one."""
        half = self.polls / 2
        mid = min(self.checkpoints, key=lambda point: abs(point[0] - half))
        return self.final_mib - mid[1]

    @property
    def flat(self) -> bool:
        return self.second_half_growth_mib <= FLAT_TOLERANCE_MIB


def _rss_mib() -> float:
    return float(psutil.Process().memory_info().rss) / MIB


def run_in_process(profile: str, polls: int, warmup: int, seconds: float) -> dict[str, object]:
    from benchmarks.harness import simulated_agent

    started = time.monotonic()
    with simulated_agent(profile) as harness:
        harness.run(0, warmup=warmup, time_limit=seconds)
        gc.collect()
        warm = _rss_mib()
        checkpoints = [(0, warm)]
        every = max(1, polls // 10)
        deadline = time.monotonic() + seconds
        done = 0
        while done < polls and time.monotonic() < deadline:
            harness.clock.advance(5.0)  # NVML integrates lazily on its next call
            if done % FABRIC_EVERY == 0:
                harness.node.fabric.tick()
            harness.poll(record=False)
            done += 1
            if done % every == 0:
                checkpoints.append((done, _rss_mib()))
        gc.collect()
        final = _rss_mib()
        if checkpoints[-1][0] != done:
            checkpoints.append((done, final))
    peak = float(psutil.Process().memory_info().rss) / MIB
    with contextlib.suppress(Exception):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {
        "profile": profile,
        "polls": done,
        "target_polls": polls,
        "warm_mib": warm,
        "final_mib": final,
        "peak_mib": peak,
        "checkpoints": checkpoints,
        "seconds": time.monotonic() - started,
    }


def measure_rss(profile: str, polls: int, warmup: int, seconds: float) -> RssResult:
    argv = [
        sys.executable,
        "-m",
        "benchmarks.rss",
        f"--profile={profile}",
        f"--polls={polls}",
        f"--warmup={warmup}",
        f"--seconds={seconds}",
    ]
    done = subprocess.run(
        argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=seconds + 120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"RSS worker failed ({done.returncode}): {done.stderr[-2000:]}")
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    return RssResult(
        profile=str(raw["profile"]),
        polls=int(raw["polls"]),
        target_polls=int(raw["target_polls"]),
        warm_mib=float(raw["warm_mib"]),
        final_mib=float(raw["final_mib"]),
        peak_mib=float(raw["peak_mib"]),
        checkpoints=[(int(n), float(m)) for n, m in raw["checkpoints"]],
        seconds=float(raw["seconds"]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--polls", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=300.0)
    args = parser.parse_args()
    result = run_in_process(args.profile, args.polls, args.warmup, args.seconds)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
