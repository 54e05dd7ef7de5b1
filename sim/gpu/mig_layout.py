"""`--mig LAYOUT`: how a simulated node's GPUs are partitioned, parsed and placed.

    LAYOUT   GROUP[;GROUP...]
    GROUP    GPUS:WHAT
    GPUS     all | N | N-M                       (GPU indices)
    WHAT     PROFILE[*COUNT][,PROFILE[*COUNT]...]  MIG on, these GPU instances
             | none                              MIG on, no instances yet
             | pending                           MIG off now, on after the next reset

e.g. `all:3g.40gb,3g.40gb`, `0-3:7g.80gb;4-7:1g.10gb*7`, `0:2g.20gb,1g.10gb*3;1:pending`.
Each GPU instance gets one compute instance spanning it (what `nvidia-smi mig -cgi
... -C` creates). GPUs the layout does not name keep MIG off.

Placing is `nvidia-smi mig -cgi` without the trial and error: any set of profiles that
the board can hold is placed (a backtracking search over each profile's allowed
starts, largest first), and a set it cannot hold is one line saying why.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nvwatch.sim.gpu.mig_profiles import (
    COMPUTE_SLICES,
    MEMORY_SLICES,
    GpuInstanceProfile,
    profiles_for,
)

EXAMPLE = "all:3g.40gb,3g.40gb or 0-3:7g.80gb;4-7:1g.10gb*7"
_GROUP = re.compile(r"^\s*(?P<gpus>all|\d+(?:-\d+)?)\s*:\s*(?P<what>.*?)\s*$")
_ITEM = re.compile(r"^(?P<name>\d+g\.\d+gb(?:\+me)?)(?:\*(?P<count>\d+))?$")
_MAX_COUNT = 7


class MigLayoutError(ValueError):
    """A --mig layout that cannot be parsed, or that a GPU cannot hold: one line."""


@dataclass(frozen=True)
class GpuMigPlan:
    """What one GPU should look like: MIG mode now and after a reset, and its instances."""

    current: bool
    pending: bool
    profiles: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlacedInstance:
    """A GPU instance with its place: what `nvidia-smi mig -lgi` lists."""

    gpu_instance_id: int
    profile: GpuInstanceProfile
    start: int  # memory slice

    @property
    def compute_instance_id(self) -> int:
        return 0  # the one compute instance spanning the GPU instance


def parse_layout(text: str, gpu_count: int) -> dict[int, GpuMigPlan]:
    """GPU index -> plan, for the GPUs `text` names; MigLayoutError on bad input."""
    plans: dict[int, GpuMigPlan] = {}
    groups = [g for g in text.split(";") if g.strip()]
    if not groups:
        raise MigLayoutError(f"--mig: empty layout (e.g. {EXAMPLE})")
    for group in groups:
        match = _GROUP.match(group)
        if match is None:
            raise MigLayoutError(f"--mig: {group.strip()!r} is not GPUS:PROFILES (e.g. {EXAMPLE})")
        plan = _plan(match.group("what"))
        for index in _gpus(match.group("gpus"), gpu_count):
            if index in plans:
                raise MigLayoutError(f"--mig: GPU {index} is given twice")
            plans[index] = plan
    return plans


def _gpus(text: str, gpu_count: int) -> range:
    if text == "all":
        return range(gpu_count)
    first, _, last = text.partition("-")
    low, high = int(first), int(last or first)
    if low > high:
        raise MigLayoutError(f"--mig: GPU range {text} runs backwards")
    if high >= gpu_count:
        raise MigLayoutError(f"--mig: no GPU {high} on this node ({gpu_count} GPUs)")
    return range(low, high + 1)


def _plan(what: str) -> GpuMigPlan:
    if what == "none":
        return GpuMigPlan(current=True, pending=True)
    if what == "pending":
        return GpuMigPlan(current=False, pending=True)
    names: list[str] = []
    for item in what.split(","):
        match = _ITEM.match(item.strip())
        if match is None:
            raise MigLayoutError(
                f"--mig: {item.strip()!r} is not a MIG profile such as 3g.40gb or 1g.10gb*7"
            )
        count = int(match.group("count") or 1)
        if not 1 <= count <= _MAX_COUNT:
            raise MigLayoutError(f"--mig: {item.strip()}: a count of 1..{_MAX_COUNT}")
        names.extend([match.group("name")] * count)
    return GpuMigPlan(current=True, pending=True, profiles=tuple(names))


def place(plan: GpuMigPlan, gpu_name: str, index: int) -> tuple[PlacedInstance, ...]:
    """The plan's GPU instances placed on GPU `index`, ordered by GPU-instance ID."""
    available = {p.name: p for p in profiles_for(gpu_name)}
    what = f"GPU {index} ({gpu_name})"
    if not available:
        raise MigLayoutError(f"--mig: {what} does not support MIG (A100 and H100 do)")
    wanted = [_profile(name, available, what) for name in plan.profiles]
    for name, count in Counter(p.name for p in wanted).items():
        if count > available[name].instance_count:
            raise MigLayoutError(
                f"--mig: {what} holds at most {available[name].instance_count} x {name}, "
                f"not {count}"
            )
    slices = sum(p.compute_slices for p in wanted)
    if slices > COMPUTE_SLICES:
        raise MigLayoutError(
            f"--mig: {what} has {COMPUTE_SLICES} compute slices; "
            f"{','.join(plan.profiles)} need {slices}"
        )
    order = sorted(wanted, key=lambda p: (-p.placement_size, -p.compute_slices, p.name))
    starts = _fit(order, [False] * MEMORY_SLICES)
    if starts is None:
        raise MigLayoutError(
            f"--mig: {what} cannot place {','.join(plan.profiles)}: no arrangement of "
            "their allowed placements avoids overlapping memory slices"
        )
    placed = [
        PlacedInstance(gpu_instance_id(p, start), p, start)
        for p, start in zip(order, starts, strict=True)
    ]
    return tuple(sorted(placed, key=lambda x: x.gpu_instance_id))


