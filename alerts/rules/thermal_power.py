"""The thermal and power group: a GPU near slowdown, clocks held down, a node at its budget."""

from __future__ import annotations

from collections.abc import Callable

from nvwatch.alerts.rules.base import (
    Alert,
    AlertGroup,
    Kind,
    Runbook,
    Severity,
    q,
    where_gpu,
    where_node,
)
from nvwatch.alerts.rules.heat_source import (
    heat_source_runbook,
    heat_source_text,
    with_heat_source,
)
from nvwatch.mixin.config import MixinConfig


def temperature_near_slowdown(cfg: MixinConfig) -> Alert:
    s = cfg.sel
    margin = cfg.gpu_temp_margin_celsius
    hot = (
        f"nvwatch_gpu_temperature_celsius{s('sensor=' + q('gpu'))}\n"
        f"    >= ignoring (sensor, threshold)\n"
        f"  (nvwatch_gpu_temperature_threshold_celsius{s('threshold=' + q('slowdown'))}"
        f" - {margin:g})"
    )
    return Alert(
        "NvwatchGpuTemperatureNearSlowdown",
        with_heat_source(cfg, hot),
        cfg.for_default,
        Severity.WARNING,
        "GPU temperature is close to its slowdown threshold.",
        f"{where_gpu(cfg)} is within {margin:g} °C of the temperature where the driver "
        f"slows its clocks. {heat_source_text(cfg)}",
        Runbook(
            "The die temperature is within the configured margin of the GPU's own "
            "slowdown threshold (read from NVML per board). Above the threshold the "
            "driver halves clocks and jobs slow down. " + heat_source_runbook(cfg),
            "Node dashboard, *GPU and HBM temperature* panel: is only this GPU hot "
            "(airflow, a failed fan in its tray, thermal paste) or every GPU in the "
            "node or rack (inlet temperature, CDU/CRAC)? `nvidia-smi -q -d "
            "TEMPERATURE` on the node shows the die temperature and the same "
            "thresholds.",
            "The room: call facilities. The node: replace its fan. The GPU: for one hot "
            "GPU among cool neighbours, drain the node and have the tray inspected. "
            "Without BMC data, check the node's inlet and fans (IPMI) first.",
            f"Repaired means the die is cooler than {margin:g} °C below slowdown again "
            "(airflow, inlet or fan fixed, or the load dropped); the alert resolves at "
            "the next evaluation.",
        ),
        Kind.CONDITION,
    )


def memory_temperature_near_max(cfg: MixinConfig) -> Alert:
    s = cfg.sel
    margin = cfg.hbm_temp_margin_celsius
    hot = (
        f"nvwatch_gpu_temperature_celsius{s('sensor=' + q('memory'))}\n"
        f"    > ignoring (sensor, threshold)\n"
        f"  (nvwatch_gpu_temperature_threshold_celsius{s('threshold=' + q('memory_max'))}"
        f" - {margin:g})"
    )
    return Alert(
        "NvwatchGpuMemoryTemperatureNearMax",
        with_heat_source(cfg, hot),
        cfg.for_default,
        Severity.WARNING,
        "GPU memory (HBM) temperature is close to its maximum.",
        f"HBM of {where_gpu(cfg)} is within {margin:g} °C of its memory_max threshold. "
        f"{heat_source_text(cfg)}",
        Runbook(
            "The HBM stacks are near the highest temperature the board allows "
            "them. Hot HBM raises the rate of ECC errors and, at the limit, "
            "throttles memory clocks. " + heat_source_runbook(cfg),
            "Node dashboard, *GPU and HBM temperature*: HBM temperature against "
            "memory_max; look for rising ECC corrected counts on the same GPU.",
            "Same as for the die: the room, the node's fans or the GPU, as the "
            "description says; for the GPU, a memory-bound job can drive HBM hot while "
            "the die stays cool, so check the workload before draining.",
            f"Repaired means the HBM is cooler than {margin:g} °C below memory_max "
            "again; the alert resolves at the next evaluation.",
        ),
        Kind.CONDITION,
    )


