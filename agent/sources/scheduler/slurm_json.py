"""`squeue --json` and `sinfo --json` -> plain job and node records.

Why the JSON of the client commands, not their `-o` columns or slurmrestd: it is one
controller RPC each (squeue: REQUEST_JOB_INFO; sinfo: REQUEST_NODE_INFO and
REQUEST_PARTITION_INFO), exactly what `squeue` and `sinfo` cost anyway; it carries what
columns cannot (a running job's GPUs per node in `gres_detail`, each way of asking for
GPUs in its own `tres_per_*` field, the eligible time) with Slurm's own escaping, so an
account name with a `|`, a quote or a newline is data, not a broken row; and it needs no
daemon a site may not run (slurmrestd, with its own authentication). squeue's JSON also
lists jobs that ended in the last MinJobAge (300 s by default), so a job that starts and
ends between two refreshes still counts. Tested with Debian's 22.05 (OpenAPI v0.0.38);
the fields that later releases turned into objects (`{"set": true, "number": N}`) or
lists (a state as `["IDLE", "DRAIN"]`) are read in both forms.

Each job and node object becomes its small record as soon as the parser has read it
(`object_hook`), so the whole document's dictionaries are never held at once: a job's
dictionary of some sixty keys lives only until its closing brace.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nvwatch.agent.sources.scheduler.gres import GpuRequest, array_tasks, gpus_in
from nvwatch.agent.sources.scheduler.slurm_commands import SchedulerError

_SHOWN_CHARS = 80


@dataclass(frozen=True, slots=True)
class Job:
    """One record of squeue: a job, or a pending job array's not yet started tasks."""

    job_id: int
    partitions: tuple[str, ...]  # a pending job may name several (-p a,b)
    account: str
    user: str
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, ... ('+' between several)
    reason: str  # Slurm's state_reason: Resources, Priority, JobHeldUser, ...
    gpus: int  # started: GPUs allocated; pending: GPUs requested, times its array tasks
    submit_time: float
    eligible_time: float | None  # None: not eligible yet (held, waiting on a dependency)
    start_time: float | None  # None: never started
    end_time: float | None  # None: still running (or never started)

    @property
    def pending(self) -> bool:
        return "PENDING" in self.state.split("+")


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    partitions: tuple[str, ...]
    gpus: int  # configured (gres)
    gpus_allocated: int  # in use by jobs (gres_used)
    states: frozenset[str]  # base state and flags, upper case: {"MIXED", "DRAIN"}
    reason: str  # why it is drained or down, as Slurm or an operator wrote it


# the keys that make an object a job of squeue or a node of sinfo (no object nested in
# either has both)
_JOB_KEYS = ("job_id", "job_state")
_NODE_KEYS = ("name", "state")


def parse_jobs(text: str) -> tuple[Job, ...]:
    """Every job record of `squeue --json`; SchedulerError (one line) for anything else."""
    return tuple(_records(text, "squeue", "jobs", _job, _JOB_KEYS))


def parse_nodes(text: str) -> tuple[Node, ...]:
    """Every node of `sinfo --json`; SchedulerError (one line) for anything else."""
    return tuple(_records(text, "sinfo", "nodes", _node, _NODE_KEYS))


@dataclass(frozen=True, slots=True)
class _Unreadable:
    """An object with a record's keys that could not be built: its error, raised with
    its index once the document is known to be Slurm's."""

    error: Exception


def _hook(
    build: Callable[[Mapping[str, Any]], Any], keys: tuple[str, ...]
) -> Callable[[dict[str, Any]], Any]:
    def record(entry: dict[str, Any]) -> Any:
        if not all(key in entry for key in keys):
            return entry
        try:
            return build(entry)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return _Unreadable(exc)

    return record


def _records(
    text: str,
    command: str,
    key: str,
    build: Callable[[Mapping[str, Any]], Any],
    keys: tuple[str, ...],
) -> list[Any]:
    try:
        document = json.loads(text, object_hook=_hook(build, keys))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise SchedulerError(
            f"{command} --json printed something that is not JSON ({exc}): {_shown(text)}"
        ) from exc
    if not isinstance(document, dict):
        raise SchedulerError(f"{command} --json printed no object: {_shown(text)}")
    errors = document.get("errors") or []
    if errors:
        raise SchedulerError(f"{command} --json reported an error: {_error_text(errors[0])}")
    entries = document.get(key)
    if not isinstance(entries, list):
        raise SchedulerError(f"{command} --json printed no {key!r} list")
    records = []
    for index, entry in enumerate(entries):
        try:
            records.append(_built(entry, build))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SchedulerError(
                f"{command} --json: {key} entry {index} is unreadable "
                f"({type(exc).__name__}: {_shown(str(exc))})"
            ) from exc
    return records


