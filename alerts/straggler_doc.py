"""The *Job stragglers* section of docs/alerts.md: why the rules compare ranks of one
job, which signals they compare, the score, the slowdown estimate, the marker for
pipeline-parallel jobs, what the rules cost and what they cannot see."""

from __future__ import annotations

from nvwatch.alerts.chains import chain_depths
from nvwatch.alerts.recording_straggler import (
    NODE,
    RANK,
    RANKS,
    SLOWDOWN,
    TOLERANCE,
    Signal,
    activity,
    clock,
    link_signals,
    node_signals,
    straggler_groups,
)
from nvwatch.alerts.render import prometheus_recording
from nvwatch.alerts.stragglers.accuracy_doc import accuracy_lines
from nvwatch.mixin.config import MixinConfig

# what each signal stands for in a synchronous job, and the cause it points at
_MEANING = {
    "nvwatch_gpu_sm_clock": (
        "SM clock over its maximum (5m average)",
        "lower: the rank computes slower; power-capped, thermal or clock-other by the "
        "clock event reason it had",
    ),
    "nvwatch_gpu_activity": (
        "tensor activity (GPM); power over its enforced limit on boards without GPM",
        "higher: the rank that never waits; unknown when nothing else explains it",
    ),
    "nvwatch_gpu_pcie_link": (
        "PCIe bandwidth in halvings: generation + log2(width), the best of 5m",
        "lower: pcie",
    ),
    "nvwatch_nvlink_up": ("NVLinks up", "fewer: nvlink"),
    "nvwatch_nvlink_errors": (
        "NVLink replays and recoveries per second, all links",
        "more: nvlink",
    ),
    "nvwatch_nvlink_transmit_bytes": (
        "NVLink bytes sent per second, against the job's GPUs on the same node",
        "lower: nvlink",
    ),
    "nvwatch_host_cpu_utilization": (
        "host CPU utilization (5m average), of a node that holds this job alone",
        "higher, and at least starvation_host_cpu: host-cpu",
    ),
    "nvwatch_ib_port_transmit_wait": (
        "share of time an IB port had data and no credits, of such a node",
        "higher: infiniband",
    ),
    "nvwatch_ib_port_rate": ("an active IB port's rate in halvings", "lower: infiniband"),
}


def _signals(cfg: MixinConfig) -> tuple[Signal, ...]:
    return (clock(cfg), activity(cfg), *link_signals(cfg), *node_signals(cfg))