def thermal_slowdown(cfg: MixinConfig) -> Alert:
    slowing = (
        f"nvwatch_gpu_clock_event_active"
        f"{cfg.sel('reason=~' + q('hw_thermal_slowdown|sw_thermal_slowdown'))} == 1"
    )
    return Alert(
        "NvwatchGpuThermalSlowdown",
        with_heat_source(cfg, slowing),
        cfg.thermal_slowdown_for,
        Severity.WARNING,
        "GPU clocks are held down by thermal slowdown.",
        f"{where_gpu(cfg)} has had {{{{ $labels.reason }}}} active for more than "
        f"{cfg.thermal_slowdown_for}; its clocks are reduced. {heat_source_text(cfg)}",
        Runbook(
            "The driver (sw_thermal_slowdown) or the board itself "
            "(hw_thermal_slowdown) is lowering clocks because the GPU is too hot. "
            "Every kernel on that GPU runs slower, and in a multi-GPU job the "
            "slowest GPU sets the pace of all of them. " + heat_source_runbook(cfg),
            "Node dashboard, *Throttle reasons* state timeline and *SM clock*: "
            "clocks below max while the reason is active. `nvidia-smi -q -d "
            "PERFORMANCE` lists the active clock event reasons.",
            "A cooling fault, as the description says: the room (call facilities), the "
            "node (replace its fan) or the GPU (a GPU that slows down alone while its "
            "neighbours are cool needs a hardware ticket). Without BMC data, check inlet "
            "air and fans/CDU by hand, then the GPU's neighbours.",
            "Repaired means the driver no longer reports the slowdown reason, i.e. the "
            "GPU cooled below its slowdown threshold (cooling fixed: a fan, the "
            "airflow, the CDU); the alert resolves at the next evaluation. A slowdown "
            "that is already active at the first scrape fires after the same "
            f"{cfg.thermal_slowdown_for}. A failed chassis fan has its own alert from "
            "the BMC (NvwatchNodeFanStopped); a GPU's own fan has none: a fan at 0 % is "
            "also how many boards idle, and data-centre boards report no fan "
            "(`nvwatch_gpu_fan_speed_ratio` shows what NVML reports).",
        ),
        Kind.CONDITION,
    )


def temperature_rising_fast(cfg: MixinConfig) -> Alert:
    s = cfg.sel
    w = cfg.rate_window
    return Alert(
        "NvwatchGpuTemperatureRisingFast",
        # A job starting on a cold GPU warms it by 10+ °C a minute: normal. Only a
        # fast rise that is already near slowdown is worth telling anyone about.
        f"deriv(nvwatch_gpu_temperature_celsius{s('sensor=' + q('gpu'))}[{w}]) * 60"
        f" > {cfg.temp_rise_celsius_per_minute:g}\n"
        "and ignoring(sensor)\n"
        f"(nvwatch_gpu_temperature_threshold_celsius{s('threshold=' + q('slowdown'))}"
        "\n  - ignoring(threshold, sensor)\n"
        f"  nvwatch_gpu_temperature_celsius{s('sensor=' + q('gpu'))})"
        f" < {cfg.temp_rise_headroom_celsius:g}",
        cfg.for_fast,
        Severity.INFO,
        "GPU temperature is rising fast.",
        f"{where_gpu(cfg)} warms by {{{{ $value | humanize }}}} °C per minute.",
        Runbook(
            "The die temperature climbs faster than the configured rate, averaged "
            f"over {w}, while already within {cfg.temp_rise_headroom_celsius:g} °C "
            "of its slowdown threshold. A cold GPU warming up at a job's start "
            "does not fire; a hot one still climbing means cooling is losing "
            "ground and slowdown is minutes away.",
            "Thermal & power dashboard: do neighbouring GPUs and nodes rise "
            "together (facility) or only this one (local airflow)?",
            "Watch for NvwatchGpuTemperatureNearSlowdown next; if several nodes "
            "rise at once, alert facilities before they reach slowdown.",
            f"A rate of change: it resolves once the rise over the last {w} falls "
            "below the threshold or the GPU is far enough from slowdown; a GPU that "
            "stays hot is NvwatchGpuTemperatureNearSlowdown's.",
        ),
        Kind.EVENT,
    )


