"""Reading the rule groups' evaluations for the thousand-node benchmark: each group's
time at its own interval, and how deep the recording rules chain, with the wait for
vmalert to record every level (a rule reading another rule's series under vmalert
reads it an evaluation later)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmarks.thousand import rule_timing
from benchmarks.thousand.stand_in_section import vm_gap
from nvwatch.alerts import build as alerts_build
from nvwatch.alerts import chains
from nvwatch.mixin.config import MixinConfig

COUNTER = "vmalert_iteration_duration_seconds_count"


GROUPS = [
    {"name": "base", "rules": [
        {"record": "job:a:sum", "expr": "sum by (job) (nvwatch_gpu_up)"},
        {"record": "job:b:max", "expr": "max_over_time(job:a:sum[5m]) * 2"},
    ]},
    {"name": "alerts", "rules": [{"alert": "Up", "expr": "job:b:max > 0"}]},
    {"name": "upper", "interval": "5m", "rules": [
        {"record": "c:c:avg", "expr": "avg(job:b:max)"},
        {"record": "d:d:last", "expr": "c:c:avg + on () group_left () sum(job:a:sum)"
                                       " or d:d:last"},
    ]},
]  # fmt: skip


def test_under_vmalert_every_recorded_read_waits_an_evaluation() -> None:
    """`a` reads what agents export, `b` reads `a` in its group, `c` reads `b` from
    another group, `d` reads `c` and `a`: four deep. A name read inside a range
    selector or a function counts, an alert group records nothing, and a rule reading
    its own last value ends without looping."""
    assert chains.chain_depths(GROUPS) == {"base": 2, "alerts": 0, "upper": 4}


def test_under_prometheus_only_another_group_s_series_or_a_later_rule_s_waits() -> None:
    """`b` reads `a` recorded just before it, `d` reads `c` likewise: each group is one
    evaluation deep but `upper`, which reads `base`'s series as of its last evaluation.
    A rule reading one recorded after it in its group reads the last evaluation's."""
    assert chains.chain_depths(GROUPS, each_rule_waits=False) == {
        "base": 1, "alerts": 0, "upper": 2,
    }  # fmt: skip
    reordered = [{"name": "base", "rules": GROUPS[0]["rules"][::-1]}]
    assert chains.chain_depths(reordered, each_rule_waits=False) == {"base": 2}


def test_the_benchmark_reads_the_groups_from_rule_files(tmp_path: Path) -> None:
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(yaml.safe_dump({"groups": GROUPS[:2]}))
    second.write_text(yaml.safe_dump({"groups": GROUPS[2:]}))
    assert rule_timing.chain_depths([first, second]) == chains.chain_depths(GROUPS)


