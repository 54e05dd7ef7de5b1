"""GPU allocations (nvwatch_gpu_allocation_info) joined with utilization, per step.

`count_over_time(allocation_info[step])` over `count_over_time(gpu_up[step])` of the same
GPU is the share of the step a job held the GPU (both are scraped together), so a job
that ran 20 minutes of an hour gets a third of a GPU-hour, and its busy share is that
times the GPU's utilization in the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nvwatch.report.context import Context, NodeKey
from nvwatch.report.frame import Array

OWNER_LABELS = ("scheduler", "job_id", "user", "account", "pod", "namespace", "container")


@dataclass(frozen=True)
class Allocations:
    labels: list[dict[str, str]]  # one allocation (job x GPU) per row
    held: Array  # GPUs held per step (0..1 per row)
    busy: Array  # held x utilization per step

    def per_node(self, ctx: Context) -> dict[NodeKey, float]:
        """Allocated GPU-hours per node."""
        out: dict[NodeKey, float] = {}
        for labels, row in zip(self.labels, self.held, strict=True):
            node = ctx.node_of(labels)
            out[node] = out.get(node, 0.0) + ctx.hours(row)
        return out


def allocations(ctx: Context) -> Allocations | None:
    """None when the allocation metric does not exist in the range (no scheduler plugin)."""
    frame = ctx.frame("allocation")
    if not len(frame):
        return None
    gpu_key = (*ctx.node_labels, "gpu")
    samples = dict(
        zip(ctx.frame("gpu_samples").keys(gpu_key), ctx.frame("gpu_samples").values, strict=True)
    )
    util = dict(zip(ctx.frame("gpu_util").keys(gpu_key), ctx.frame("gpu_util").values, strict=True))
    missing = np.full(ctx.window.steps, np.nan)
    held = np.zeros_like(frame.values)
    busy = np.zeros_like(frame.values)
    for row, key in enumerate(frame.keys(gpu_key)):
        per_gpu = samples.get(key, missing)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.clip(frame.values[row] / per_gpu, 0.0, 1.0)
        held[row] = np.nan_to_num(share)
        busy[row] = held[row] * np.nan_to_num(util.get(key, missing))
    return Allocations(frame.labels, held, busy)