def power_capped(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchGpuPowerCapped",
        # Held at the cap for most of the window, not in every poll: under a training
        # load the driver drops the sw_power_cap flag for a single poll every 10-20 s
        # while the cap lasts, and `== 1` resolved (and re-paged) on each dip.
        f"avg_over_time(nvwatch_gpu_clock_event_active{cfg.sel('reason=' + q('sw_power_cap'))}"
        f"[{cfg.rate_window}]) > 0.5",
        cfg.power_cap_for,
        Severity.WARNING,
        "GPU has been pinned at its power cap for a long time.",
        f"{where_gpu(cfg)} has held its clocks down at the software power cap for more than "
        f"{cfg.power_cap_for} ({{{{ $value | humanizePercentage }}}} of the polls in the "
        f"last {cfg.rate_window}).",
        Runbook(
            "The GPU draws as much power as its enforced limit allows and the "
            "driver lowers clocks to stay under it. At TDP this is normal for "
            "dense jobs; below TDP someone lowered the limit.",
            "Node dashboard, *Power vs limit vs TDP*: is the enforced limit below "
            "the TDP (`nvidia-smi -q -d POWER`, `Requested/Enforced Power "
            "Limit`)?",
            "If the limit is below TDP and that was not planned, restore it "
            "(`nvidia-smi -pl`). At TDP, it is a capacity signal for the review, "
            "not a fault.",
            f"Resolves when the driver reports the power cap reason in at most half the "
            f"polls of the last {cfg.rate_window}: the limit was raised back, or the load "
            "fell below it.",
        ),
        Kind.CONDITION,
    )


def hw_power_brake(cfg: MixinConfig) -> Alert:
    return Alert(
        "NvwatchGpuHwPowerBrake",
        f"nvwatch_gpu_clock_event_active{cfg.sel('reason=' + q('hw_power_brake'))} == 1",
        cfg.hw_power_brake_for,
        Severity.CRITICAL,
        "GPU hardware power brake is engaged.",
        f"{where_gpu(cfg)} has been slowed by the external power brake signal for more than "
        f"{cfg.hw_power_brake_for}.",
        Runbook(
            "The board's power brake input is asserted: the chassis or power "
            "supply told the GPU to drop to minimum clocks, usually because a PSU "
            "failed or the node exceeds what its supplies can deliver.",
            "Are all GPUs of the node braked at once (chassis) or one (board)? "
            "Check PSU status in the BMC (`ipmitool sdr type 'Power Supply'`).",
            "Drain the node and replace the failed PSU; a brake on a single GPU "
            "with healthy PSUs is a hardware ticket for the board.",
            "Repaired means the brake signal is released (the PSU replaced, the "
            "chassis' power restored) and the driver no longer reports hw_power_brake; "
            "the alert resolves at the next evaluation, and a brake that is already "
            f"on at the first scrape fires after the same {cfg.hw_power_brake_for}.",
        ),
        Kind.CONDITION,
    )


def node_power_near_budget(cfg: MixinConfig) -> Alert:
    w = cfg.rate_window
    return Alert(
        "NvwatchNodePowerNearBudget",
        # NVML power is an instantaneous sample that swings between the compute
        # and communication phases of every training step: judge the average.
        f"avg_over_time(instance:nvwatch_gpu_power_watts:sum[{w}])\n"
        "  / instance:nvwatch_gpu_power_tdp_watts:sum\n"
        f"  > {cfg.node_power_budget_fraction:g}",
        cfg.for_default,
        Severity.WARNING,
        "Node GPU power is close to the node's GPU power budget.",
        f"{where_node(cfg)} draws {{{{ $value | humanizePercentage }}}} of the "
        "summed TDP of its GPUs.",
        Runbook(
            "The GPUs of the node together draw, on average over "
            f"{w}, more than the configured fraction of their summed TDP. "
            "This is GPU board power only; the whole node's draw, as its BMC measures "
            "it, against the system's maximum is NvwatchNodePowerNearMax.",
            "Thermal & power dashboard, *Power headroom per node* and *per rack*: "
            "is the rack near its PDU limit?",
            "Nothing is broken; if several nodes of a rack are here, tell the "
            "capacity owner before the PDU trips, or lower power limits.",
            f"Resolves when the {w} average falls below the fraction again: less "
            "load, or lower power limits.",
        ),
        Kind.CONDITION,
    )


# In this order in the rule file and in docs/alerts.md.
ALERTS: tuple[Callable[[MixinConfig], Alert], ...] = (
    temperature_near_slowdown,
    memory_temperature_near_max,
    thermal_slowdown,
    temperature_rising_fast,
    power_capped,
    hw_power_brake,
    node_power_near_budget,
)


def group(cfg: MixinConfig) -> AlertGroup:
    return AlertGroup(
        "nvwatch-thermal-power", "Thermal and power", tuple(make(cfg) for make in ALERTS)
    )
