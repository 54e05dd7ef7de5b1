"""Resident memory of an agent polling a simulated node in a tight loop (leak check).

Runs in its own process (`python -m benchmarks.rss`), so the RSS is the agent's alone and
not that of the benchmark driver's other measurements; prints one JSON object.

RSS alone cannot prove flatness: allocator arenas grow in steps and a leak of a few
bytes per poll hides in them. So a second process (`--trace`) runs the same loop under
tracemalloc and compares the allocation sites (file:line) live at poll polls/10 (1,000)
with those live at the last poll (10,000): a site is growing when it holds more than
GROW_KIB more and GROW_RATIO more than it did. It is a separate process because tracing
slows every allocation and adds its own memory, which would distort the RSS figures.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import psutil

from benchmarks.common import REPO_ROOT, source_path

if TYPE_CHECKING:
    from benchmarks.harness import Harness

# MiB the RSS may grow over the second half of the loop and still be "flat": a leak of
# ~200 bytes per poll would add 1 MiB over 5,000 polls. The first half is reported but not
# judged: caches, allocator arenas and the simulator's state settle over the first ~1,000
# polls, which is growth that stops, not a leak.
FLAT_TOLERANCE_MIB = 1.0
# the fabric files are rewritten every this many polls: the rewrite is simulator cost
# (~30 ms on tmpfs) that would otherwise cut the number of polls the time budget allows
FABRIC_EVERY = 10
MIB = 1024 * 1024
# A site is "growing" between the two snapshots when it holds more than GROW_KIB more
# and more than GROW_RATIO times what it held (a new site: any size past GROW_KIB). A
# leak of one small object (>= 16 bytes) per poll over 9,000 polls is > 140 KiB, far
# past 32 KiB; caches and buffers that were already full at poll 1,000 move by a few
# KiB as their contents are replaced, well within it.
GROW_KIB = 32.0
GROW_RATIO = 0.10
# ... and it still grows after the middle snapshot (between the two): at least this share
# of its growth comes in the second half. A steady leak puts about half there; a one-time
# step that came before the middle puts none, e.g. Python's table of interned strings
# doubling once (+1 object, ~1 MiB, charged to the pathlib line that interned the string
# that tipped it), which grows no further.
SECOND_HALF_SHARE = 0.25
TOP_SITES = 10
# Sites under this prefix are the simulator's, reported apart and not judged.
SIMULATOR_PREFIX = "sim/"
KIB = 1024


@dataclass(frozen=True)
class SiteGrowth:
    site: str  # file:line, relative to the repository or the library root
    first_kib: float
    last_kib: float
    count_diff: int
    mid_kib: float | None = None  # live at the middle snapshot (None: not taken)

    @property
    def diff_kib(self) -> float:
        return self.last_kib - self.first_kib

    @property
    def growing(self) -> bool:
        if not (self.diff_kib > GROW_KIB and self.diff_kib > GROW_RATIO * self.first_kib):
            return False
        if self.mid_kib is None:
            return True
        return self.last_kib - self.mid_kib >= SECOND_HALF_SHARE * self.diff_kib

    @property
    def simulator(self) -> bool:
        """Allocated by the simulated node's own code: state a real node does not carry
        (e.g. sim/gpu/model.py's lru_cache of workload means, which fills up to its
        maxsize of 4,096 entries over the first few thousand polls)."""
        return self.site.startswith(SIMULATOR_PREFIX)


@dataclass(frozen=True)
class TraceResult:
    """tracemalloc's allocation sites at two polls of one traced run."""

    first_poll: int
    last_poll: int
    target_polls: int
    first_kib: float  # all traced memory live at first_poll
    last_kib: float
    top: list[SiteGrowth]  # the TOP_SITES largest changes, either way
    growing: list[SiteGrowth]  # every growing site, not only those in `top`
    seconds: float

    @property
    def agent_growing(self) -> list[SiteGrowth]:
        return [site for site in self.growing if not site.simulator]

    @property
    def simulator_growing(self) -> list[SiteGrowth]:
        return [site for site in self.growing if site.simulator]

    @property
    def flat(self) -> bool:
        """No site outside the simulator grows: the agent and the libraries it calls."""
        return not self.agent_growing


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
    trace: TraceResult | None = None

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
            _poll(harness, done)
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


def _poll(harness: Harness, done: int) -> None:
    harness.clock.advance(5.0)  # NVML integrates lazily on its next call
    if done % FABRIC_EVERY == 0:
        harness.node.fabric.tick()
    harness.poll(record=False)


