"""Generate docs/metrics.md from the catalogue, so the reference can never drift.

python -m nvwatch.sim.metrics_doc > docs/metrics.md
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from nvwatch.agent.catalogue import CATALOGUE, Field, MetricSpec, MetricType, Scope, Series
from nvwatch.agent.sources.nvml.processes import MAX_PROCESSES
from nvwatch.sim.profiles import PROFILES
from nvwatch.sim.series_budget import (
    MIG_LAYOUTS,
    PROCESS_FAMILIES,
    BmcBudget,
    Budget,
    measure,
    measure_bmc,
)

_SECTIONS = (
    ("nvwatch_gpu_", "GPU"),
    ("nvwatch_mig_", "MIG instances"),
    ("nvwatch_nvlink_", "NVLink"),
    ("nvwatch_ib_", "InfiniBand"),
    ("nvwatch_host_", "Host"),
    ("nvwatch_bmc_", "BMC (per probe)"),
    ("nvwatch_scheduler_", "Scheduler (one agent per cluster)"),
    ("nvwatch_agent_", "Agent"),
)

# The class whose attribute a Series names, per scope (as a reader looks it up).
_SAMPLE_CLASS: dict[str, str] = {
    Scope.GPU: "GpuSample",
    Scope.PROCESS: "ProcessSample",
    Scope.ALLOCATION: "Allocation",
    Scope.NVLINK: "NvLinkSample",
    Scope.MIG: "MigDeviceSample",
    Scope.IB_DEVICE: "InfinibandDevice",
    Scope.IB_PORT: "InfinibandPort",
    Scope.HOST: "HostSample",
    Scope.BMC: "BmcProbe",
    Scope.BMC_SENSOR: "BmcSensor",
    Scope.SCHEDULER_PARTITION: "PartitionSample",
    Scope.SCHEDULER_DEMAND: "DemandSample",
    Scope.SCHEDULER_USER: "UserDemand",
    Scope.SCHEDULER_ACCOUNT: "AccountShare",
    Scope.SCHEDULER_ACCOUNT_WAIT: "AccountWait",
    Scope.SOURCE: "SourceStatus",
    Scope.AGENT: "AgentState",
}

_HEADER = """# Metrics reference

Generated from `agent/catalogue.py` by `python -m nvwatch.sim.metrics_doc`; a test fails when
this file and the code disagree. Names are a contract: dashboards and alerts use them.

Conventions: base units (bytes, seconds, watts, joules, celsius, hertz, ratios 0..1);
counters end in `_total`; every per-GPU series carries `gpu` (NVML index) and `uuid`;
a value the hardware does not support is absent, never 0; a GPU that stops answering
keeps `nvwatch_gpu_up 0` and loses its other series.

Under each metric, a list says where its value comes from: the NVML call or field
id, the sysfs file or the psutil call (*origin*); the sample attribute that carries it
through the agent (*sample*, on the class named: `agent/sources/nvml/samples.py`,
`agent/sources/infiniband.py`, `agent/sources/host.py`, `agent/poller.py`,
`agent/sources/attribution/model.py`, `agent/sources/bmc/interpret.py`,
`agent/sources/scheduler/model.py`); the
`nvidia-smi --query-gpu` field it must agree with (checked by `python -m
nvwatch.agent.nvsmi_compare` on a real GPU); and when it is absent.
"""


# How to use a family, where its name and labels alone do not say it.
_USAGE: dict[str, str] = {
    "nvwatch_bmc_up": """Usage: BMC series come from `/probe?target=<bmc>&module=<name>`
(the `nvwatch-bmc` scrape job, read at scrape time like ipmi_exporter), never from
`/metrics`; the job's target labels (`cluster`, `instance` = the node's name, `rack`,
`node_class`, `bmc`) make them join GPU series `on(cluster, instance)`. A probe that
fails has this series at 0, `nvwatch_bmc_read_duration_seconds`, and a `# ` comment
line saying why; no other series. docs/bmc.md describes the module config and what was
tested against a real BMC.""",
    "nvwatch_gpu_allocation_info": """Usage: GPU series carry no job labels (a label per job on
every series would multiply the node's series by its jobs and break every series when a job
ends); join this info metric at query time. Each query below is checked by promtool
(tests/attribution/test_join_idiom.py).

