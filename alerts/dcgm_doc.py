"""docs/migrating-from-dcgm-exporter.md, rendered from the table in alerts/dcgm_compat.py.

`nvwatch alerts build` writes it next to docs/alerts.md; a test fails when the
committed file and this rendering differ.
"""

from __future__ import annotations

from nvwatch.alerts.dcgm_compat import (
    ALLOCATION,
    FIELDS,
    KUBERNETES,
    LABELS_RULE,
    DcgmField,
    allocation_on,
    labels,
    per_pod_expr,
    pod_labels,
    value_expr,
)
from nvwatch.mixin.config import MixinConfig

# the field the per-pod example shows
POD_EXAMPLE = "DCGM_FI_DEV_GPU_UTIL"

DOC_NAME = "migrating-from-dcgm-exporter.md"
RULE_FILE = "dcgm-compat.rules.yml"

_INTRO = """\
# Migrating from dcgm-exporter

Generated from `alerts/dcgm_compat.py` by `nvwatch alerts build` (which also writes the
compatibility rules below); a test fails when this file and the table disagree.

nvwatch reads NVML directly where dcgm-exporter reads DCGM (which reads NVML and, for
the `DCGM_FI_PROF_*` fields, the profiling counters). nvwatch exports base units: bytes,
hertz, watts, joules, seconds and ratios 0..1, where dcgm-exporter uses MiB, MHz,
percent, mJ and ns. Each row below gives the PromQL over nvwatch series
that returns dcgm-exporter's value **in dcgm-exporter's unit**, per GPU (the series are
selected with the mixin's job selector, `{config.job_selector}`). *Default* says
whether dcgm-exporter exports the field with its stock `etc/default-counters.csv`;
the others are the opt-in fields commonly enabled.
"""

_RULES = """\
## Compatibility recording rules (optional)

`alerts/generated/{rule_file}` (written by `nvwatch alerts build`) records every field
with an equivalent above as a `DCGM_FI_*` series with dcgm-exporter's unit and label
names, so dashboards and alerts written for dcgm-exporter keep working while a fleet
moves over. It is not loaded by default. To enable it, add it to Prometheus'
`rule_files` next to the nvwatch rules:

```yaml
rule_files:
  - /etc/prometheus/rules/nvwatch-alerts.yaml
  - /etc/prometheus/rules/nvwatch-recording.yaml
  - /etc/prometheus/rules/{rule_file}   # during the migration only
```

`{labels_rule}` (one series per GPU) carries the labels; each compatibility series is
the value above joined with it on `{cluster}, {instance}, gpu`. Differences from a
scraped dcgm-exporter: the series are written at the rule evaluation interval
({interval}) rather than at each scrape, they carry the nvwatch target labels (`job`,
`{instance}`, `{cluster}`, ...) as well, and they cost one series per field per GPU
({count} per GPU). Remove the file once nothing reads `DCGM_FI_*` any more.
"""


