"""NVML library calls per GPU per poll, counted by the simulated library.

On a real node each NVML call is an ioctl into the driver (microseconds to
milliseconds), so how many calls a poll makes is a cost of its own, apart from CPU.
The simulator counts every call it answers per function and GPU (`call_counts`); this
polls `NvmlSource` on a manual clock and reports the steady state (polls after the
first, which discovers links and reads the static values).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from nvwatch.agent.sources.nvml import NvmlSource
from nvwatch.sim import nvml as sim_nvml
from nvwatch.sim.clock import ManualClock

POLL_S = 5.0

# Measured at 4e5c2dd, before the field batch took ECC, page retirement, remapped rows,
# PCIe replays, violation times and the NVLink error counters of links 12+, and before
# the supported clock-event mask was kept between slow refreshes: the target is half.
CALLS_BEFORE: dict[str, float] = {
    "dgx1-p100": 33.0,
    "dgx1-v100": 33.0,
    "dgx-station": 33.0,
    "dgx2": 33.0,
    "dgx-a100": 29.0,
    "dgx-h100": 120.0,
    "geforce-workstation": 18.5,
    "inference-t4": 33.0,
}


# Readings the agent gained after *before* was measured, counted apart so that the
# target compares the same readings: per-process utilization (one call per GPU with
# processes, agent/sources/nvml/processes.py).
NEW_READINGS = frozenset({"nvmlDeviceGetProcessUtilization"})


@dataclass(frozen=True)
class NvmlCalls:
    profile: str
    gpus: int
    polls: int
    per_gpu_per_poll: float
    batches_per_gpu_per_poll: float  # nvmlDeviceGetFieldValues: one expected
    before: float | None  # the figure before the field batch grew, if known
    new_per_gpu_per_poll: float = 0.0  # calls of NEW_READINGS, not in per_gpu_per_poll


def measure_nvml_calls(profile: str, polls: int = 10, warmup: int = 2) -> NvmlCalls:
    clock = ManualClock(1000.0)
    lib = sim_nvml.SimulatedNvml(profile, clock=clock)
    sim_nvml.install(lib)
    source = NvmlSource(clock=clock)
    try:
        for _ in range(warmup):
            clock.advance(POLL_S)
            source.collect()
        before = Counter(lib.call_counts)
        for _ in range(polls):
            clock.advance(POLL_S)
            source.collect()
    finally:
        source.close()
        sim_nvml.uninstall()
    counted = Counter(lib.call_counts)
    counted.subtract(before)
    gpus = lib.profile.gpu_count
    per_gpu = sum(
        c for (name, gpu), c in counted.items() if gpu is not None and name not in NEW_READINGS
    )
    new = sum(c for (name, gpu), c in counted.items() if gpu is not None and name in NEW_READINGS)
    batches = sum(c for (name, gpu), c in counted.items() if name == "nvmlDeviceGetFieldValues")
    return NvmlCalls(
        profile=profile,
        gpus=gpus,
        polls=polls,
        per_gpu_per_poll=per_gpu / gpus / polls,
        batches_per_gpu_per_poll=batches / gpus / polls,
        before=CALLS_BEFORE.get(profile),
        new_per_gpu_per_poll=new / gpus / polls,
    )
