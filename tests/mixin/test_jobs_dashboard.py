"""The jobs dashboard's verdict per job, evaluated by promtool on hand-made series.

Six jobs, each built to meet one verdict (the expected codes are worked out in the
comments): idle, thermally throttled on one of six GPUs (the worst GPU decides, and
thermal outranks the power cap it also has), power-capped, memory-bound, busy, and a
job that is busy over its life on a GPU that was memory-bound before it started.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from nvwatch.alerts.recording import recorded_names
from nvwatch.dashboards.jobs import VERDICTS, verdict
from nvwatch.mixin.config import MixinConfig

# the dashboard's variables: every cluster, user and job; a 10-minute range
VARIABLES = {
    "$__interval": "1m",
    "$__range": "10m",
    "$cluster": ".*",
    "$user": ".*",
    "$job_id": ".*",
}
LABELS = 'job="nvwatch", cluster="c1"'
RECORDING_RULES = Path(__file__).parents[2] / "alerts" / "generated" / "nvwatch-recording.yaml"


def _gpu(instance: str, gpu: int, metric: str, values: str, extra: str = "") -> dict[str, str]:
    labels = f'{LABELS}, instance="{instance}", gpu="{gpu}", uuid="GPU-{instance}-{gpu}"{extra}'
    return {"series": f"{metric}{{{labels}}}", "values": values}


def _job(instance: str, gpu: int, job_id: str, values: str = "1x10") -> dict[str, str]:
    owner = f', scheduler="slurm", job_id="{job_id}", user="u{job_id}"'
    return _gpu(instance, gpu, "nvwatch_gpu_allocation_info", values, owner)


def _reason(instance: str, gpu: int, reason: str) -> dict[str, str]:
    return _gpu(instance, gpu, "nvwatch_gpu_clock_event_active", "1x10", f', reason="{reason}"')


def _series() -> list[dict[str, str]]:
    util, memory = "nvwatch_gpu_utilization_ratio", "nvwatch_gpu_memory_utilization_ratio"
    series = [
        # 201 on n1 GPUs 0-1: utilization 0.01 < 0.05 -> 1 (allocated but idle)
        *(_job("n1", g, "201") for g in (0, 1)),
        *(_gpu("n1", g, util, "0.01x10") for g in (0, 1)),
        # 202 on n1 GPUs 2-7, busy; GPU 2 in thermal slowdown all along: 1/6 of the job's
        # GPU time (below 0.2), but its worst GPU 100 % -> 2; GPU 3's power cap loses
        *(_job("n1", g, "202") for g in range(2, 8)),
        *(_gpu("n1", g, util, "0.9x10") for g in range(2, 8)),
        *(_gpu("n1", g, memory, "0.5x10") for g in range(2, 8)),
        _reason("n1", 2, "hw_thermal_slowdown"),
        _reason("n1", 3, "sw_power_cap"),
        # 203 on n2 GPU 0, power cap active all along -> 3
        _job("n2", 0, "203"),
        _gpu("n2", 0, util, "0.9x10"),
        _gpu("n2", 0, memory, "0.5x10"),
        _reason("n2", 0, "sw_power_cap"),
        # 204 on n2 GPU 1, memory busy 0.8 > 0.6 -> 4
        _job("n2", 1, "204"),
        _gpu("n2", 1, util, "0.9x10"),
        _gpu("n2", 1, memory, "0.8x10"),
        # 205 on n2 GPU 2: busy, nothing held it back -> 0
        _job("n2", 2, "205"),
        _gpu("n2", 2, util, "0.9x10"),
        _gpu("n2", 2, memory, "0.5x10"),
        # 206 on n2 GPU 3 from minute 8; before it the GPU was memory-bound (0.9), during
        # it 0.3: over the whole range 0.74 (memory-bound), over the job's life 0.3 -> 0
        _job("n2", 3, "206", "_x8 1x2"),
        _gpu("n2", 3, util, "0.9x10"),
        _gpu("n2", 3, memory, "0.9x7 0.3x3"),
        # 207 on n3 GPUs 0-1, busy; GPU 0 in thermal slowdown its last 4 of the range's 10
        # minutes: 0.4 of the job's life > 0.2 -> 2 (the share, not "ever throttled")
        *(_job("n3", g, "207") for g in (0, 1)),
        *(_gpu("n3", g, util, "0.9x10") for g in (0, 1)),
        *(_gpu("n3", g, memory, "0.5x10") for g in (0, 1)),
        _gpu("n3", 0, "nvwatch_gpu_clock_event_active", "0 0 0 0 0 0 0 1 1 1 1",
             ', reason="sw_thermal_slowdown"'),
        # 208 on n3 GPU 2, busy, in thermal slowdown its last minute: 0.1 < 0.2 -> 0
        _job("n3", 2, "208"),
        _gpu("n3", 2, util, "0.9x10"),
        _gpu("n3", 2, memory, "0.5x10"),
        _gpu("n3", 2, "nvwatch_gpu_clock_event_active", "0 0 0 0 0 0 0 0 0 0 1",
             ', reason="sw_thermal_slowdown"'),
    ]  # fmt: skip
    return series


def _expected(cfg: MixinConfig) -> list[dict[str, Any]]:
    codes = {"201": 1, "202": 2, "203": 3, "204": 4, "205": 0, "206": 0, "207": 2, "208": 0}
    known = {code for code, _, _ in VERDICTS}
    assert set(codes.values()) == known  # every verdict is exercised
    instance = {"201": "n1", "202": "n1", "207": "n3", "208": "n3"}
    return [
        {
            "labels": f'{{cluster="c1", instance="{instance.get(job, "n2")}", '
            f'job_id="{job}", user="u{job}"}}',
            "value": code,
        }
        for job, code in codes.items()
    ]


def _promtool_test(
    promtool: str,
    tmp_path: Path,
    series: list[dict[str, str]],
    cases: list[dict[str, Any]],
    rules: Path | None = None,
) -> None:
    """promtool evaluates each case's expression over `series` at 10m, with the rules
    of the file `rules` evaluated every minute (none without it)."""
    (tmp_path / "empty.yaml").write_text("groups: []\n")
    test = {
        "rule_files": [str(rules) if rules else "empty.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [{**case, "eval_time": "10m"} for case in cases],
            }
        ],
    }
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _with_variables(expr: str, variables: dict[str, str]) -> str:
    for name, value in variables.items():
        expr = expr.replace(name, value)
    assert "$" not in expr
    return expr


def test_verdict_per_job(promtool: str, cfg: MixinConfig, tmp_path: Path) -> None:
    """The verdict reads the jobs recording rules, which the generated file records from
    the hand-made series."""
    expr = _with_variables(verdict(cfg), VARIABLES)
    cases = [{"expr": expr, "exp_samples": _expected(cfg)}]
    _promtool_test(promtool, tmp_path, _series(), cases, RECORDING_RULES)


# --- the stragglers row ----------------------------------------------------------------
#
# Hand-written recorded series, as the straggler rules would record them: job 301 of
# user u301 on GPUs 0-1 of n1 and n2, and job 302 of u302 on n3, whose GPU stands out
# more than any of 301's. The dashboard shows u301's jobs only.

STRAGGLER_VARIABLES = {**VARIABLES, "$user": "u301"}
STRAGGLER_PANELS = ("Straggler score per rank", "Job slowdown estimate", "Straggler alerts firing")
RANKS_301 = (("n1", 0), ("n1", 1), ("n2", 0), ("n2", 1))
# per signal, the score of each of 301's GPUs in RANKS_301's order
GPU_SCORES_301 = {
    "job_gpu:nvwatch_gpu_sm_clock:straggler_score": (-0.2, 0.0, 1.5, -0.4),
    "job_gpu:nvwatch_gpu_activity:straggler_score": (0.3, -0.5, 0.9, 0.1),
    "job_gpu:nvwatch_nvlink_up:straggler_score": (0.0, 0.0, 0.0, 0.0),
}
# the highest of each GPU's three scores: n2 GPU 0's clock alone reaches 1
HIGHEST_301 = (0.3, 0.0, 1.5, 0.1)


PORT_301 = '{cluster="c1", instance="n1", device="mlx5_0", port="1", job_id="301"}'


def _recorded(name: str, labels: str, value: float) -> dict[str, str]:
    return {"series": f'{name}{{cluster="c1", {labels}}}', "values": f"{value}x10"}


def _rank(instance: str, gpu: int, job_id: str) -> str:
    return f'instance="{instance}", gpu="{gpu}", uuid="GPU-{instance}-{gpu}", job_id="{job_id}"'


def _alert(state: str, job_id: str, where: str, cause: str) -> dict[str, str]:
    labels = (
        f'alertname="NvwatchJobStraggler", alertstate="{state}", severity="warning", '
        f'{where}, job_id="{job_id}", cause="{cause}"'
    )
    return {"series": f'ALERTS{{cluster="c1", {labels}}}', "values": "1x10"}


def _straggler_series() -> list[dict[str, str]]:
    series = [_job(instance, gpu, "301") for instance, gpu in RANKS_301]
    series += [_job("n3", gpu, "302") for gpu in range(4)]
    for name, scores in GPU_SCORES_301.items():
        series += [
            _recorded(name, _rank(instance, gpu, "301"), score)
            for (instance, gpu), score in zip(RANKS_301, scores, strict=True)
        ]
    series += [
        _recorded("job_gpu:nvwatch_gpu_sm_clock:straggler_score", _rank("n3", 0, "302"), 2.0),
        # a node's host CPUs and its IB port's two signals
        _recorded("job_node:nvwatch_host_cpu_utilization:straggler_score",
                  'instance="n1", job_id="301"', 0.4),
        _recorded("job_node:nvwatch_host_cpu_utilization:straggler_score",
                  'instance="n2", job_id="301"', -0.4),
        _recorded("job_port:nvwatch_ib_port_transmit_wait:straggler_score",
                  'instance="n1", device="mlx5_0", port="1", job_id="301"', 0.25),
        _recorded("job_port:nvwatch_ib_port_rate:straggler_score",
                  'instance="n1", device="mlx5_0", port="1", job_id="301"', 0.0),
        _recorded("job:nvwatch_straggler_slowdown:ratio", 'job_id="301"', 0.12),
        _recorded("job:nvwatch_straggler_slowdown:ratio", 'job_id="302"', 0.3),
        # firing for 301's slow GPU; pending for another of its GPUs; firing for 302
        _alert("firing", "301", 'instance="n2", gpu="0", uuid="GPU-n2-0"', "clock-other"),
        _alert("pending", "301", 'instance="n1", gpu="0", uuid="GPU-n1-0"', "unknown"),
        _alert("firing", "302", 'instance="n3", gpu="0", uuid="GPU-n3-0"', "thermal"),
    ]  # fmt: skip
    return series


def _panel(dashboards: dict[str, dict[str, Any]], title: str) -> dict[str, Any]:
    (panel,) = [p for p in dashboards["nvwatch-jobs.json"]["panels"] if p["title"] == title]
    return panel


def _exprs(panel: dict[str, Any]) -> list[str]:
    return [_with_variables(t["expr"], STRAGGLER_VARIABLES) for t in panel["targets"]]


def test_the_stragglers_row_is_last_and_says_what_a_score_means(
    dashboards: dict[str, dict[str, Any]],
) -> None:
    panels = dashboards["nvwatch-jobs.json"]["panels"]
    row = [p for p in panels if p["title"] in STRAGGLER_PANELS]
    assert [p["title"] for p in row] == list(STRAGGLER_PANELS)
    above = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels if p not in row)
    assert min(p["gridPos"]["y"] for p in row) == above
    for panel in row:
        assert "stands out" in panel["description"], panel["title"]
    scores = _panel(dashboards, "Straggler score per rank")
    assert "1 the threshold" in scores["description"]
    assert "Job stragglers" in scores["description"]


def test_the_score_panel_shows_the_straggler_above_its_threshold(
    promtool: str, dashboards: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    panel = _panel(dashboards, "Straggler score per rank")
    defaults = panel["fieldConfig"]["defaults"]
    assert defaults["custom"]["thresholdsStyle"]["mode"] != "off"  # the line is drawn
    steps = defaults["thresholds"]["steps"]
    (threshold,) = [s["value"] for s in steps if s["value"] is not None]
    assert threshold == 1  # the score's own threshold (docs/alerts.md)
    gpus, nodes, ports = _exprs(panel)
    gpu_samples = [
        {"labels": f'{{cluster="c1", instance="{instance}", gpu="{gpu}", job_id="301"}}',
         "value": value}
        for (instance, gpu), value in zip(RANKS_301, HIGHEST_301, strict=True)
    ]  # fmt: skip
    cases = [
        {"expr": gpus, "exp_samples": gpu_samples},
        # the panel colours from the threshold on: n2 GPU 0 alone
        {"expr": f"({gpus}) >= {threshold}", "exp_samples": [gpu_samples[2]]},
        {
            "expr": nodes,
            "exp_samples": [
                {"labels": '{cluster="c1", instance="n1", job_id="301"}', "value": 0.4},
                {"labels": '{cluster="c1", instance="n2", job_id="301"}', "value": -0.4},
            ],
        },
        {"expr": ports, "exp_samples": [{"labels": PORT_301, "value": 0.25}]},
    ]
    _promtool_test(promtool, tmp_path, _straggler_series(), cases)


def test_the_slowdown_and_the_firing_alerts_of_the_chosen_jobs(
    promtool: str, dashboards: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    (slowdown,) = _exprs(_panel(dashboards, "Job slowdown estimate"))
    (alerts,) = _exprs(_panel(dashboards, "Straggler alerts firing"))
    firing = (
        'ALERTS{alertname="NvwatchJobStraggler", alertstate="firing", severity="warning", '
        'cluster="c1", instance="n2", gpu="0", uuid="GPU-n2-0", job_id="301", '
        'cause="clock-other"}'
    )
    cases = [
        {
            "expr": slowdown,
            "exp_samples": [
                {
                    "labels": 'job:nvwatch_straggler_slowdown:ratio{cluster="c1", job_id="301"}',
                    "value": 0.12,
                }
            ],
        },
        {"expr": alerts, "exp_samples": [{"labels": firing, "value": 1}]},
    ]
    _promtool_test(promtool, tmp_path, _straggler_series(), cases)


def test_a_firing_straggler_links_to_its_node(dashboards: dict[str, dict[str, Any]]) -> None:
    panel = _panel(dashboards, "Straggler alerts firing")
    columns = panel["transformations"][0]["options"]
    assert {"job_id", "instance", "gpu", "device", "port", "cause"} <= set(columns["indexByName"])
    assert not {"instance", "gpu", "cause"} & set(columns["excludeByName"])
    (link,) = panel["fieldConfig"]["defaults"]["links"]
    assert link["url"].startswith("/d/nvwatch-node/")
    assert "var-instance=${__field.labels.instance}" in link["url"]


def test_the_stragglers_row_follows_the_configured_labels(cfg: MixinConfig) -> None:
    from nvwatch.dashboards.build import build_all

    other = cfg.with_overrides(cluster_label="site", instance_label="node")
    panels = [
        p for p in build_all(other)["nvwatch-jobs.json"]["panels"] if p["title"] in STRAGGLER_PANELS
    ]
    text = str(panels).replace("$cluster", "").replace("var-cluster", "")
    assert 'site=~"' in text and "max by (site, node, gpu, job_id)" in text
    assert "{{node}}" in text and "var-instance=${__field.labels.node}" in text
    assert "cluster" not in text and "instance}" not in text


def test_the_score_queries_read_every_recorded_score(
    cfg: MixinConfig, dashboards: dict[str, dict[str, Any]]
) -> None:
    """The panel picks the score series by a regex on their names: each level's regex
    matches that level's scores of the recording rules and nothing else, and together
    they read every score recorded."""
    panel = _panel(dashboards, "Straggler score per rank")
    recorded = recorded_names(cfg)
    scores = {name for name in recorded if name.endswith(":straggler_score")}
    read: set[str] = set()
    for target, level in zip(panel["targets"], ("job_gpu", "job_node", "job_port"), strict=True):
        (pattern,) = re.findall(r'__name__=~"([^"]+)"', target["expr"])
        matched = {name for name in recorded if re.fullmatch(pattern, name)}
        assert matched and all(name.startswith(f"{level}:") for name in matched), pattern
        read |= matched
    assert read == scores