def _code(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`" if text else "–"


def _field_row(cfg: MixinConfig, field: DcgmField) -> str:
    promql = value_expr(cfg, field) if field.has_equivalent else ""
    notes = "; ".join(
        n
        for n in (f"approximate: {field.approximate}" if field.approximate else "", field.note)
        if n
    )
    return (
        f"| `{field.name}` | {'yes' if field.default else 'opt-in'} | {field.unit} | "
        f"{_code(field.metric)} | {_code(promql)} | {notes.replace('|', '/')} |"
    )


def _fields(cfg: MixinConfig) -> list[str]:
    return [
        "## Fields",
        "",
        "| dcgm-exporter | default | dcgm unit | nvwatch metric | PromQL (dcgm's unit) | notes |",
        "|---|---|---|---|---|---|",
        *(_field_row(cfg, f) for f in FIELDS),
        "",
    ]


def _missing() -> list[str]:
    missing = [f for f in FIELDS if not f.has_equivalent]
    return [
        "## Fields nvwatch has no equivalent for",
        "",
        *(f"- `{f.name}` ({f.help}): {f.note}." for f in missing),
        "",
    ]


def _labels(cfg: MixinConfig) -> list[str]:
    rows = []
    for lb in labels(cfg):
        if not lb.nvwatch:
            source = "none"
        elif lb.series:
            source = (
                f"`{lb.nvwatch}` of `{lb.series}` (`--attribution {lb.attribution}`), "
                f"joined on `{allocation_on(cfg)}`"
            )
        elif lb.replacement != "$1" or lb.regex not in ("", "(.*)"):
            source = f"from `{lb.nvwatch}`: `{lb.regex}` -> `{lb.replacement}`"
        else:
            source = f"`{lb.nvwatch}`"
        on_compat = "yes" if lb.nvwatch and lb.per_gpu else "no"
        rows.append(f"| `{lb.name}` | {lb.meaning} | {source} | {on_compat} |")
    return [
        "## Labels",
        "",
        "nvwatch puts `gpu` and `uuid` on every per-GPU series and the descriptive labels "
        "on `nvwatch_gpu_info` only (join with `* on (instance, gpu) group_left (name) "
        "nvwatch_gpu_info`). Per-process device memory is "
        "`nvwatch_gpu_process_memory_bytes` (labels `pid`, `process`, `user`, `job`). "
        "MIG devices are the `nvwatch_mig_*` series (labels `gpu_instance_id`, "
        "`compute_instance_id`; the `profile` is on `nvwatch_mig_info`); the "
        "compatibility series are per GPU and do not repeat dcgm-exporter's per-MIG-device "
        "series. "
        "`device` is built from the NVML index, which matches the `/dev/nvidiaN` minor "
        "number on most nodes but not all.",
        "",
        "| dcgm-exporter label | meaning | nvwatch | on the compatibility series |",
        "|---|---|---|---|",
        *rows,
        "",
        *_pods(cfg),
    ]


def _pods(cfg: MixinConfig) -> list[str]:
    """How dcgm-exporter's Kubernetes labels map to the allocation join."""
    names = ", ".join(f"`{n}`" for n in pod_labels(cfg))
    field = next(f for f in FIELDS if f.name == POD_EXAMPLE)
    return [
        "### Kubernetes pods",
        "",
        f"dcgm-exporter's Kubernetes mode labels each GPU's series with the pod holding it "
        f"({names}), from the kubelet's pod-resources API. nvwatch reads the same API with "
        f"`--attribution {KUBERNETES}` and puts those labels on one series per GPU (or MIG "
        f'instance) and owner, `{ALLOCATION}{{scheduler="{KUBERNETES}"}}`, instead of on '
        "every series: GPU series never carry job labels, so a pod's rollout does not start "
        "a fresh copy of them. Join it at query time, the allocation on the many side (a GPU "
        f"time-sliced between pods gives its value to each). `{POD_EXAMPLE}` per pod, in "
        "dcgm-exporter's unit:",
        "",
        "```promql",
        per_pod_expr(cfg, field),
        "```",
        "",
        "Any row of the table above joins the same way. The compatibility series below are "
        "per GPU and carry no pod labels; README, *Who uses each GPU*, has the Kubernetes "
        "set-up.",
        "",
    ]


def render_doc(cfg: MixinConfig) -> str:
    compat = sum(1 for f in FIELDS if f.has_equivalent)
    rules = _RULES.format(
        rule_file=RULE_FILE,
        labels_rule=LABELS_RULE,
        cluster=cfg.cluster_label,
        instance=cfg.instance_label,
        interval=cfg.evaluation_interval,
        count=compat,
    )
    parts = [
        _INTRO.format(config=cfg),
        *_fields(cfg),
        *_missing(),
        *_labels(cfg),
        rules,
    ]
    return "\n".join(parts)
