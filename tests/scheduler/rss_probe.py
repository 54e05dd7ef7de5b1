"""A child process that refreshes the scheduler source once and reports its own memory.

Run as `python -m tests.scheduler.rss_probe ENV_JSON [MAX_OUTPUT_BYTES]` with the fake
commands' environment; prints one JSON object: the RSS before the refresh (the process's
own baseline, everything imported and warm), the peak RSS of its whole life
(the kernel's VmHWM), the RSS after the refresh, and the source's error. A process of its own,
so no pytest state counts, and the peak is the kernel's, not a sample. Only
SchedulerSource's long-standing arguments are used, so the same probe measures the code
before the cap (MAX_OUTPUT_BYTES then unused).
"""

from __future__ import annotations

import gc
import inspect
import json
import sys
from pathlib import Path

import psutil

from nvwatch.agent.sources import SourceUnavailable
from nvwatch.agent.sources.scheduler import source as source_module


def _rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def _peak_mib() -> float:
    """VmHWM: this process's peak RSS. Not ru_maxrss, which keeps the parent's peak
    across fork and exec (a probe started by pytest would report pytest's)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    env = json.loads(sys.argv[1])
    kwargs: dict[str, object] = {}
    if (
        len(sys.argv) > 2
        and "client" in inspect.signature(source_module.SchedulerSource).parameters
    ):
        from nvwatch.agent.sources.scheduler.slurm_commands import SlurmClient

        kwargs["client"] = SlurmClient(int(sys.argv[2]))
    source = source_module.SchedulerSource(
        interval=3600.0,
        timeout=120.0,
        max_accounts=50,
        env=env,
        **kwargs,  # type: ignore[arg-type]
    )
    gc.collect()
    before = _rss_mib()
    peak_before = _peak_mib()
    sample = source.refresh()
    peak = _peak_mib()
    gc.collect()
    after = _rss_mib()
    error = None
    try:
        source.collect()
    except SourceUnavailable as exc:
        error = str(exc)
    finally:
        source.close()
    print(
        json.dumps(
            {
                "baseline_mib": before,
                "peak_before_mib": peak_before,
                "peak_mib": peak,
                "after_mib": after,
                "up": sample is not None,
                "error": error,
            }
        )
    )


if __name__ == "__main__":
    main()