def _profile(
    name: str, available: Mapping[str, GpuInstanceProfile], what: str
) -> GpuInstanceProfile:
    profile = available.get(name)
    if profile is None:
        raise MigLayoutError(
            f"--mig: {name} is not a MIG profile of {what} (choose from {', '.join(available)})"
        )
    return profile


def _fit(order: Sequence[GpuInstanceProfile], used: list[bool]) -> list[int] | None:
    """Starts for each profile in `order` on the free memory slices, or None."""
    if not order:
        return []
    first, rest = order[0], order[1:]
    for start in first.starts:
        span = range(start, start + first.placement_size)
        if any(used[i] for i in span):
            continue
        for i in span:
            used[i] = True
        found = _fit(rest, used)
        for i in span:
            used[i] = False
        if found is not None:
            return [start, *found]
    return None


def gpu_instance_id(profile: GpuInstanceProfile, start: int) -> int:
    """~ The driver numbers GPU instances by their memory-slice span, like a buddy
    allocator: 0 the whole GPU, 1-2 the halves, 3-6 the quarters, 7-14 the eighths
    (a 1g.5gb at slice 6 is GPU instance 13, a 2g.10gb at 4 is 5, as `nvidia-smi mig
    -lgi` shows)."""
    size = profile.placement_size
    first_id = {8: 0, 4: 1, 2: 3, 1: 7}[size]
    return first_id + start // size


def checked_layout(text: str, gpu_names: Sequence[str]) -> dict[int, GpuMigPlan]:
    """`text` parsed for a node with these GPUs, each GPU's instances placed once to
    prove it fits: MigLayoutError before anything is built."""
    plans = parse_layout(text, len(gpu_names))
    for index, plan in plans.items():
        place(plan, gpu_names[index], index)
    return plans
