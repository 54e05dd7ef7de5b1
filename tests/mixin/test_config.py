"""The mixin config: YAML loading, overrides, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvwatch.alerts.render import prometheus_alerts
from nvwatch.mixin.config import MixinConfig, load


def test_defaults_without_a_file() -> None:
    assert load(None) == MixinConfig()


def test_from_yaml_overrides(tmp_path: Path) -> None:
    path = tmp_path / "mixin.yaml"
    path.write_text(
        "job_selector: 'job=\"gpu\"'\n"
        "for_default: 10s\n"
        "gpu_temp_margin_celsius: 3\n"
        "critical_xids: [79]\n"
        "node_classes:\n  tiny: {gpus: 2, nvlinks_per_gpu: 1, ib_ports: 1, ib_rate_gbps: 100}\n"
    )
    cfg = load(path)
    assert cfg.job_selector == 'job="gpu"'
    assert cfg.for_default == "10s"
    assert cfg.gpu_temp_margin_celsius == 3
    assert cfg.critical_xids == ("79",)
    (tiny,) = cfg.node_classes
    assert (tiny.name, tiny.gpus, tiny.ib_rate_bytes_per_second) == ("tiny", 2, 12.5e9)


def test_node_classes_carry_the_bmc_figures(tmp_path: Path) -> None:
    path = tmp_path / "mixin.yaml"
    path.write_text(
        "node_classes:\n"
        "  rack-server: {gpus: 4, inlet_max_celsius: 27, max_power_watts: 2400,\n"
        "                power_supplies: 2, power_supplies_redundant: 1}\n"
        "  desk: {gpus: 1, power_supplies: 1}\n"
    )
    server, desk = load(path).node_classes
    assert (server.inlet_max_celsius, server.max_power_watts) == (27.0, 2400.0)
    # 1+1: both supplies must be healthy for the node to still have a spare
    assert server.power_supplies_for_redundancy == 2
    # one supply, nothing redundant to lose; no figures, no expectations
    assert desk.power_supplies_for_redundancy is None
    assert (desk.inlet_max_celsius, desk.max_power_watts) == (None, None)


def test_every_simulated_profile_has_a_node_class_with_its_system_power() -> None:
    """The profiles' system power (sim/profiles.py, NVIDIA's published maxima) is the
    figure NvwatchNodePowerNearMax compares node power with."""
    from nvwatch.sim.profiles import PROFILES

    classes = {c.name: c for c in MixinConfig().node_classes}
    assert set(PROFILES) <= set(classes)
    for name, profile in PROFILES.items():
        assert classes[name].max_power_watts == profile.system_power_watts, name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job_selectr: x\n", "unknown mixin config key.*job_selectr"),
        ("for_default: soon\n", "invalid for_default 'soon'"),
        ("rate_window: 30m1h\n", "invalid rate_window"),
        ("gpu_temp_margin_celsius: hot\n", "expected a number"),
        ("node_classes: {x: {gpus: 1, cpus: 2}}\n", r"node_classes\.x: unknown key.*cpus"),
        (
            "node_classes: {x: {power_supplies: 2, power_supplies_redundant: 2}}\n",
            r"node_classes\.x: power_supplies_redundant must be fewer than power_supplies",
        ),
        ("node_classes: {x: {inlet_max_celsius: warm}}\n", "could not convert"),
        ("scheduler_short_of_gpus_fraction: 1\n", "scheduler_short_of_gpus_fraction: expected"),
        ("scheduler_capacity_window: 30m\n", "scheduler_capacity_window: expected at least 1h"),
        ("scheduler_planned_unavailable_reasons: reserved\n", "expected a list"),
        ("- a\n", "must be a mapping"),
    ],
)
def test_from_yaml_rejects_bad_input(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "mixin.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        MixinConfig.from_yaml(path)


def test_durations_take_the_agent_grammar_and_render_as_prometheus_does(tmp_path: Path) -> None:
    path = tmp_path / "mixin.yaml"
    path.write_text("for_slow: 90m\nrate_window: 2.5m\n")
    cfg = load(path)
    assert (cfg.for_slow, cfg.rate_window) == ("1h30m", "2m30s")
    assert "[2m30s]" in str(prometheus_alerts(cfg))


def test_with_overrides_shrinks_durations_for_e2e() -> None:
    fast = MixinConfig().with_overrides(
        for_fast="5s", for_default="5s", for_slow="5s", thermal_slowdown_for="5s",
        power_cap_for="5s", hw_power_brake_for="5s", rate_window="30s",
        evaluation_interval="5s",
    )  # fmt: skip
    text = str(prometheus_alerts(fast))
    assert "'for': '5m'" not in text and "[5m]" not in text
    with pytest.raises(ValueError, match="unknown"):
        MixinConfig().with_overrides(nope=1)


def test_the_scheduler_settings_reach_the_rules(tmp_path: Path) -> None:
    """A site that alerts on reserved nodes too, after an hour's wait, on a 30-day window."""
    path = tmp_path / "mixin.yaml"
    path.write_text(
        "scheduler_wait_while_idle: 1h\n"
        "scheduler_planned_unavailable_reasons: []\n"
        "scheduler_short_of_gpus_fraction: 0.25\n"
        "scheduler_capacity_window: 30d\n"
    )
    rules = {r["alert"]: r for g in prometheus_alerts(load(path))["groups"] for r in g["rules"]}
    assert (
        'nvwatch_scheduler_oldest_pending_seconds{job="nvwatch"} > 3600'
        in (rules["NvwatchSchedulerJobsWaitingWhileGpusIdle"]["expr"])
    )
    assert "reason" not in rules["NvwatchSchedulerNodesUnavailable"]["expr"]
    short = rules["NvwatchSchedulerShortOfGpus"]["expr"]
    # 30 days as Prometheus writes them, 720 hours
    assert "[4w2d:1h]" in short and short.endswith("/ 720 > 0.25")
