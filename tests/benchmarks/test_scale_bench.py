"""The scale benchmark's pieces that need no running stack: Grafana's macros, the
raw equivalents of recording rules (checked by promtool against the rules themselves),
the inventory it writes and the targets it merges, and the shipped units' commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from benchmarks.scale import measure as m
from benchmarks.scale.stack import NODES_PER_LEAF, merge_targets, sync_jobs, write_inventory
from benchmarks.scale.units import unit_command
from nvwatch.agent.inventory import load_inventory
from nvwatch.mixin.config import MixinConfig
from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]


def test_step_and_rate_interval_follow_grafana() -> None:
    assert m.step_for(3600, 15) == 15  # 3.6 s per point, never below the scrape
    assert m.step_for(86400, 15) == 90  # 86.4 s rounded up to a multiple of 15
    filled = m.fill("rate(x[$__rate_interval]) * $__range_s / $__range", "c", 86400, 90, 15)
    assert filled == "rate(x[105s]) * 86400 / 86400s"


def test_every_panel_query_fills_and_parses(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    rules = [
        {"record": f"bench:q{i}", "expr": m.fill(q.expr, "seed", 86400, 90, 15)}
        for i, q in enumerate(m.panel_queries(MixinConfig()))
    ]
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_raw_equivalent_computes_what_the_rules_record(tmp_path: Path) -> None:
    """promtool evaluates a cluster rule and its expansion over the same input series."""
    promtool = require_tool("promtool")
    cfg = MixinConfig()
    record = "cluster:nvwatch_gpu_power_watts:sum"
    raw = m.raw_equivalent(cfg, record)
    assert "instance:" not in raw and "nvwatch_gpu_power_watts{" in raw
    series = [
        {
            "series": f'nvwatch_gpu_power_watts{{job="nvwatch", cluster="c1", rack="r1", '
            f'node_class="dgx1-v100", instance="n{n}", gpu="{g}", uuid="G{n}{g}"}}',
            "values": f"{100 * (n + 1) + g}x5",
        }
        for n in range(2)
        for g in range(2)
    ]
    # 100 + 101 + 200 + 201
    expected = [{"labels": f'{record}{{cluster="c1"}}', "value": 602}]
    raw_expected = [{"labels": '{cluster="c1"}', "value": 602}]
    tests = {
        "rule_files": [str(REPO / "alerts" / "generated" / "nvwatch-recording.yaml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {"expr": record, "eval_time": "3m", "exp_samples": expected},
                    {"expr": raw, "eval_time": "3m", "exp_samples": raw_expected},
                ],
            }
        ],
    }
    path = tmp_path / "raw.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_inventory_racks_are_fat_tree_leaves_and_targets_get_fleet_ports(tmp_path: Path) -> None:
    inventory = tmp_path / "cluster.csv"
    write_inventory(inventory, 10, "dgx1-v100")
    nodes = load_inventory(inventory)  # the real parser accepts it
    assert [n.rack for n in nodes].count("leaf-00") == NODES_PER_LEAF
    assert nodes[-1].rack == "leaf-02"
    labelled = tmp_path / "sd"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nvwatch.agent.cli",
            "inventory",
            "--in",
            str(inventory),
            "--out",
            str(labelled),
        ],
        check=True,
        capture_output=True,
    )
    fleet = tmp_path / "fleet.json"
    fleet.write_text(
        json.dumps(
            [
                {"targets": [f"127.0.0.1:{9500 + i}"], "labels": {"instance": f"dgx-{i:03d}"}}
                for i in range(10)
            ]
        )
    )
    assert merge_targets(labelled, fleet, tmp_path / "targets") == 10
    groups = json.loads((tmp_path / "targets" / "nvwatch-fleet.json").read_text())
    by_node = {g["labels"]["instance"]: g for g in groups}
    assert by_node["dgx-007"]["targets"] == ["127.0.0.1:9507"]
    assert by_node["dgx-007"]["labels"]["rack"] == "leaf-01"


def test_unit_commands_replace_only_what_is_given() -> None:
    argv = unit_command("vmagent@.service", {"httpListenAddr": "127.0.0.1:1"}, instance="1")
    assert argv[0] == "/usr/bin/vmagent"
    assert "-promscrape.cluster.memberNum=1" in argv
    assert "-promscrape.cluster.membersCount=2" in argv
    assert "-httpListenAddr=127.0.0.1:1" in argv
    rules = unit_command("vmalert.service", {"rule": "a.yaml\nb.yaml", "x": "1"})
    assert [a for a in rules if a.startswith("-rule=")] == ["-rule=a.yaml", "-rule=b.yaml"]
    assert rules[-1] == "-x=1"


def test_alerts_are_waited_for_past_their_for_duration(tmp_path: Path) -> None:
    """A placed alert with `for: 10m` cannot fire within a 10-minute run: the benchmark
    waits for the longest `for:` of the placed alerts (read from the generated rules)
    plus the time a fault needs to develop."""
    from benchmarks import scale_bench
    from nvwatch.alerts import build as alerts_build

    alerts_build.write(tmp_path, MixinConfig())
    rules = tmp_path / alerts_build.PROMETHEUS_ALERTS
    thermal = [p for p in scale_bench.PLACED if p.alert == "NvwatchGpuThermalSlowdown"]
    # a rules file with one alert of a hand-written `for:`, and the generated one
    own = tmp_path / "own.yaml"
    own.write_text(
        yaml.safe_dump(
            {"groups": [{"name": "g", "rules": [
                {"alert": "NvwatchGpuThermalSlowdown", "expr": "vector(1)", "for": "17m"},
                {"alert": "Unplaced", "expr": "vector(1)", "for": "2h"},
            ]}]}
        )
    )  # fmt: skip
    lead = scale_bench.FAULT_LEAD_S
    assert scale_bench.alert_deadline_s(own, thermal) == 17 * 60 + lead
    assert scale_bench.alert_deadline_s(own, []) == lead
    # the shipped thermal alert holds for 10 minutes: the wait covers it
    assert scale_bench.alert_deadline_s(rules, thermal) >= 10 * 60 + lead
    assert scale_bench.alert_deadline_s(rules, list(scale_bench.PLACED)) >= 10 * 60 + lead


def test_sync_jobs_hold_every_node_once_in_jobs_of_two_or_more() -> None:
    """124 nodes in 8-node jobs: 15 of 8 and one of the last 4, each node in one job; a
    lone last node is left out (a one-node job has no other node to be compared with)."""
    jobs = sync_jobs(124, 8)
    assert len(jobs) == 16
    assert jobs[0].startswith("0-7:all,id=") and jobs[-1].startswith("120-123:all,id=")
    assert all(j.endswith(",sync=no") for j in jobs)
    assert len({j.split("id=")[1].split(",")[0] for j in jobs}) == 16
    covered = []
    for job in jobs:
        first, last = job.split(":")[0].split("-")
        covered += range(int(first), int(last) + 1)
    assert covered == list(range(124))
    assert [j.split(":")[0] for j in sync_jobs(9, 4)] == ["0-3", "4-7"]
