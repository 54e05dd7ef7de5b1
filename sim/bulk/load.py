"""Each GPU's load over the range: jobs that hold a whole node, with idle gaps between.

A node alternates between a job (every GPU busy at its own level, a few per cent of
noise per sample) and idle time (no load), the lengths drawn from exponential
distributions: a fleet where most nodes run long training jobs, as a GPU cluster's
capacity review sees, busy about BUSY_SHARE of the time.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

JOB_MEAN_S = 6 * 3600.0
IDLE_MEAN_S = 1 * 3600.0
BUSY_SHARE = JOB_MEAN_S / (JOB_MEAN_S + IDLE_MEAN_S)
BUSY_LEVEL = (0.80, 0.99)  # a busy GPU's mean load, drawn per GPU per job
NOISE = 0.03  # per-sample spread of a busy GPU's load


def node_load(
    rng: np.random.Generator, gpus: int, samples: int, step_s: float
) -> tuple[npt.NDArray[np.float64], list[tuple[int, int]]]:
    """The load (0..1) of each of a node's `gpus` at each of `samples` steps, and the
    jobs: each one's first step and the step after its last."""
    jobs = []
    busy = np.zeros(samples, dtype=bool)
    level = np.zeros((gpus, samples))
    position = 0
    running = rng.random() < BUSY_SHARE  # a range starts in the middle of things
    while position < samples:
        mean = JOB_MEAN_S if running else IDLE_MEAN_S
        length = max(1, round(rng.exponential(mean) / step_s))
        end = min(samples, position + length)
        if running:
            jobs.append((position, end))
            busy[position:end] = True
            level[:, position:end] = rng.uniform(*BUSY_LEVEL, size=(gpus, 1))
        position, running = end, not running
    noisy = level + rng.normal(0.0, NOISE, size=(gpus, samples))
    return np.where(busy, np.clip(noisy, 0.0, 1.0), 0.0), jobs
