"""Many real BMCs at once: one ipmi_sim per simulated node, started in parallel.

Each instance is the tests' BMC (tests/bmc/ipmi_sim.py: its own directory, free ports,
SIGPIPE ignored). Starting one takes ~0.1 s and stopping one 1-2 s, so both happen side
by side: starts on a small pool of threads, and at the end every instance is sent
SIGTERM by pid before any is waited for, so the waits overlap; one still running after
the grace period gets SIGKILL (ipmi_sim.stop).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.bmc.ipmi_sim import IpmiSim, running_ipmi_sim

# a start that fails (a port another process took between the pick and the bind, a
# rare slow start) is tried again once in a fresh directory
_TRIES = 2


@dataclass
class SimFleet:
    """The instances that started, how long starting took, and why others did not."""

    sims: list[IpmiSim] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    start_s: float = 0.0

    @property
    def pids(self) -> list[int]:
        return [sim.process.pid for sim in self.sims]


@contextlib.contextmanager
def running_ipmi_sims(
    root: Path, count: int, plugin: Path | None = None, *, parallel: int = 8
) -> Iterator[SimFleet]:
    """Up to `count` ipmi_sim instances under `root` for the block: as many as start
    (the others' reasons in `failures`), every one stopped by pid afterwards."""
    fleet, lock = SimFleet(), threading.Lock()
    with contextlib.ExitStack() as stack:

        def start(index: int) -> None:
            reason = ""
            for attempt in range(_TRIES):
                directory = root / f"bmc{index:04d}-{attempt}"
                directory.mkdir(parents=True)
                manager = running_ipmi_sim(directory, plugin)
                try:
                    sim = manager.__enter__()
                except (RuntimeError, OSError) as exc:
                    reason = f"bmc {index}: {exc}".splitlines()[0]
                    continue
                with lock:  # the stack stops it even when a later start fails
                    stack.push(manager.__exit__)
                    fleet.sims.append(sim)
                return
            with lock:
                fleet.failures.append(reason)

        began = time.monotonic()
        try:
            with ThreadPoolExecutor(max(1, parallel), thread_name_prefix="ipmi-sim") as pool:
                list(pool.map(start, range(count)))
            fleet.start_s = time.monotonic() - began
            yield fleet
        finally:
            for sim in fleet.sims:  # all at once; the stack then waits, SIGKILL after grace
                if sim.process.poll() is None:
                    sim.process.terminate()
