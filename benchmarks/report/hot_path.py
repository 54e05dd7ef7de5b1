"""The hot path's targets beyond the poll median: the dgx-h100 poll's p99, the
16-GPU dgx2's median, the agent's own share of a poll (the simulator taken out), and the
stages one by one (build_exposition, samples to series, InfiniBand collect)."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.poll_cost import PollCost
from benchmarks.report.cost import simulator_share
from benchmarks.report.model import (
    POLL_CPU_TARGET_S,
    TARGET_PROFILE,
    Results,
    Verdict,
    cost_of,
    ms,
    pct,
    target_cost,
)

POLL_P99_TARGET_S = 0.025
WIDE_PROFILE = "dgx2"  # 16 GPUs: the median target holds there too
OWN_SHARE_TARGET_S = 0.008
BUILD_TARGET_S = 0.004
PREPARE_TARGET_S = 0.002
IB_COLLECT_TARGET_S = 0.0015
IB_TARGET_HCAS = 8
PREPARE_SOURCES = ("nvml", "infiniband", "host")


@dataclass(frozen=True)
class OwnShare:
    """The poll CPU median less the simulator's part of it, two ways."""

    poll: float  # median poll CPU
    collect_nvml: float | None  # median NVML collect
    simulator_nvml: float | None  # that collect times its cProfile simulator share
    simulator_poll_share: float | None  # the simulator's cProfile share of a whole poll

    @property
    def from_nvml(self) -> float | None:
        """Judged: the share is applied to the one stage it was profiled on, the only one
        the simulator runs in (it is advanced between polls, outside every timer)."""
        return None if self.simulator_nvml is None else self.poll - self.simulator_nvml

    @property
    def from_poll(self) -> float | None:
        """The whole-poll split's share applied to the whole poll, for comparison: there
        cProfile's cost per call also weighs stages with few C calls (gzip) against the
        call-dense simulator, so the share is less sure."""
        share = self.simulator_poll_share
        return None if share is None else self.poll * (1 - share)


def own_share(results: Results) -> OwnShare | None:
    cost = target_cost(results)
    if cost is None or (results.nvml_split is None and results.poll_split is None):
        return None
    collect = cost.stages.get("collect nvml")
    nvml = results.nvml_split
    sim = None if collect is None or nvml is None else collect.median * simulator_share(nvml)
    poll = results.poll_split
    return OwnShare(
        poll=cost.total.median,
        collect_nvml=None if collect is None else collect.median,
        simulator_nvml=sim,
        simulator_poll_share=None if poll is None else simulator_share(poll),
    )


def hot_path_verdicts(results: Results) -> list[Verdict]:
    out: list[Verdict] = []
    cost = target_cost(results)
    if cost is not None:
        out.append(
            Verdict(
                f"{TARGET_PROFILE} simulated poll CPU (p99) <= {ms(POLL_P99_TARGET_S)}",
                f"{ms(cost.total.p99)} (of {cost.polls} polls)",
                cost.total.p99 <= POLL_P99_TARGET_S,
            )
        )
    wide = cost_of(results, WIDE_PROFILE)
    if wide is not None:
        gpus = f"{wide.gpus} GPUs" if wide.gpus else "GPUs not recorded"
        out.append(
            Verdict(
                f"{WIDE_PROFILE} ({gpus}) simulated poll CPU (median) <= {ms(POLL_CPU_TARGET_S)}",
                f"{ms(wide.total.median)} (p99 {ms(wide.total.p99)})",
                wide.total.median <= POLL_CPU_TARGET_S,
            )
        )
    share = own_share(results)
    if share is not None:
        out.append(_own_share_verdict(share))
    if cost is not None:
        out += _stage_verdicts(cost)
    return out


def _own_share_verdict(share: OwnShare) -> Verdict:
    target = (
        f"{TARGET_PROFILE} agent's own poll CPU (median poll CPU less the simulator's "
        f"share) <= {ms(OWN_SHARE_TARGET_S)}"
    )
    judged = share.from_nvml if share.from_nvml is not None else share.from_poll
    assert judged is not None  # own_share needs one of the two splits
    if share.from_nvml is not None:
        assert share.simulator_nvml is not None and share.collect_nvml is not None
        figure = (
            f"{ms(judged)} = {ms(share.poll)} poll - {ms(share.simulator_nvml)} simulator "
            f"(its cProfile share of the {ms(share.collect_nvml)} NVML collect)"
        )
        if share.from_poll is not None:
            figure += f"; the whole-poll split's share would leave {ms(share.from_poll)}"
    else:
        assert share.simulator_poll_share is not None
        figure = (
            f"{ms(judged)} = {ms(share.poll)} poll less the simulator's "
            f"{pct(share.simulator_poll_share)} cProfile share of a whole poll"
        )
    return Verdict(target, figure, judged <= OWN_SHARE_TARGET_S)