def trace_in_process(profile: str, polls: int, warmup: int, seconds: float) -> dict[str, object]:
    """The same loop under tracemalloc: snapshots at polls/10, halfway from there to the
    end, and at the last poll."""
    from benchmarks.harness import simulated_agent

    started = time.monotonic()
    first_at = max(1, polls // 10)
    mid_at = (first_at + polls) // 2
    mid: tracemalloc.Snapshot | None = None
    with simulated_agent(profile) as harness:
        harness.run(0, warmup=warmup, time_limit=seconds)
        gc.collect()
        tracemalloc.start()
        first: tracemalloc.Snapshot | None = None
        deadline = time.monotonic() + seconds
        done = 0
        while done < polls and time.monotonic() < deadline:
            _poll(harness, done)
            done += 1
            if done == first_at:
                first = _snapshot()
            elif done == mid_at:
                mid = _snapshot()
        last = _snapshot()
        tracemalloc.stop()
    if first is None:  # the time cap came before the first snapshot: nothing to compare
        first, first_at = last, done
    at_mid = _sizes(mid) if mid is not None else None
    sites = [_site_growth(stat, at_mid) for stat in last.compare_to(first, "lineno")]
    return {
        "first_poll": first_at,
        "last_poll": done,
        "target_polls": polls,
        "first_kib": _total_kib(first),
        "last_kib": _total_kib(last),
        "top": [asdict(s) for s in sites[:TOP_SITES]],
        "growing": [asdict(s) for s in sites if s.growing],
        "seconds": time.monotonic() - started,
    }


def _snapshot() -> tracemalloc.Snapshot:
    # collect first: a cycle not yet collected is garbage, not a live allocation
    gc.collect()
    return tracemalloc.take_snapshot().filter_traces(
        (
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
        )
    )


def _total_kib(snapshot: tracemalloc.Snapshot) -> float:
    return sum(stat.size for stat in snapshot.statistics("filename")) / KIB


def _sizes(snapshot: tracemalloc.Snapshot) -> dict[tuple[str, int], float]:
    """KiB live per allocation site (file, line)."""
    return {
        (stat.traceback[0].filename, stat.traceback[0].lineno): stat.size / KIB
        for stat in snapshot.statistics("lineno")
    }


def _site_growth(
    stat: tracemalloc.StatisticDiff, at_mid: dict[tuple[str, int], float] | None = None
) -> SiteGrowth:
    frame = stat.traceback[0]
    return SiteGrowth(
        site=f"{source_path(frame.filename)}:{frame.lineno}",
        first_kib=(stat.size - stat.size_diff) / KIB,
        last_kib=stat.size / KIB,
        count_diff=stat.count_diff,
        mid_kib=None if at_mid is None else at_mid.get((frame.filename, frame.lineno), 0.0),
    )


def _start_worker(
    flag: str | None, profile: str, polls: int, warmup: int, seconds: float
) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "benchmarks.rss",
        f"--profile={profile}",
        f"--polls={polls}",
        f"--warmup={warmup}",
        f"--seconds={seconds}",
        *([flag] if flag else []),
    ]
    return subprocess.Popen(
        argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish_worker(worker: subprocess.Popen[str], seconds: float) -> Any:
    try:
        out, err = worker.communicate(timeout=seconds + 120)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        raise RuntimeError("RSS worker did not finish") from None
    if worker.returncode != 0:
        raise RuntimeError(f"RSS worker failed ({worker.returncode}): {err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def _trace_result(raw: dict[str, Any]) -> TraceResult:
    def sites(key: str) -> list[SiteGrowth]:
        return [SiteGrowth(**site) for site in raw[key]]

    return TraceResult(
        first_poll=int(raw["first_poll"]),
        last_poll=int(raw["last_poll"]),
        target_polls=int(raw["target_polls"]),
        first_kib=float(raw["first_kib"]),
        last_kib=float(raw["last_kib"]),
        top=sites("top"),
        growing=sites("growing"),
        seconds=float(raw["seconds"]),
    )


def measure_rss(profile: str, polls: int, warmup: int, seconds: float) -> RssResult:
    """The RSS run and the traced run, side by side in two processes (each `seconds` at
    most): 10,000 polls each take minutes, and each loop is one thread, so on a machine
    of two cores or more neither waits for the other."""
    workers = [_start_worker(flag, profile, polls, warmup, seconds) for flag in (None, "--trace")]
    try:
        raw = _finish_worker(workers[0], seconds)
        trace = _trace_result(_finish_worker(workers[1], seconds))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    return RssResult(
        profile=str(raw["profile"]),
        polls=int(raw["polls"]),
        target_polls=int(raw["target_polls"]),
        warm_mib=float(raw["warm_mib"]),
        final_mib=float(raw["final_mib"]),
        peak_mib=float(raw["peak_mib"]),
        checkpoints=[(int(n), float(m)) for n, m in raw["checkpoints"]],
        seconds=float(raw["seconds"]),
        trace=trace,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--polls", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument(
        "--trace", action="store_true", help="compare tracemalloc sites instead of RSS"
    )
    args = parser.parse_args()
    run = trace_in_process if args.trace else run_in_process
    result = run(args.profile, args.polls, args.warmup, args.seconds)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