def _built(entry: Any, build: Callable[[Mapping[str, Any]], Any]) -> Any:
    """The record the hook built; an entry without a record's keys is built here, so it
    fails with the key it lacks."""
    if isinstance(entry, _Unreadable):
        raise entry.error
    if isinstance(entry, Job | Node):
        return entry
    return build(entry)


def _job(entry: Mapping[str, Any]) -> Job:
    state = _state_words(entry["job_state"])
    pending = "PENDING" in state
    started = _time(entry.get("start_time")) if not pending else None
    request = GpuRequest(
        per_job=_text(entry.get("tres_per_job")),
        per_node=_text(entry.get("tres_per_node")),
        per_task=_text(entry.get("tres_per_task")),
        per_socket=_text(entry.get("tres_per_socket")),
    )
    requested = request.total(
        nodes=_int(entry.get("node_count")),
        tasks=_int(entry.get("tasks")),
        sockets_per_node=_int(entry.get("sockets_per_node")),
    )
    if pending:
        gpus = requested * array_tasks(_text(entry.get("array_task_string")))
    else:
        # what the job holds, node by node; a job that has ended keeps its request only
        held = sum(gpus_in(str(detail)) for detail in entry.get("gres_detail") or ())
        gpus = held or requested
    # the few distinct names and states shared by every record that has them, so a
    # queue of 100,000 jobs holds a handful of each, not 100,000
    return Job(
        job_id=_int(entry["job_id"]),
        partitions=_partitions(_text(entry.get("partition"))),
        account=sys.intern(_text(entry.get("account"))),
        user=sys.intern(_text(entry.get("user_name"))),
        state=sys.intern("+".join(sorted(state))),
        reason=sys.intern(_text(entry.get("state_reason"))),
        gpus=gpus,
        submit_time=_time(entry.get("submit_time")) or 0.0,
        eligible_time=_time(entry.get("eligible_time")),
        start_time=started if started is not None and _ran(entry) else None,
        end_time=_time(entry.get("end_time")) if not pending and _ended(state) else None,
    )


@functools.lru_cache(maxsize=1024)
def _partitions(text: str) -> tuple[str, ...]:
    """'a,b' -> ('a', 'b'): one tuple per distinct value (a cluster has few)."""
    return tuple(sys.intern(p) for p in text.split(",") if p)


# states of a job that has stopped running (a running or suspended one has not)
_ENDED = frozenset(
    {
        "COMPLETED",
        "COMPLETING",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)


def _ended(state: frozenset[str]) -> bool:
    return bool(_ENDED & state)


def _ran(entry: Mapping[str, Any]) -> bool:
    """A job cancelled while pending has a start time (the cancel's) but never had nodes."""
    return bool(_text(entry.get("nodes")) or _text(entry.get("batch_host")))


def _node(entry: Mapping[str, Any]) -> Node:
    states = _state_words(entry.get("state")) | _state_words(entry.get("state_flags"))
    return Node(
        name=_text(entry["name"]),
        partitions=tuple(_text(p) for p in entry.get("partitions") or ()),
        gpus=gpus_in(_text(entry.get("gres"))),
        gpus_allocated=gpus_in(_text(entry.get("gres_used"))),
        states=states,
        reason=_text(entry.get("reason")),
    )


def _state_words(value: object) -> frozenset[str]:
    """'idle', 'MIXED+DRAIN', ['IDLE', 'DRAIN'] -> {'IDLE', 'DRAIN'}."""
    if value is None:
        return frozenset()
    items = value if isinstance(value, list) else str(value).split("+")
    return frozenset(str(item).strip().upper() for item in items if str(item).strip())


def _time(value: object) -> float | None:
    """A Unix time, or None for Slurm's 0 (not set) and an unset or infinite object."""
    number = _number(value)
    return float(number) if number else None


def _int(value: object) -> int:
    return _number(value) or 0


def _number(value: object) -> int | None:
    """An integer field as 22.05 writes it (a number or null) or later releases do
    ({"set": true, "infinite": false, "number": 5})."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {_shown(repr(value))}")
    return int(value)


def _text(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {_shown(repr(value))}")
    return value


def _error_text(error: object) -> str:
    """22.05's error object, e.g. with the controller down: source slurm_load_jobs,
    description "Failed while looking for jobs", error "Unspecified error"."""
    if not isinstance(error, dict):
        return _shown(str(error))
    parts = [str(error[key]) for key in ("source", "description", "error") if error.get(key)]
    return _shown(": ".join(parts) or str(error))


def _shown(text: str) -> str:
    """At most a short line of what Slurm printed, for a reason that stays one line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _SHOWN_CHARS else flat[:_SHOWN_CHARS] + "…"