def _stage_verdicts(cost: PollCost) -> list[Verdict]:
    out: list[Verdict] = []
    build = cost.stages.get("build_exposition")
    if build is not None:
        out.append(
            Verdict(
                f"{TARGET_PROFILE} build_exposition (text + gzip, median) <= {ms(BUILD_TARGET_S)}",
                f"{ms(build.median)} (p99 {ms(build.p99)})",
                build.median <= BUILD_TARGET_S,
            )
        )
    prepare = _prepare_figure(cost)
    if prepare is not None:
        seconds, how = prepare
        out.append(
            Verdict(
                f"{TARGET_PROFILE} samples to series (prepare, every source) <= "
                f"{ms(PREPARE_TARGET_S)}",
                f"{ms(seconds)} ({how})",
                seconds <= PREPARE_TARGET_S,
            )
        )
    ib = cost.stages.get("collect infiniband")
    if ib is not None:
        out.append(
            Verdict(
                f"InfiniBand collect for {IB_TARGET_HCAS} HCAs (median) <= "
                f"{ms(IB_COLLECT_TARGET_S)}",
                f"{ms(ib.median)} (p99 {ms(ib.p99)}; {TARGET_PROFILE}, {cost.hcas} HCAs)",
                # fewer HCAs than the target names would not show it
                ib.median <= IB_COLLECT_TARGET_S and cost.hcas >= IB_TARGET_HCAS,
            )
        )
    return out


def _prepare_figure(cost: PollCost) -> tuple[float, str] | None:
    """The per-poll sum's median where the run has it, else the sum of the medians."""
    names = [s for s in PREPARE_SOURCES if f"prepare {s}" in cost.stages]
    if cost.prepare_total is not None:
        return cost.prepare_total.median, f"median of the per-poll sum of {', '.join(names)}"
    if not names:
        return None
    medians = sum(cost.stages[f"prepare {s}"].median for s in names)
    return medians, f"sum of the medians of {', '.join(names)}"


def own_share_section(results: Results) -> str:
    share = own_share(results)
    if share is None:
        return ""
    lines = [
        f"### The agent's own share of a {TARGET_PROFILE} poll",
        "",
        f"The median poll CPU, {ms(share.poll)}, less what the simulator spent in it. The "
        "simulator runs only inside the NVML collect (it is advanced between polls, outside "
        "every timer), so the judged figure takes its cProfile share of that stage alone:",
        "",
        "| basis | simulator | agent's own |",
        "|---|---|---|",
    ]
    if share.from_nvml is not None:
        assert share.simulator_nvml is not None and share.collect_nvml is not None
        lines.append(
            f"| simulator share of the {ms(share.collect_nvml)} NVML collect (judged) | "
            f"{ms(share.simulator_nvml)} | **{ms(share.from_nvml)}** |"
        )
    if share.from_poll is not None:
        assert share.simulator_poll_share is not None
        lines.append(
            f"| simulator share of a whole poll ({pct(share.simulator_poll_share)}) | "
            f"{ms(share.poll - share.from_poll)} | {ms(share.from_poll)} |"
        )
    lines += [
        "",
        "cProfile adds a cost per Python call, which weighs on the call-dense simulator and "
        "agent code and not on C calls such as zlib's, so a share is surest on the stage it "
        "was profiled on; the whole-poll basis is shown for comparison.",
        "",
    ]
    return "\n".join(lines)


def hot_path_miss(results: Results, missed: dict[str, Verdict]) -> str | None:
    """The misses-section line for these targets (the poll median and p99 of dgx-h100 are
    explained with the poll's breakdown)."""
    mine = [v for v in hot_path_verdicts(results) if v.target in missed]
    mine = [v for v in mine if not v.target.startswith(f"{TARGET_PROFILE} simulated poll")]
    if not mine:
        return None
    parts = ["- **Hot path**: " + "; ".join(f"{v.target}: {v.figure}" for v in mine) + "."]
    wide, cost = cost_of(results, WIDE_PROFILE), target_cost(results)
    if any(v.target.startswith(WIDE_PROFILE) for v in mine) and wide and cost:
        parts.append(_wider(wide, cost))
    split = results.render_split
    if any("build_exposition" in v.target for v in mine) and split is not None:
        text = split.renderer or split.generate_latest
        parts.append(
            f"build_exposition is the text ({ms(text.median)} for {split.samples:,} samples) "
            f"and gzip ({ms(split.gzip.median)}), timed apart in its split above."
        )
    parts.append("The top functions of a whole poll are in the profile table above.")
    return " ".join(parts)


def _wider(wide: PollCost, cost: PollCost) -> str:
    """What grows from dgx-h100 to the 16-GPU node, stage by stage (medians)."""
    grown = [
        f"{stage} {ms(cost.stages[stage].median)} -> {ms(wide.stages[stage].median)}"
        for stage in ("collect nvml", "prepare nvml", "build_exposition")
        if stage in cost.stages and stage in wide.stages
    ]
    return f"From {TARGET_PROFILE} to {WIDE_PROFILE}: " + ", ".join(grown) + "."
