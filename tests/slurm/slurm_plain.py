"""What squeue, sinfo and sdiag print in their plain columns, parsed by the tests.

The scheduler source reads Slurm's JSON (agent/sources/scheduler/); these read the columns
an operator reads, with parsing of their own, so the two can be compared.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from tests.slurm.cluster import Cluster

_GPU_COUNT = re.compile(r"gpu(?::[A-Za-z0-9_]+)?:(\d+)")


@dataclass(frozen=True)
class PlainNode:
    name: str
    partition: str
    gpus: int
    used: int
    state: str  # sinfo's long state: idle, mixed, down*, draining, ...
    reason: str


def plain_nodes(cluster: Cluster) -> list[PlainNode]:
    columns = "NodeHost:40,Partition:40,Gres:60,GresUsed:60,StateLong:40,Reason:200"
    text = cluster.run("sinfo", "-N", "-h", "-O", columns)
    nodes = []
    for line in text.splitlines():
        name, partition, gres, used, state, *reason = line.split()
        nodes.append(
            PlainNode(
                name,
                partition.rstrip("*"),
                gpus_in_text(gres),
                gpus_in_text(used),
                state,
                " ".join(reason),
            )
        )
    return nodes


def gpus_in_text(gres: str) -> int:
    return sum(int(count) for count in _GPU_COUNT.findall(gres))


def unavailable(node: PlainNode) -> str | None:
    """Why sinfo's state takes the node's GPUs out of service, in the series' words."""
    if node.state.endswith("*"):
        return "not_responding"
    if node.state in ("down",):
        return "down"
    if node.state in ("drained", "draining", "drain"):
        return "drained"
    return None


def expected_capacity(
    nodes: list[PlainNode],
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    gpus: dict[tuple[str, str], int] = {}
    down: dict[tuple[str, str], int] = {}
    for node in nodes:
        why = unavailable(node)
        rest = "unavailable" if why else "idle"
        for state, count in (("allocated", node.used), (rest, node.gpus - node.used)):
            gpus[node.partition, state] = gpus.get((node.partition, state), 0) + count
        if why:
            down[node.partition, why] = down.get((node.partition, why), 0) + 1
    return {key: n for key, n in gpus.items() if n}, down


@dataclass(frozen=True)
class PlainPending:
    job: str  # the job id, without its array task
    partitions: tuple[str, ...]
    reason: str
    eligible: float | None


def plain_pending(cluster: Cluster) -> list[PlainPending]:
    """One line per pending array task (-r), so a task is a line."""
    columns = "JobArrayID:30,Partition:40,EligibleTime:30,Reason:200"
    text = cluster.run("squeue", "-h", "-r", "-t", "PD", "-O", columns)
    pending = []
    for line in text.splitlines():
        job, partitions, eligible, *reason = line.split()
        pending.append(
            PlainPending(
                job.split("_")[0],
                tuple(partitions.split(",")),
                " ".join(reason),
                None if eligible in ("N/A", "Unknown") else epoch(eligible),
            )
        )
    return pending


def epoch(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def rpc_counts(cluster: Cluster) -> dict[str, int]:
    """sdiag's count of each RPC type the controller served."""
    text = cluster.run("sdiag")
    section = text.split("by message type")[1].split("by user")[0]
    return {
        name: int(count)
        for name, count in re.findall(r"^\s+(\w+)\s+\(\s*\d+\)\s+count:(\d+)", section, re.M)
    }


def rpc_difference(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What was asked of the controller in between: reads of its state (_INFO), less
    sdiag's own (REQUEST_STATS_INFO)."""
    return {
        name: count - before.get(name, 0)
        for name, count in after.items()
        if name.endswith("_INFO") and name != "REQUEST_STATS_INFO" and count != before.get(name, 0)
    }


@dataclass(frozen=True)
class PlainTimes:
    eligible: float
    start: float
    end: float | None


def times(cluster: Cluster, job: str) -> PlainTimes:
    columns = "EligibleTime:30,StartTime:30,EndTime:30,State:20"
    line = cluster.run("squeue", "-h", "-t", "all", "-j", job, "-O", columns)
    eligible, start, end, state = line.split()
    ended = state not in ("RUNNING", "COMPLETING")
    return PlainTimes(epoch(eligible), epoch(start), epoch(end) if ended else None)


@dataclass(frozen=True)
class PlainStart:
    """A job (or array task) that has started, as squeue's plain columns show it."""

    account: str
    eligible: float
    start: float

    @property
    def wait(self) -> float:
        return self.start - self.eligible


def plain_started(cluster: Cluster) -> dict[str, PlainStart]:
    """Every job squeue lists that is past pending (running, or ended within MinJobAge),
    by its id (an array task as `job_task`)."""
    columns = "JobArrayID:30,Account:80,State:20,EligibleTime:30,StartTime:30"
    text = cluster.run("squeue", "-h", "-r", "-t", "all", "-O", columns)
    started = {}
    for line in text.splitlines():
        job, account, state, eligible, start = line.split()
        if state != "PENDING" and start not in ("N/A", "Unknown"):
            started[job] = PlainStart(account, epoch(eligible), epoch(start))
    return started
