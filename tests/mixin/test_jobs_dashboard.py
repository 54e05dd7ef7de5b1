"""The jobs dashboard's verdict per job, evaluated by promtool on hand-made series.

Six jobs, each built to meet one verdict (the expected codes are worked out in the
comments): idle, thermally throttled on one of six GPUs (the worst GPU decides, and
thermal outranks the power cap it also has), power-capped, memory-bound, busy, and a
job that is busy over its life on a GPU that was memory-bound before it started.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

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
    ]
    return series


def _expected(cfg: MixinConfig) -> list[dict[str, Any]]:
    codes = {"201": 1, "202": 2, "203": 3, "204": 4, "205": 0, "206": 0}
    known = {code for code, _, _ in VERDICTS}
    assert set(codes.values()) == known  # every verdict is exercised
    instance = {"201": "n1", "202": "n1"}
    return [
        {
            "labels": f'{{cluster="c1", instance="{instance.get(job, "n2")}", '
            f'job_id="{job}", user="u{job}"}}',
            "value": code,
        }
        for job, code in codes.items()
    ]


def test_verdict_per_job(promtool: str, cfg: MixinConfig, tmp_path: Path) -> None:
    expr = verdict(cfg)
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr
    (tmp_path / "empty.yaml").write_text("groups: []\n")
    test = {
        "rule_files": ["empty.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _series(),
                "promql_expr_test": [
                    {"expr": expr, "eval_time": "10m", "exp_samples": _expected(cfg)}
                ],
            }
        ],
    }
    path = tmp_path / "verdict.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
