"""Turn one run's measurements into the markdown of docs/performance.md.

Every number printed comes from `Results`; the prose around them only explains. Targets
are judged in `verdicts`, and a miss is printed as MISS beside its figure.

    model     the results, the targets and the number formats
    verdicts  each target judged
    cost      poll CPU, where its time goes, series per node
    hot_path  the poll's p99, dgx2, the agent's own share, the stages' targets
    serving   /metrics latency, node_exporter side by side
    memory    resident memory over many polls
    nvml_calls  NVML library calls per GPU per poll, and their target
    sim_cost  whole-process CPU of serve --simulate and of a simulated fleet
    peer      nvitop-exporter side by side: CPU per exported sample
    real_gpu  NVML on a real driver, or how to measure it
    misses    why each missed target missed, and a fix
    markdown  the header and the sections in order
"""

from __future__ import annotations

from benchmarks.report.markdown import render_markdown
from benchmarks.report.model import Machine, Results, Verdict
from benchmarks.report.verdicts import verdicts

__all__ = ["Machine", "Results", "Verdict", "render_markdown", "verdicts"]