def test_the_mixin_s_straggler_rules_chain_deepest(tmp_path: Path) -> None:
    """The mixin as built: the straggler groups chain a per-GPU feature, each job's
    median and a score off both (at least three deep), deeper than every other group;
    the report groups read what agents export only (they run every few minutes, a
    chain there would take as many); alert groups record nothing."""
    alerts_build.write(tmp_path, MixinConfig())
    files = [tmp_path / alerts_build.PROMETHEUS_RECORDING, tmp_path / alerts_build.VMALERT_ALERTS]
    depths = rule_timing.chain_depths(files)
    straggler = {g: d for g, d in depths.items() if "straggler" in g}
    others = {g: d for g, d in depths.items() if "straggler" not in g}
    assert len(straggler) == 3 and min(straggler.values()) >= 3
    assert max(straggler.values()) > max(others.values())
    assert {d for g, d in depths.items() if g.startswith("nvwatch-report-")} == {1}
    alerting = {g["name"] for g in yaml.safe_load(files[1].read_text())["groups"]}
    assert alerting and all(depths[g] == 0 for g in alerting)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits' clock, moved on by their pauses alone: no test sleeps."""
    now = [0.0]

    def pause(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(rule_timing, "now", lambda: now[0])
    monkeypatch.setattr(rule_timing, "pause", pause)
    return now


def test_the_wait_ends_once_each_group_is_evaluated_as_often_as_it_chains(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    """Groups evaluated every minute from 10 s on: a group chaining 3 deep is waited
    for until its third evaluation ends, one of depth 0 not at all."""

    def counters(_url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        done = max(0.0, (clock[0] - 10.0) // 60.0 + 1)
        return {COUNTER: [({"group": g}, done) for g in ("deep", "shallow", "alerts")]}

    monkeypatch.setattr(rule_timing.m, "scrape_metrics", counters)
    waited = rule_timing.chained_through(
        "http://127.0.0.1:9", COUNTER, {"deep": 3, "shallow": 1, "alerts": 0}, 60.0
    )
    assert 130.0 <= waited < 130.0 + rule_timing.POLL_S + 1e-9


def test_a_group_that_stops_evaluating_is_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    def counters(_url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        return {COUNTER: [({"group": "stuck"}, 2.0), ({"group": "fine"}, 9.0)]}

    monkeypatch.setattr(rule_timing.m, "scrape_metrics", counters)
    with pytest.raises(RuntimeError, match=r"'stuck': '2 of 6'"):
        rule_timing.chained_through("http://127.0.0.1:9", COUNTER, {"stuck": 6, "fine": 6}, 60.0)
    # given up past six intervals and the slack, not before
    assert (
        6 * 60.0 + rule_timing.SLACK_S
        <= clock[0]
        <= 6 * 60.0 + rule_timing.SLACK_S + 2 * rule_timing.POLL_S
    )


def test_each_group_is_read_once_evaluated_at_its_own_interval(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    """Readings follow the minute groups; a 5-minute group first evaluated at 250 s is in
    none of the four readings before it and in the one the wait for it adds, with the
    duration of that evaluation: Prometheus counts it as it begins (at 250 s) and has
    its duration as it ends (20 s later)."""
    first = {"minute": 10.0, "report": 250.0}
    intervals = {"minute": 60.0, "report": 300.0}

    def iterations(_url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        return {
            "prometheus_rule_group_iterations_total": [
                ({"rule_group": f"rules.yaml;{g}"}, max(0.0, (clock[0] - first[g]) // i + 1))
                for g, i in intervals.items()
            ]
        }

    monkeypatch.setattr(rule_timing.m, "scrape_metrics", iterations)
    readings = rule_timing.rule_readings(
        "http://127.0.0.1:9", "prometheus_rule_group_iterations_total",
        lambda: {"minute": 1.0 if clock[0] >= 15.0 else 0.0,
                 "report": 20.0 if clock[0] >= 270.0 else 0.0}, intervals, 4,
    )  # fmt: skip
    # the first reading comes as the minute group's first evaluation begins (at 10 s,
    # ending at 15 s): it holds no duration of it
    assert [sorted(r) for r in readings] == [[]] + [["minute"]] * 3 + [["minute", "report"]]
    assert readings[-1]["report"] == 20.0
    assert 270.0 <= clock[0] < 280.0  # the fifth reading waited for the first evaluation


def test_the_section_says_how_deep_vmalert_s_rules_chain_and_how_long_it_waited() -> None:
    engine = {
        "live_from": 1_800.0,
        "gap": {"samples": 2e6, "seconds": 4.0},
        "chains": {"nvwatch-node.rules": 2, "nvwatch-straggler-links.rules": 6},
        "chained_seconds": 121.6,
    }
    said = vm_gap({"engines": {"victoria-metrics": engine}, "generation": {"history_end": 0.0}})
    assert "chain up to 6 deep" in said and "122 s after" in said
    del engine["chains"], engine["chained_seconds"]  # a run before the wait
    figures = {"engines": {"victoria-metrics": engine}, "generation": {"history_end": 0.0}}
    assert "chain" not in vm_gap(figures)


def test_settled_readings_take_no_evaluation_begun_before_them(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    """Prometheus counts an evaluation as it begins. Called at 80 s, while the one
    begun at 70 s (slowed by the report before: 25 s) runs, the readings hold only the
    evaluations begun after the call (5 s each), one per minute; the report's group,
    every five minutes, is not waited for."""
    begins = [10.0 + 60.0 * k for k in range(20)]

    def took(begin: float) -> float:
        return 25.0 if begin < 80.0 else 5.0

    def iterations(_url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        begun = sum(1.0 for b in begins if b <= clock[0])
        return {"prometheus_rule_group_iterations_total": [
            ({"rule_group": "rules.yaml;minute"}, begun),
            ({"rule_group": "rules.yaml;report"}, 1.0),
        ]}  # fmt: skip

    def last_duration() -> dict[str, float]:
        ended = [took(b) for b in begins if b + took(b) <= clock[0]]
        return {"minute": ended[-1], "report": 40.0}

    monkeypatch.setattr(rule_timing.m, "scrape_metrics", iterations)
    clock[0] = 80.0
    settled: list[float] = []
    readings = rule_timing.settled_readings(
        "http://127.0.0.1:9", "prometheus_rule_group_iterations_total", last_duration,
        {"minute": 60.0, "report": 300.0}, 3, settle=lambda: settled.append(clock[0]),
    )  # fmt: skip
    assert readings == [{"minute": 5.0}] * 3
    # the running evaluation let end: the window began as the next one did (130 s)
    assert settled and 130.0 <= settled[0] < 130.0 + rule_timing.POLL_S + 1e-9
    assert 310.0 <= clock[0] < 310.0 + rule_timing.POLL_S + 1e-9


def test_settled_readings_give_up_on_a_group_that_stopped(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    def iterations(_url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        return {COUNTER: [({"group": "stuck"}, 7.0)]}

    monkeypatch.setattr(rule_timing.m, "scrape_metrics", iterations)
    with pytest.raises(RuntimeError, match="not evaluated 1 more times"):
        rule_timing.settled_readings("http://127.0.0.1:9", COUNTER, dict, {"stuck": 60.0}, 4)
    assert clock[0] <= 6 * 60.0 + rule_timing.SLACK_S + 2 * rule_timing.POLL_S


def test_vmalert_s_mean_is_over_the_iterations_since_a_reading() -> None:
    """vmalert's summary sums every iteration of its life: 10 iterations of 20 s at
    the start, then 4 of 2 s: since the first reading, 2 s."""

    def summary(total: float, count: float) -> dict[str, list[tuple[dict[str, str], float]]]:
        return {
            "vmalert_iteration_duration_seconds_sum": [({"group": "g"}, total)],
            "vmalert_iteration_duration_seconds_count": [({"group": "g"}, count)],
        }

    before, after = summary(200.0, 10.0), summary(208.0, 14.0)
    assert rule_timing.m.vmalert_group_seconds(after) == {"g": pytest.approx(208.0 / 14.0)}
    assert rule_timing.m.vmalert_group_seconds(after, since=before) == {"g": pytest.approx(2.0)}
    # a group not evaluated since has no mean, rather than a division by zero
    assert rule_timing.m.vmalert_group_seconds(before, since=before) == {}


def test_the_slower_groups_keep_their_readings_at_the_engine_s_start() -> None:
    first = [{"minute": 9.0}, {"minute": 8.0, "report": 3.0}]
    settled = [{"minute": 2.0}, {"minute": 2.5}]
    assert rule_timing.with_slower(settled, first) == [*settled, {}, {"report": 3.0}]


def test_merging_counts_the_rows_victoria_metrics_merged_between_two_readings() -> None:
    """Rows merged are summed over every part type and differenced; active merges are
    those running at the later reading."""

    def storage(
        small: float, big: float, active: float
    ) -> dict[str, list[tuple[dict[str, str], float]]]:
        return {
            "vm_rows_merged_total": [
                ({"type": "storage/small"}, small),
                ({"type": "storage/big"}, big),
            ],
            "vm_active_merges": [({"type": "storage/big"}, active)],
        }

    before, after = storage(1_000.0, 50_000.0, 3.0), storage(4_000.0, 950_000.0, 1.0)
    assert rule_timing.m.merging(after, since=before) == {
        "rows_merged": 903_000.0,
        "active_merges": 1.0,
    }
    assert rule_timing.m.merging(after, since={}) == {
        "rows_merged": 954_000.0,
        "active_merges": 1.0,
    }
