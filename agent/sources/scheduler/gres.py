"""GPU counts in Slurm's GRES and TRES strings, and the tasks of a pending job array.

Slurm writes a job's GPU request in the `tres_per_*` fields of `squeue --json`, one per
way of asking: `--gres=gpu:2` and `--gpus-per-node=2` fill tres_per_node, `--gpus=2`
tres_per_job, `--gpus-per-task=1` tres_per_task, `--gpus-per-socket` tres_per_socket.
22.05 writes `gres:gpu:2` (typed: `gres:gpu:a100:2`), later releases `gres/gpu:2` or
`gres/gpu=2`; a node's `gres`, `gres_used` and a running job's `gres_detail` are
`gpu:2`, `gpu:a100:4(S:0-1)`, `gpu:1(IDX:0)`, `gpu:a100(CNT:2)` (a count without the
devices' indices), several types separated by commas.
Every form is read here; what is not a GPU (mps, shard, a license) counts nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GPU = "gpu"


def split_entries(text: str) -> list[str]:
    """'gpu:a:1(IDX:0,2),gpu:b:1' -> ['gpu:a:1(IDX:0,2)', 'gpu:b:1']: commas inside
    parentheses belong to the entry."""
    entries: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            entries.append("".join(current))
            current = []
        else:
            current.append(char)
    entries.append("".join(current))
    return [entry.strip() for entry in entries if entry.strip()]


def gpus_in(text: str | None) -> int:
    """GPUs named in a GRES or TRES string: the counts of its `gpu` entries, summed.
    An entry of `gpu` without a count means one (Slurm's default)."""
    if not text:
        return 0
    return sum(_entry_gpus(entry) for entry in split_entries(text))


_COUNTED = re.compile(r"\(CNT:(\d+)\)")


def _entry_gpus(entry: str) -> int:
    body, _, detail = entry.partition("(")  # (S:0-1), (IDX:0) say where, not how many
    for prefix in ("gres:", "gres/"):
        body = body.removeprefix(prefix)
    name, _, rest = body.replace("=", ":").partition(":")
    if name != GPU:
        return 0
    counted = _COUNTED.search("(" + detail)
    if counted:
        return int(counted.group(1))
    if not rest:
        return 1
    return _count(rest.rsplit(":", 1)[-1])


def _count(token: str) -> int:
    if token.isascii() and token.isdigit():
        return int(token)
    return 1  # only a type was given (gpu:a100): one GPU of that type


@dataclass(frozen=True)
class GpuRequest:
    """A job's GPU request as squeue reports it: per job, per node, per task, per socket."""

    per_job: str = ""
    per_node: str = ""
    per_task: str = ""
    per_socket: str = ""

    def total(self, nodes: int, tasks: int, sockets_per_node: int) -> int:
        """Whole GPUs the job needs: per node times nodes, per task times tasks, per
        socket times sockets; the largest when a job gives several (Slurm must meet all)."""
        return max(
            gpus_in(self.per_job),
            gpus_in(self.per_node) * max(1, nodes),
            gpus_in(self.per_task) * max(1, tasks),
            gpus_in(self.per_socket) * max(1, sockets_per_node) * max(1, nodes),
        )


_STEP = re.compile(r"^(\d+)-(\d+)(?::(\d+))?$")


def array_tasks(spec: str | None) -> int:
    """Tasks a pending array record stands for: '1-10%2' -> 10, '1,3,5-9:2' -> 5; an
    empty or unreadable spec is one job (what squeue's own record is)."""
    if not spec:
        return 1
    total = 0
    for part in spec.split("%", 1)[0].split(","):
        part = part.strip()
        if part.isascii() and part.isdigit():
            total += 1
            continue
        ranged = _STEP.match(part)
        if ranged is None:
            return 1
        first, last, step = int(ranged.group(1)), int(ranged.group(2)), int(ranged.group(3) or 1)
        if last < first or step < 1:
            return 1
        total += (last - first) // step + 1
    return max(1, total)
