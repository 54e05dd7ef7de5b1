"""Colour steps of the dashboard panels, every tunable one read from the mixin config.

A step list is `(value, colour)` pairs, ascending, the first with value None (Grafana's
base colour). The constants here are not thresholds anyone tunes: they encode what a
value means (a flag that is 1, a count of one or more, the IB spec's ACTIVE state).
"""

from __future__ import annotations

from collections.abc import Sequence

from nvwatch.common.durations import parse_duration
from nvwatch.mixin.config import MixinConfig

Steps = Sequence[tuple[float | None, str]]

# No colour judgement: the panel shows a quantity, not a condition.
OK: Steps = ((None, "green"),)
# A count of broken things (links down, firing alerts, saturated counters) or an error
# rate where one is already one too many.
ANY_BAD: Steps = ((None, "green"), (1, "red"))
# A count of GPUs with some clock-event reason active: worth a look, not an outage.
ANY_WARN: Steps = ((None, "green"), (1, "orange"))
# A 0/1 flag on a state timeline: nothing drawn while off, red while on.
FLAG_ACTIVE: Steps = ((None, "transparent"), (1, "red"))
# nvwatch_ib_port_state 4 is ACTIVE in the IBA spec (1 DOWN, 2 INIT, 3 ARMED).
IB_PORT_ACTIVE: Steps = ((None, "red"), (4, "green"))
# A straggler score: 1 is where a rank stands out from its job (NvwatchJobStraggler, a
# warning); below it nothing is drawn, so the band above 1 alone is tinted.
STANDS_OUT: Steps = ((None, "transparent"), (1, "orange"))
# At least one: a BMC that answers (nvwatch_bmc_up), a spare power supply left.
AT_LEAST_ONE: Steps = ((None, "red"), (1, "green"))
# A BMC sensor state as ipmi_exporter reports it: 0 nominal, 1 warning, 2 critical.
SENSOR_STATE: Steps = ((None, "green"), (1, "orange"), (2, "red"))


def above(limit: float, colour: str = "red") -> Steps:
    """Green up to an alert threshold from the config, `colour` from it on."""
    return ((None, "green"), (limit, colour))


def temperature(cfg: MixinConfig) -> Steps:
    critical = cfg.dashboard_temperature_critical_celsius
    return (
        (None, "green"),
        (critical - cfg.gpu_temp_margin_celsius, "orange"),
        (critical, "red"),
    )


def load(cfg: MixinConfig) -> Steps:
    """High is bad: share of a line rate, of a TDP, of time throttled."""
    return (
        (None, "green"),
        (cfg.dashboard_load_warn_ratio, "orange"),
        (cfg.dashboard_load_critical_ratio, "red"),
    )


def utilization(cfg: MixinConfig) -> Steps:
    """Low is bad: GPU time nobody used."""
    return (
        (None, "red"),
        (cfg.dashboard_utilization_poor_ratio, "orange"),
        (cfg.dashboard_utilization_good_ratio, "green"),
    )


def headroom(cfg: MixinConfig, low: float | None = None) -> Steps:
    """Low is bad: memory or power left at peak; `low` overrides where an alert sets it."""
    return (
        (None, "red"),
        (cfg.dashboard_headroom_low_ratio if low is None else low, "orange"),
        (cfg.dashboard_headroom_ample_ratio, "green"),
    )


def power_headroom(cfg: MixinConfig) -> Steps:
    """Orange where NvwatchNodePowerNearBudget fires: less headroom than its budget leaves."""
    return headroom(cfg, 1 - cfg.node_power_budget_fraction)


def error_rates(cfg: MixinConfig) -> Steps:
    """NVLink and IB error rates on one panel: orange from the lower alert rate, red from
    the higher (sorted, so a config where IB tolerates more than NVLink still ascends)."""
    lower, higher = sorted((cfg.ib_error_rate_per_second, cfg.nvlink_error_rate_per_second))
    return ((None, "green"), (lower, "orange"), (higher, "red"))


def nvlinks_per_gpu(cfg: MixinConfig) -> Steps:
    """Red below the fewest links any node class expects per GPU."""
    return ((None, "red"), (cfg.fewest_nvlinks_per_gpu, "green"))


def inlet_headroom(cfg: MixinConfig) -> Steps:
    """°C left below the class's inlet maximum: red past it (where
    NvwatchNodeInletTemperatureHigh fires), orange within the dashboard's margin."""
    return ((None, "red"), (0, "orange"), (cfg.dashboard_inlet_headroom_celsius, "green"))


def fan_speed(cfg: MixinConfig) -> Steps:
    """Red below the speed NvwatchNodeFanStopped calls stopped."""
    return ((None, "red"), (cfg.fan_stopped_rpm, "green"))


def node_power(cfg: MixinConfig) -> Steps:
    """Share of the class's maximum: orange where NvwatchNodePowerNearMax fires."""
    return ((None, "green"), (cfg.node_power_max_fraction, "orange"), (1, "red"))


def ib_rate(cfg: MixinConfig) -> Steps:
    return ((None, "orange"), (cfg.dashboard_ib_rate_ok_bytes_per_second, "green"))


def queue_wait(cfg: MixinConfig) -> Steps:
    """Seconds a GPU job has waited: orange past the wait after which, with GPUs of its
    partition idle, NvwatchSchedulerJobsWaitingWhileGpusIdle fires."""
    wait = parse_duration(cfg.scheduler_wait_while_idle, "scheduler_wait_while_idle")
    return above(wait, "orange")


def short_of_gpus(cfg: MixinConfig) -> Steps:
    """Share of the time a partition had unmet demand: orange past the share of a week's
    hours at which NvwatchSchedulerShortOfGpus tells the capacity review."""
    return above(cfg.scheduler_short_of_gpus_fraction, "orange")
