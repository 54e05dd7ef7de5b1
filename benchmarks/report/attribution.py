"""The attribution section: what `--attribution slurm` adds to a poll, part by part, and
its target (<= 1 ms per poll on a dgx-h100 with 64 GPU processes)."""

from __future__ import annotations

from benchmarks.attribution_cost import ATTRIBUTION_TARGET_S
from benchmarks.report.model import Results, Verdict, ms


def attribution_verdicts(results: Results) -> list[Verdict]:
    cost = results.attribution
    if cost is None:
        return []
    return [
        Verdict(
            f"attribution on a {cost.profile} with {cost.processes} GPU processes adds "
            f"<= {ms(ATTRIBUTION_TARGET_S)} per poll",
            f"{ms(cost.per_poll)} (poll path {ms(cost.poll_path)}, refresh "
            f"{ms(cost.refresh_per_poll)} per poll)",
            cost.per_poll <= ATTRIBUTION_TARGET_S and cost.allocations > 0 and cost.labelled > 0,
        )
    ]


def attribution_section(results: Results) -> str:
    cost = results.attribution
    if cost is None:
        return ""
    lines = [
        "## Attribution",
        "",
        f"`--attribution slurm` on a simulated {cost.profile} whose GPUs report "
        f"{cost.processes} real processes, each in its own Slurm job (fixture /proc with",
        "cgroup v2 paths and environments, and a job-mapping directory): process CPU of each",
        "part the poll runs (median), and of one refresh on the refresher's own thread,",
        f"spread over the polls of one {cost.refresh_interval:g} s attribution interval.",
        f"The last poll had {cost.allocations} allocation series and {cost.labelled} process "
        "series with a job label (the rest fell to the per-GPU process cap).",
        "",
        "| part | CPU per poll |",
        "|---|---|",
    ]
    lines += [f"| {name} | {ms(seconds)} |" for name, seconds in cost.parts.items()]
    lines += [
        f"| refresh ({ms(cost.refresh.median)} each, p99 {ms(cost.refresh.p99)}) | "
        f"{ms(cost.refresh_per_poll)} |",
        f"| **total** | **{ms(cost.per_poll)}** |",
        "",
        f"For context, the whole poll (median of {cost.polls}): {ms(cost.without.median)} "
        f"without attribution, {ms(cost.with_attribution.median)} with it; their difference "
        "is within the poll-to-poll noise of this machine, so the parts above are the figure.",
        "",
    ]
    return "\n".join(lines)
