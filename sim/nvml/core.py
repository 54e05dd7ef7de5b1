"""What every simulated NVML call shares: the node's GPUs, its clock, handles, the lock.

`NvmlCore` holds the state; the area modules (system, identity, memory, ...) are mixins
that subclass it and add the C functions of their area, and `nvwatch.sim.nvml.library`
composes them into `SimulatedNvml`. `lib_call` and `device_call` turn a method into a
C entry point: they take the lock, refuse calls before nvmlInit (and every call while the
nvml-driver-broken scenario has the kernel module missing), integrate the GPUs up to the
clock (lazily, so state depends on time and not on who polls), and for device calls turn
the handle into its `SimulatedGpu`. `start_scenario` and `end_scenarios` add and repair
faults while the library runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from nvwatch.sim import scenario_names
from nvwatch.sim.gpu import scenarios
from nvwatch.sim.gpu.mig_layout import GpuMigPlan
from nvwatch.sim.gpu.mig_state import GpuMig
from nvwatch.sim.gpu.mig_state import build as build_mig
from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.gpu.state import Activity, GpuEvent
from nvwatch.sim.nvml.abi import (
    ERROR_DRIVER_NOT_LOADED,
    ERROR_GPU_IS_LOST,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    ERROR_UNINITIALIZED,
    address_of,
)
from nvwatch.sim.profiles import Profile, get_profile
from nvwatch.sim.workload import Workload

P = ParamSpec("P")
L = TypeVar("L", bound="NvmlCore")

# Each library gets its own 4 GiB of handle space, so a handle of one simulated node is
# an invalid argument to another (as handles of two processes would be).
_handle_spaces = itertools.count(1)


@dataclasses.dataclass
class EventSet:
    registered: dict[int, int] = dataclasses.field(default_factory=dict)  # gpu -> mask
    # bounded like the driver's queue: a storm must not grow memory without limit
    queue: deque[GpuEvent] = dataclasses.field(default_factory=lambda: deque(maxlen=1024))


class NvmlCore:
    """The state of one simulated node's library; attributes named nvml* live in mixins."""

    def __init__(
        self,
        profile: Profile | str,
        *,
        scenario: str | None = None,
        gpu_scenarios: Mapping[int, str] | None = None,
        workload: Workload | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
        mig: Mapping[int, GpuMigPlan] | None = None,
    ) -> None:
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        self.scenario = scenarios.validate(scenario) if scenario is not None else None
        per_gpu = self._checked_gpu_scenarios(gpu_scenarios or {})
        self.workload = workload or scenarios.workload_of(
            self.scenario or "healthy-training", Workload(seed=seed)
        )
        self.seed = seed
        self.clock = clock
        self._lock = threading.RLock()
        self._events_changed = threading.Condition(self._lock)
        # How often an NVML event wait looks at the clock by itself. A clock that moves
        # without any C call (wall time under `serve --simulate`, a test's manual clock)
        # makes events only when someone looks; a driver of the clock that calls advance()
        # itself (the simulated fleet's ticker) sets None, and waiters sleep until it does:
        # 124 XID listeners polling every 50 ms cost a fleet a tenth of a core.
        self.clock_poll_s: float | None = 0.05
        self._init_count = 0
        # (C function, GPU index or None for library-wide calls) -> times called: on a
        # real node each call is an ioctl into the driver, so tests and the benchmark
        # count them to keep the per-poll cost in view (calls_per_gpu)
        self.call_counts: Counter[tuple[str, int | None]] = Counter()
        self._time = clock()
        # Timestamps NVML reports are CPU epoch microseconds. On the real clock, use the
        # real epoch; on an injected clock a fixed epoch keeps runs reproducible.
        if clock is time.monotonic:
            self._epoch_offset = time.time() - time.monotonic()
        else:
            self._epoch_offset = 1_700_000_000.0
        space = next(_handle_spaces) << 32
        self._handle_base = space + 0x1000
        self._next_object = itertools.count(space + 0x8000_0000, 0x10)
        self._event_sets: dict[int, EventSet] = {}
        # each event as the library delivers it, before any waiter can see it: the node's
        # simulated kernel log writes its XID records here, as the driver logs an XID
        # when it raises it (sim/node/kmsg.py)
        self.event_sinks: list[Callable[[GpuEvent], None]] = []
        # sample address -> (GPU index, or (GPU index, GPU instance id) for a MIG sample,
        # and the activity it recorded); None until a sample was taken into it
        self._gpm_samples: dict[int, tuple[int | tuple[int, int], Activity] | None] = {}
        self._start_time = self._time
        self.driver_faults: list[scenarios.DriverBroken] = []
        if self.scenario in scenario_names.DRIVER_SCENARIOS:
            self.driver_faults.append(scenarios.DriverBroken())
        self.gpus: list[SimulatedGpu] = self._make_gpus(per_gpu)
        for index in mig or {}:
            self._check_gpu_index(index, "--mig")
        # GPU index -> its MIG state (sim/nvml/mig_*.py answer from it); GPUs the
        # layout does not name have MIG off
        self.mig: dict[int, GpuMig] = build_mig(self.gpus, mig or {}, seed=seed)

    def _checked_gpu_scenarios(self, gpu_scenarios: Mapping[int, str]) -> dict[int, str]:
        per_gpu = dict(gpu_scenarios)
        for index, name in per_gpu.items():
            scenarios.validate(name)
            self._check_gpu_index(index, f"{name}@{index}")
        return per_gpu

    def _check_gpu_index(self, index: int, what: str) -> None:
        if not 0 <= index < self.profile.gpu_count:
            raise ValueError(
                f"{what}: no GPU {index} in {self.profile.name} "
                f"(GPUs 0..{self.profile.gpu_count - 1})"
            )

    def _make_gpus(self, per_gpu: Mapping[int, str]) -> list[SimulatedGpu]:
        """One SimulatedGpu per board, with the node scenario and per-GPU ones applied."""
        gpus: list[SimulatedGpu] = []
        for index, model in enumerate(self.profile.gpus):
            gpu_workload = self.workload
            own = per_gpu.get(index)
            if own is not None and own in scenario_names.WORKLOAD_SCENARIOS:
                gpu_workload = scenarios.workload_of(own, self.workload)
            gpus.append(
                SimulatedGpu(
                    index,
                    model,
                    self.profile.nvlinks[index],
                    gpu_workload,
                    seed=self.seed,
                    start_time=self._time,
                    node_name=self.profile.name,
                )
            )
        if self.scenario in scenario_names.FAULT_SCENARIOS:
            victim = scenarios.default_victim(
                self.scenario, [len(links) for links in self.profile.nvlinks]
            )
            scenarios.apply(self.scenario, gpus[victim])
        for index, name in per_gpu.items():
            scenarios.apply(name, gpus[index])
        return gpus

    # --- scenarios while running -------------------------------------------------------

    def start_scenario(
        self,
        name: str,
        gpu: int | None = None,
        *,
        onset_s: float | None = None,
        until_s: float | None = None,
        slowdown: float | None = None,
    ) -> str:
        """Run fault `name` on GPU `gpu` (None: the scenario's default victim), or node-wide
        (nvml-driver-broken); times are seconds since this library started; `slowdown`:
        how much a fault that slows its GPU slows it. Returns 'name@gpu' or the
        node-wide name."""
        with self._lock:
            if scenarios.validate(name) in scenario_names.DRIVER_SCENARIOS:
                if gpu is not None:
                    raise ValueError(f"{name} is node-wide: it takes no GPU")
                onset = scenario_names.FAULT_ONSET_S if onset_s is None else onset_s
                self.driver_faults.append(scenarios.DriverBroken(onset, until_s))
                return name
            if name in scenario_names.WORKLOAD_SCENARIOS:
                raise ValueError(f"{name} sets the workload: give it when the library is built")
            links = [len(links) for links in self.profile.nvlinks]
            index = scenarios.default_victim(name, links) if gpu is None else gpu
            self._check_gpu_index(index, name)
            scenarios.apply(
                name, self.gpus[index], onset_s=onset_s, until_s=until_s, slowdown=slowdown
            )
            return f"{name}@{index}"

    def end_scenarios(self, name: str | None = None, gpu: int | None = None) -> list[str]:
        """End the running faults named `name` (None: all) on GPU `gpu` (None: every GPU,
        and the node-wide ones) and repair what they broke, as of the clock's now."""
        with self._lock:
            self._advance_locked()
            ended: list[str] = []
            for target in self.gpus if gpu is None else self.gpus[gpu : gpu + 1]:
                for hook in target.scenario_hooks:
                    if not hook.ended and name in (None, hook.name):
                        hook.end(target)
                        ended.append(f"{hook.name}@{target.index}")
            for fault in self.driver_faults if gpu is None else ():
                if not fault.ended and name in (None, fault.name):
                    fault.end()
                    ended.append(fault.name)
            return ended

    def driver_broken(self) -> bool:
        """True while an nvml-driver-broken scenario has the kernel module missing."""
        if not self.driver_faults:
            return False
        elapsed = self.clock() - self._start_time
        return any(fault.broken(elapsed) for fault in self.driver_faults)

    # --- time ------------------------------------------------------------------------

    def advance(self) -> None:
        """Integrate every GPU up to clock(); every C call does this lazily too."""
        with self._lock:
            self._advance_locked()

    def _advance_locked(self) -> None:
        now = self.clock()
        if now <= self._time:
            return
        self._time = now
        delivered = False
        for gpu in self.gpus:
            gpu.step(now)
            for event in gpu.drain_events():
                for sink in self.event_sinks:
                    sink(event)
                for event_set in self._event_sets.values():
                    if event_set.registered.get(event.gpu, 0) & event.event_type:
                        event_set.queue.append(event)
                        delivered = True
        if delivered:
            self._events_changed.notify_all()

    def _epoch_us(self, t: float) -> int:
        """Simulation time `t` as the CPU epoch microseconds NVML timestamps are in."""
        return int((t + self._epoch_offset) * 1e6)

    def _timestamp_us(self) -> int:
        return self._epoch_us(self._time)

    # --- call accounting -----------------------------------------------------------

    def calls_per_gpu(self) -> dict[int, int]:
        """Device calls so far per GPU index (library-wide calls are not a GPU's)."""
        totals: dict[int, int] = {}
        for (_, index), count in self.call_counts.items():
            if index is not None:
                totals[index] = totals.get(index, 0) + count
        return totals

    # --- handles ---------------------------------------------------------------------

    def handle_address(self, index: int) -> int:
        """The opaque device-handle value of GPU `index` (distinct across libraries)."""
        return self._handle_base + 0x100 * index

    def mig_handle_address(self, index: int, device: int) -> int:
        """The handle of MIG device `device` (0..6) of GPU `index`: inside the GPU's
        0x100 of handle space, so it is never a GPU handle itself."""
        return self.handle_address(index) + 0x10 * (device + 1)

    def _mig_slot(self, handle: Any) -> tuple[int, int] | None:
        """(GPU index, MIG device index) of an existing MIG device's handle, else None."""
        address = address_of(handle)
        if address is None:
            return None
        offset = address - self._handle_base
        index, within = divmod(offset, 0x100)
        if offset < 0 or within == 0 or within % 0x10 or index >= len(self.gpus):
            return None
        state = self.mig.get(index)
        device = within // 0x10 - 1
        if state is None or device >= len(state.devices):
            return None
        return index, device

    def _gpu_of(self, handle: Any) -> SimulatedGpu | None:
        address = address_of(handle)
        if address is None:
            return None
        offset = address - self._handle_base
        if offset < 0 or offset % 0x100:
            return None
        index = offset // 0x100
        return self.gpus[index] if index < len(self.gpus) else None