def _signal_table(cfg: MixinConfig) -> list[str]:
    lines = [
        "| value (per rank) | job median | score | what it is | bad direction: cause "
        "| smallest gap | tolerance applies |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in _signals(cfg):
        what, cause = _MEANING[s.metric]
        floor = f"{s.floor:g}" + (" of the node median" if s.per_node else "")
        lines.append(
            f"| `{s.record}` | `{s.median}` | `{s.score}` | {what} | {cause} | {floor} "
            f"| {'yes' if s.load else 'no'} |"
        )
    return lines


def _vmalert_lag(cfg: MixinConfig) -> str:
    """How much later than under Prometheus a job's scores are whole under vmalert."""
    groups = prometheus_recording(cfg)["groups"]
    names = [g.name for g in straggler_groups(cfg)]
    vmalert = max(chain_depths(groups)[n] for n in names)
    prometheus = max(chain_depths(groups, each_rule_waits=False)[n] for n in names)
    return (
        "Under vmalert (deploy/scale) the scores come later: vmalert writes what a rule "
        "records back over remote write, so another rule reads it an evaluation later, "
        "where Prometheus' rules read the earlier rules of their own group at once. The "
        f"straggler rules chain {vmalert} deep: a job's scores are whole {vmalert} "
        f"evaluations (every {cfg.evaluation_interval}) after its ranks are first "
        f"compared, against {prometheus} under Prometheus (one per group the chain "
        f"passes through); NvwatchJobStraggler's {cfg.straggler_for} runs from then "
        "(counted from the rules by alerts/chains.py; docs/scale.md's thousand-node "
        "run waits as long before it reads vmalert's series)."
    )


def doc_lines(cfg: MixinConfig) -> list[str]:
    k = f"{cfg.straggler_mad_multiple:g}"
    return [
        "",
        "## Job stragglers (recording rules)",
        "",
        "A synchronous job (data-parallel training over NCCL) steps in lockstep, so it "
        "runs at the pace of its slowest rank. A GPU held at a power cap or throttling "
        "in a hot spot, a degraded NVLink, a congested or trained-down IB port, a PCIe "
        "link trained down or a CPU-starved host slows every GPU of the job, and every "
        "GPU still looks busy: the healthy ranks sit in NCCL kernels waiting, their "
        "utilization near 100 % while their power, SM and tensor activity fall. A "
        "threshold per device cannot tell the culprit from its victims; comparing each "
        "rank with the other ranks of the same job can (Minder, NSDI'25). The culprit is "
        "the rank that does not wait: its clock is lower while its activity stays high, "
        "or its link, port or host differs from the job's others. The groups "
        "`nvwatch-straggler-jobs.rules`, `nvwatch-straggler-links.rules` and "
        "`nvwatch-straggler-nodes.rules` record, for each signal, every rank's value, "
        "its job's median (`quantile(0.5)` by `job_id`) and a score; "
        "NvwatchJobStraggler names the rank whose score reaches 1 for "
        f"{cfg.straggler_for}.",
        "",
        f"A job is compared (`{RANKS}`, the number of its GPUs) when it holds at least "
        f"`straggler_min_gpus` ({cfg.straggler_min_gpus}) whole GPUs with a `job_id` "
        "(with two, either could be the odd one; a Kubernetes pod has no job id to "
        "group by), its allocation is older than `straggler_warmup` "
        f"({cfg.straggler_warmup}: data loading, compilation and NCCL set-up differ by "
        "rank on their own) and its median GPU was at least "
        f"`straggler_busy_utilization` ({cfg.straggler_busy_utilization:.0%}) busy at "
        f"every sample of the last {cfg.rate_window} (a checkpoint or a filesystem stall "
        "idles every rank alike, weighs on every average of the window, and the rank "
        "that writes the checkpoint's index pauses longest: the job is judged again "
        f"{cfg.rate_window} after). "
        f"`{RANK}` is each GPU of such a job; `{NODE}` each node that holds one alone: "
        "the CPUs and IB ports of a node that several jobs share cannot be blamed on one "
        "of them, so such a node takes part in the GPU signals only.",
        "",
        "The score, for a signal whose bad direction is higher (lower: median minus value):",
        "",
        "```",
        "score = (value - job median - the job's tolerance)",
        f"        / max({k} x MAD, the signal's smallest gap)",
        "```",
        "",
        "where MAD is the median absolute deviation of the job's ranks from their "
        "median. A score of 1 is the threshold. The median and MAD are robust: the "
        "straggler itself moves neither, however far off it is, so one rank in a job of "
        "three or more stands out cleanly. The MAD term asks a noisy job for a larger "
        "gap; the smallest gap (the floor) keeps a tight job, MAD near 0, from making "
        "noise look huge. Two ranks (the nodes of a two-node job) are each exactly as "
        "far from their median as their MAD, so neither could stand out: a pair is "
        "judged by the smallest gap alone (the host CPU also needs its absolute "
        "starvation level). Every signal is a ratio or a log2 of a rate, so a gap means the "
        "same on every board; the floors are the mixin config's.",
        "",
        *_signal_table(cfg),
        "",
        "A GPU gets one cause, the first that holds: thermal (a low clock with "
        "sw/hw_thermal_slowdown active "
        f"{cfg.straggler_reason_share:.0%} of {cfg.rate_window} or more), power-capped "
        "(the same with sw_power_cap or hw_power_brake), clock-other (a low clock with "
        "neither: clocks set or locked low, a board slowing down without a reason, "
        "hw_slowdown alone), pcie, nvlink, unknown (it never waits, nothing shows why). A "
        "node's CPUs (host-cpu) and each IB port (infiniband) are named on their own. The "
        "alert's labels are the job's and the culprit's: `job_id`, "
        f"`{cfg.instance_label}`, and `gpu`/`uuid`, or `device`/`port`, and `cause`.",
        "",
        f"`{SLOWDOWN}` estimates the share of its speed the job loses, the largest of "
        "three readings: *peers*, 1 - the job's median activity over its busiest "
        "rank's (a rank that never waits is busy a whole step, a waiting one a share "
        "of it); *clock*, 1 - the slowest SM clock over the median one (a compute-bound "
        "step lasts as long as the slowest clock makes it; less for memory-bound "
        "kernels); *history*, 1 - the job's median activity over its best in "
        f"`straggler_baseline_window` ({cfg.straggler_baseline_window}), the only one "
        "that sees a fault in a link or host, which slows every rank alike. A fault that "
        "was there from the job's start, in a link or host, shows no slowdown (nothing "
        "better to compare with). It is the alert's value and its description's figure.",
        "",
        "Pipeline-parallel jobs differ between stages by design (the first stage is "
        "light, the last carries the loss and may run at its power cap). Mark them with "
        "`straggler_pipeline_jobs`, label matchers on nvwatch_gpu_allocation_info that "
        'the site controls, e.g. `account="llm-pipeline"`, `namespace="pp-train"` '
        'or `job_id=~"4711|4712"`. A marked job\'s ranks may differ by '
        f"`straggler_pipeline_tolerance` ({cfg.straggler_pipeline_tolerance:g}) more in "
        "the load-driven signals (`tolerance applies` above; "
        f"`{TOLERANCE}` holds it per job); the structural ones are judged as in any "
        "job, and a fault beyond the tolerance still fires.",
        "",
        "Cost: only ranks of compared jobs produce series, two per rank and signal (the "
        "value and the score) plus two per job and signal; every join is many-to-one "
        "on the job or the GPU, never rank by rank. On a fleet of 1,000 DGX H100 whose "
        "GPUs all run multi-GPU jobs, that is about 8,000 x 6 x 2 GPU series and "
        "8,000 x 2 x 2 port series: some 130,000, against the fleet's two million. "
        "docs/scale.md measures them on the 124-node fleet: the series they write per GPU "
        "and each group's evaluation time against its interval.",
        "",
        _vmalert_lag(cfg),
        "",
        "What the rules cannot see: the legacy 32-bit port_xmit_wait saturates within "
        "minutes on a congested port (then its rate reads 0: the port stops standing "
        "out); nodes that several jobs share are left out of the host and port "
        "comparisons; a job whose every rank has the same fault is a job slowed "
        "everywhere, which no comparison finds; and a ring moves the same bytes through "
        "every rank, so NVLink and IB traffic rarely differ: the link counts, errors, "
        "rates and transmit wait carry those causes. Below the floors a straggler goes "
        f"unseen: a clock {cfg.straggler_clock_deviation:.0%} under the job's median, "
        f"activity {cfg.straggler_activity_deviation:g} over it; so does a straggler "
        "inside a job slowed everywhere (its gap to the others is what counts), and the "
        "host CPUs of a two-node job need the absolute starvation level as well.",
        "",
        "### Measured accuracy",
        "",
        *accuracy_lines(),
        "",
        "```promql",
        "# each rank of job 4711 against its job: the SM clock score (1 = the threshold)",
        'job_gpu:nvwatch_gpu_sm_clock:straggler_score{job_id="4711"}',
        "# the share of its speed each job loses to its slowest rank",
        f"sort_desc({SLOWDOWN})",
        "```",
    ]