```promql
# where every GPU has one owner (exclusive allocation, no MIG): a GPU series with the
# job and user of its GPU
nvwatch_gpu_utilization_ratio
  * on(instance, gpu) group_left(job_id, user) nvwatch_gpu_allocation_info

# any GPU, also one shared by several owners (two jobs in one mapping file, time-sliced
# pods): one result per owner, with all the owner's labels
nvwatch_gpu_allocation_info{uuid!~"MIG-.*"}
  * on(instance, gpu) group_left nvwatch_gpu_utilization_ratio

# GPUs per user right now
count by (user) (nvwatch_gpu_allocation_info)

# MIG: an instance's allocation carries the instance's own uuid (MIG-...); per-instance
# series name their instance by ids, which nvwatch_mig_info maps to that uuid
nvwatch_mig_memory_used_bytes
  * on(instance, gpu, gpu_instance_id, compute_instance_id) group_left(mig_uuid)
    nvwatch_mig_info
  * on(instance, mig_uuid) group_left(job_id, user)
    label_replace(nvwatch_gpu_allocation_info{uuid=~"MIG-.+"}, "mig_uuid", "$1", "uuid", "(.+)")
```

The first form is the short one, and Prometheus refuses the whole query ("many-to-many
matching not allowed: matching labels must be unique on one side") as soon as any GPU it
covers has several owners, or several allocated MIG instances, which share their parent's
`gpu`: the "one" side then has two series for that GPU. The second form puts the
allocation on the many side and works for every GPU. Prometheus drops the labels a
scheduler leaves empty (`account`, `pod`, ... for Slurm) from stored series. Series: one
per GPU (or MIG instance) per owner, a few dozen per node at most.""",
    "nvwatch_scheduler_gpus": """Usage: the scheduler's series come from the one agent of
a cluster that runs `--sources scheduler` (on the Slurm controller or a login node),
scraped in the agents' job (`job="nvwatch"`, `instance` = that host); docs/scheduler.md
says what it reads and what it costs the controller. Demand against capacity per
partition, and the GPUs idle while GPU jobs wait:

```promql
sum by (partition) (nvwatch_scheduler_pending_gpus{reason!~"held|dependency"})
  > bool on(partition) (nvwatch_scheduler_gpus{state="idle"})
nvwatch_scheduler_oldest_pending_seconds > 3600
  and on(partition) nvwatch_scheduler_gpus{state="idle"} > 0
```

Series: 3 per partition here, 10 for unavailable nodes, 16 for the wait histogram, 1
oldest wait; 7 per partition and account (6 pending classes, 1 counter); 16 per account
for its wait histogram; 3 per account with accounting.""",
    "nvwatch_scheduler_wait_seconds": """Usage: waits are observed once per job, when the
source first sees it started, so `histogram_quantile(0.9, sum by (partition, le)
(rate(nvwatch_scheduler_wait_seconds_bucket[1d])))` is the 90th percentile of the queue
wait of the GPU jobs that started in the last day. The histogram is per partition only:
per partition and account it would be partitions x accounts x buckets series;
`nvwatch_scheduler_account_wait_seconds` holds the same waits per account alone.""",
    "nvwatch_scheduler_account_wait_seconds": """Usage: beyond the contract's partition
histogram, so an account's waits need no recording rule over job series:
`histogram_quantile(0.5, sum by (account, le)
(increase(nvwatch_scheduler_account_wait_seconds_bucket[30d])))` is each account's median
queue wait of the GPU jobs that started in the last 30 days. The same jobs as the
partition histogram: its `_count` and `_sum` summed over accounts equal that one's summed
over partitions. Series: 16 per account (at most --scheduler-max-accounts, plus "other"
and "none"), one set per cluster.""",
    "nvwatch_gpu_process_memory_bytes": """`job` is the Slurm job id of the pid, `pod` and
`namespace` its Kubernetes pod, from attribution's cache (`--attribution`); a pid seen for
the first time is labelled from the next refresh on (well under a second later, when the
refresher is woken by the new pid), so its first series may have them empty. Prometheus
stores this `job` as `exported_job`, since the scrape's own `job` target label wins
(`honor_labels: false`, the default).""",
    "nvwatch_gpu_process_sm_utilization_ratio": """The same processes and labels as
`nvwatch_gpu_process_memory_bytes` (as has the memory utilization family), so a job's
SM use on GPUs it shares is `sum by (instance, gpu, exported_job)
(nvwatch_gpu_process_sm_utilization_ratio)`. Each poll asks NVML for the samples after
the newest one the previous poll saw, and keeps each pid's latest: a process that ran no
kernels in that window has no sample and reads 0. Under MIG the family is absent.""",
}


_BUDGET_HEADER = f"""
## Series budget per node

Measured by rendering each simulated profile (`sim/series_budget.py`: fixed seed, two
polls a minute apart, host source included) and counting the samples Prometheus would
ingest; target labels (`job`, `instance`, `cluster`, `rack`, `node_class`) add labels,
not series. *ceiling* is the most one node can export: the process families at their cap
of {MAX_PROCESSES} processes per GPU. These carry `pid`, and only the {MAX_PROCESSES} processes
holding the most memory are kept:
{", ".join(f"`{name}`" for name in PROCESS_FAMILIES)}
(under MIG the first alone: NVML gives no per-process utilization there).
`nvwatch_gpu_xid_errors_total`
adds one series per XID code a GPU raised this boot (none here). The `--mig` rows split
every GPU into seven 1g instances, the most MIG devices a GPU holds: each adds its
`nvwatch_mig_*` series, and the GPU loses its utilization pair. With `--attribution`,
`nvwatch_gpu_allocation_info` adds one series per GPU (or MIG instance) per owner: one per
GPU on a node allocated exclusively, as many as the jobs or pods sharing a GPU otherwise
(64 on the attribution benchmark's dgx-h100 with 8 jobs per GPU). docs/scale.md turns
these figures into fleet-wide series and storage.

| profile | GPUs | series | ceiling | NVLink | InfiniBand | per GPU (ceiling) |
|---|---|---|---|---|---|---|
"""


def budget_table(budgets: list[Budget]) -> str:
    rows = [
        f"| `{b.profile}` | {b.gpus} | {b.series:,} | {b.ceiling:,} | "
        f"{b.share('nvwatch_nvlink_'):,} | {b.share('nvwatch_ib_'):,} | {b.ceiling / b.gpus:.0f} |"
        for b in budgets
    ]
    return _BUDGET_HEADER + "\n".join(rows) + "\n"


_BMC_HEADER = """\
A node's BMC, probed by the `nvwatch-bmc` job, is a budget of its own: one probe of each
profile's simulated BMC (module `default`: every sensor and DCMI power) through the real
/probe exposition. Sensors are the SDR's (a real BMC's count is its vendor's); each
threshold sensor and supply adds a state series, a supply two more, a sensor that reads
unavailable none.

| profile | SDR sensors | series per probe | DCMI power |
|---|---|---|---|
"""


def bmc_table(budgets: list[BmcBudget]) -> str:
    rows = [
        f"| `{b.profile}` | {b.sensors} | {b.series} | {'yes' if b.dcmi else 'no'} |"
        for b in budgets
    ]
    return _BMC_HEADER + "\n".join(rows) + "\n"


def measure_bmcs() -> list[BmcBudget]:
    budgets = []
    for profile in sorted(PROFILES):
        with tempfile.TemporaryDirectory(prefix="nvwatch-budget-") as root:
            budgets.append(measure_bmc(profile, Path(root)))
    return budgets


def measure_all() -> list[Budget]:
    budgets = []
    for profile in sorted(PROFILES):
        with tempfile.TemporaryDirectory(prefix="nvwatch-budget-") as root:
            budgets.append(measure(profile, Path(root)))
    for profile, layout in MIG_LAYOUTS.items():
        with tempfile.TemporaryDirectory(prefix="nvwatch-budget-") as root:
            budgets.append(measure(profile, Path(root), mig=layout))
    return budgets


def render() -> str:
    lines = [_HEADER, budget_table(measure_all()), bmc_table(measure_bmcs())]
    for prefix, title in _SECTIONS:
        lines.append(f"\n## {title}\n")
        for spec in CATALOGUE:
            if spec.name.startswith(prefix):
                lines.extend(_entry(spec))
    return "\n".join(lines) + "\n"


def _entry(spec: MetricSpec) -> list[str]:
    labels = ", ".join(f"`{label}`" for label in spec.labels) or "–"
    rows = [
        f"### `{spec.name}`\n",
        f"{_cell(spec.help)}\n",
        "| type | unit | labels |",
        "|---|---|---|",
        f"| {spec.type.value} | {spec.unit or '–'} | {labels} |\n",
        f"- origin: {_cell(spec.origin)}",
        f"- sample: {_samples(spec)}",
    ]
    smi = [s.nvidia_smi.query for s in spec.series if s.nvidia_smi is not None]
    if smi:
        rows.append("- nvidia-smi: " + ", ".join(f"`{q}`" for q in smi))
    if spec.when:
        rows.append(f"- absent: {_cell(spec.when)}")
    rows.append("")
    if spec.name in _USAGE:
        rows += [_USAGE[spec.name], ""]
    return rows


def _samples(spec: MetricSpec) -> str:
    owner = _SAMPLE_CLASS[spec.scope]
    return "; ".join(_series_text(spec, owner, s) for s in spec.series)


def _series_text(spec: MetricSpec, owner: str, series: Series) -> str:
    value = f"`{owner}.{series.value}`" if isinstance(series.value, Field) else "1"
    labels = [
        f"{name} from `{owner}.{v}`" if isinstance(v, Field) else f'{name}="{v}"'
        for name, v in zip(spec.own_labels, series.labels, strict=False)
    ]
    if series.each and spec.type is MetricType.HISTOGRAM:
        labels.append("le from each key, then _count and _sum")
    elif series.each:
        labels.append(f"{spec.own_labels[-1]} from each key")
    return value + (f" ({', '.join(labels)})" if labels else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    print(render(), end="")