# --- call wrappers: init check, lazy integration, handle -> GPU -------------------------


def lib_call(fn: Callable[Concatenate[L, P], int]) -> Callable[Concatenate[L, P], int]:
    """A library-wide C function: fails before nvmlInit, integrates up to the clock."""
    name = fn.__name__

    def call(self: L, /, *args: P.args, **kwargs: P.kwargs) -> int:
        with self._lock:
            self.call_counts[(name, None)] += 1
            if self.driver_broken():
                return ERROR_DRIVER_NOT_LOADED
            if not self._init_count:
                return ERROR_UNINITIALIZED
            self._advance_locked()
            return fn(self, *args, **kwargs)

    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


def device_call(
    fn: Callable[Concatenate[L, SimulatedGpu, P], int],
) -> Callable[Concatenate[L, Any, P], int]:
    """A per-device C function: the handle becomes its GPU, and a lost GPU says so."""
    name = fn.__name__

    def call(self: L, handle: Any, /, *args: P.args, **kwargs: P.kwargs) -> int:
        with self._lock:
            gpu = self._gpu_of(handle)
            slot = self._mig_slot(handle) if gpu is None else None
            parent = self.gpus[slot[0]] if slot is not None else None
            # every call reaching the library counts, failed ones too (still an ioctl)
            counted = gpu or parent
            self.call_counts[(name, counted.index if counted is not None else None)] += 1
            if self.driver_broken():
                return ERROR_DRIVER_NOT_LOADED
            if not self._init_count:
                return ERROR_UNINITIALIZED
            if parent is not None:
                # a MIG device handle: NVML answers only a few calls per instance (those
                # are in mig_devices.py and mig_capacity.py); GPU-wide readings are the
                # parent's to give
                return ERROR_GPU_IS_LOST if parent.lost else ERROR_NOT_SUPPORTED
            if gpu is None:
                return ERROR_INVALID_ARGUMENT
            self._advance_locked()
            if gpu.lost:
                return ERROR_GPU_IS_LOST
            return fn(self, gpu, *args, **kwargs)

    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call
