"""Each GPU fault scenario moves the metric an operator would be paged on."""

from __future__ import annotations

from nvwatch.sim import scenario_names
from nvwatch.sim.gpu import scenarios
from tests.nvml.conftest import NodeFactory
from tests.nvml.helpers import exposition, names_for_gpu, poll, select, value, wait_for

ONSET = scenario_names.FAULT_ONSET_S


def test_thermal_runaway_crosses_slowdown(node: NodeFactory) -> None:
    n = node("dgx-a100", gpu_scenarios={0: "thermal-runaway"})
    source = n.source()
    poll(source, n.clock, 1)
    baseline = exposition(source.collect())
    slowdown = value(
        baseline, "nvwatch_gpu_temperature_threshold_celsius", gpu="0", threshold="slowdown"
    )
    assert value(baseline, "nvwatch_gpu_temperature_celsius", gpu="0", sensor="gpu") < slowdown
    steps = int((ONSET + scenarios.THERMAL_RAMP_S + 300) / 10)
    series = exposition(poll(source, n.clock, steps, step=10.0)[-1])
    assert value(series, "nvwatch_gpu_temperature_celsius", gpu="0", sensor="gpu") > slowdown
    assert (
        value(series, "nvwatch_gpu_clock_event_active", gpu="0", reason="hw_thermal_slowdown") == 1
    )
    assert (
        value(series, "nvwatch_gpu_clock_event_active", gpu="1", reason="hw_thermal_slowdown") == 0
    )
    assert value(series, "nvwatch_gpu_throttle_seconds_total", gpu="0", reason="thermal") > 0


def test_nvlink_degraded_drops_one_link_with_rising_errors(node: NodeFactory) -> None:
    n = node("dgx1-v100", scenario="nvlink-degraded")
    source = n.source()

    def victim_errors() -> float:
        series = exposition(source.collect())
        return sum(s.value for s in select(series, "nvwatch_nvlink_errors_total", gpu="0"))

    poll(source, n.clock, 2)
    before = victim_errors()
    n.clock.advance(ONSET)  # the bad link is retraining: recoveries and replays
    during = victim_errors()
    n.clock.advance(scenarios.NVLINK_FAIL_AFTER_S + 5)  # then it drops
    after = victim_errors()
    assert before < during <= after
    series = exposition(source.collect())
    down = [s for s in select(series, "nvwatch_nvlink_up") if s.value == 0]
    assert len(down) == 1 and down[0].labels["gpu"] == "0"
    assert len(select(series, "nvwatch_nvlink_up", gpu="0")) == 6  # the link is still listed


def test_gpu_lost_leaves_only_up_zero(node: NodeFactory) -> None:
    n = node("dgx-h100", gpu_scenarios={3: "gpu-lost"})
    source = n.source()
    healthy = exposition(poll(source, n.clock, 2)[-1])
    series = exposition(poll(source, n.clock, int(ONSET / 5) + 3)[-1])
    lost = {s.name for s in series if s.labels.get("gpu") == "3"}
    assert lost == {"nvwatch_gpu_up", "nvwatch_gpu_info"}
    assert value(series, "nvwatch_gpu_up", gpu="3") == 0
    for gpu in (0, 1, 2, 4, 5, 6, 7):
        assert value(series, "nvwatch_gpu_up", gpu=str(gpu)) == 1
        # every series the GPU had while all was well is still there
        healthy_names = {
            k for k in names_for_gpu(healthy, gpu) if k[0] != "nvwatch_gpu_xid_errors_total"
        }
        assert healthy_names <= names_for_gpu(series, gpu)
    assert wait_for(lambda: source.collect().gpus[3].up is False)


def test_ecc_dbe_counts_uncorrected_and_xid_48(node: NodeFactory) -> None:
    n = node("dgx-a100", gpu_scenarios={2: "ecc-dbe"})
    source = n.source()
    poll(source, n.clock, int(ONSET / 5) + 2)
    assert wait_for(lambda: 48 in source.collect().gpus[2].xid_counts)
    series = exposition(source.collect())
    assert (
        value(series, "nvwatch_gpu_ecc_errors_total", gpu="2", type="uncorrected", scope="volatile")
        >= 1
    )
    assert value(series, "nvwatch_gpu_xid_errors_total", gpu="2", xid="48") == 1
    assert not select(series, "nvwatch_gpu_xid_errors_total", gpu="0")
    assert (
        value(series, "nvwatch_gpu_ecc_errors_total", gpu="0", type="uncorrected", scope="volatile")
        == 0
    )


def test_power_capped_sets_sw_power_cap(node: NodeFactory) -> None:
    n = node("dgx-h100", gpu_scenarios={0: "power-capped"})
    source = n.source()
    series = exposition(poll(source, n.clock, int(ONSET / 5) + 12)[-1])
    limit = value(series, "nvwatch_gpu_power_limit_watts", gpu="0")
    assert limit < value(series, "nvwatch_gpu_power_tdp_watts", gpu="0")
    assert value(series, "nvwatch_gpu_clock_event_active", gpu="0", reason="sw_power_cap") == 1
    assert abs(value(series, "nvwatch_gpu_power_watts", gpu="0") - limit) <= 0.05 * limit
    assert value(series, "nvwatch_gpu_clock_event_active", gpu="1", reason="sw_power_cap") == 0
