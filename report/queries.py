"""The PromQL behind every number of the report, built from the mixin config.

Each query is a range query at the report's step whose inner function covers exactly
one step (`avg_over_time(x[1h])` at a 1 h step), so every raw sample counts once and a
sum of value x step is an integral. Per-GPU detail is kept where a table names GPUs;
everything else is summed per node in Prometheus, which keeps a 1,000-GPU fleet's
answer small. "static" queries (TDPs, line rates, thresholds) give one value per
series: the largest of their per-day maxima over the range.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from nvwatch.alerts.recording_straggler import THERMAL_REASONS
from nvwatch.mixin.config import MixinConfig
from nvwatch.report.window import Window


@dataclass(frozen=True)
class Query:
    name: str
    expr: str
    static: bool = False  # one value per series: the largest over the range


def build_queries(cfg: MixinConfig, window: Window, cluster: str | None) -> list[Query]:
    # json.dumps quotes and escapes as PromQL's double-quoted strings do
    extra = f"{cfg.cluster_label}={json.dumps(cluster)}" if cluster else ""
    node = f"{cfg.cluster_label}, {cfg.rack_label}, {cfg.node_class_label}, {cfg.instance_label}"
    gpu = f"{node}, gpu, uuid"
    port = f"{node}, device, port"
    step = window.step_text
    whole = window.static_step_text

    def sel(*matchers: str) -> str:
        return cfg.sel(extra, *matchers)

    def ib(*matchers: str) -> str:
        return cfg.ib_sel(extra, *matchers)

    def over(
        fn: str, metric: str, selector: str, by: str, agg: str = "max", rng: str = step
    ) -> str:
        return f"{agg} by ({by}) ({fn}({metric}{selector}[{rng}]))"

    queries = [
        # --- inventory and utilization --------------------------------------------
        Query("gpu_up", over("avg_over_time", "nvwatch_gpu_up", sel(), gpu)),
        Query("gpu_samples", over("count_over_time", "nvwatch_gpu_up", sel(), gpu)),
        Query("gpu_util", over("avg_over_time", "nvwatch_gpu_utilization_ratio", sel(), gpu)),
        *(
            Query(
                f"class_{name}",
                over("avg_over_time", f"nvwatch_gpu_{name}_ratio", sel(), node, agg="avg"),
            )
            for name in ("sm_active", "tensor_active", "dram_active")
        ),
        Query(
            "allocation",
            over(
                "count_over_time",
                "nvwatch_gpu_allocation_info",
                sel(),
                f"{node}, gpu, scheduler, job_id, user, account, pod, namespace, container",
            ),
        ),
        # --- power ----------------------------------------------------------------
        Query("node_power", over("avg_over_time", "nvwatch_gpu_power_watts", sel(), node, "sum")),
        Query(
            "node_power_peak",
            over("max_over_time", "nvwatch_gpu_power_watts", sel(), node, "sum"),
        ),
        Query(
            "node_tdp",
            over("max_over_time", "nvwatch_gpu_power_tdp_watts", sel(), node, "sum", whole),
            static=True,
        ),
        Query(
            "node_power_cap",
            over(
                "avg_over_time",
                "nvwatch_gpu_clock_event_active",
                sel('reason="sw_power_cap"'),
                node,
                "sum",
            ),
        ),
        # --- thermal --------------------------------------------------------------
        Query(
            "gpu_thermal",
            over(
                "avg_over_time",
                "nvwatch_gpu_clock_event_active",
                sel(f'reason=~"{THERMAL_REASONS}"'),
                gpu,
            ),
        ),
        Query(
            "gpu_temp_max",
            over("max_over_time", "nvwatch_gpu_temperature_celsius", sel('sensor="gpu"'), gpu),
        ),
        Query(
            "hbm_temp_max",
            over("max_over_time", "nvwatch_gpu_temperature_celsius", sel('sensor="memory"'), gpu),
        ),
        *(
            Query(
                f"gpu_threshold_{threshold}",
                over(
                    "max_over_time",
                    "nvwatch_gpu_temperature_threshold_celsius",
                    sel(f'threshold="{threshold}"'),
                    gpu,
                    rng=whole,
                ),
                static=True,
            )
            for threshold in ("slowdown", "memory_max")
        ),
        # --- fabric ---------------------------------------------------------------
        Query("ib_tx", over("rate", "nvwatch_ib_port_transmit_bytes_total", ib(), port, "sum")),
        Query("ib_rx", over("rate", "nvwatch_ib_port_receive_bytes_total", ib(), port, "sum")),
        Query("ib_wait", over("rate", "nvwatch_ib_port_transmit_wait_total", ib(), port, "sum")),
        Query(
            "ib_capacity",
            over("max_over_time", "nvwatch_ib_port_rate_bytes_per_second", ib(), port, rng=whole),
            static=True,
        ),
        Query(
            "ib_errors",
            over("max_over_time", "nvwatch_ib_port_errors_total", ib(), f"{node}, type", "sum"),
        ),
        Query(
            "nvlink_tx",
            over("rate", "nvwatch_nvlink_transmit_bytes_total", sel(), gpu, "sum"),
        ),
        Query(
            "nvlink_capacity",
            over(
                "max_over_time", "nvwatch_nvlink_speed_bytes_per_second", sel(), gpu, "sum", whole
            ),
            static=True,
        ),
        Query(
            "nvlink_errors",
            over("max_over_time", "nvwatch_nvlink_errors_total", sel(), f"{node}, type", "sum"),
        ),
        # --- health ---------------------------------------------------------------
        Query(
            "xid",
            over("max_over_time", "nvwatch_gpu_xid_errors_total", sel(), f"{gpu}, xid"),
        ),
        Query(
            "ecc",
            over(
                "max_over_time",
                "nvwatch_gpu_ecc_errors_total",
                sel('scope="aggregate"'),
                f"{node}, type",
                "sum",
            ),
        ),
        Query(
            "remapped_rows",
            over(
                "max_over_time",
                "nvwatch_gpu_remapped_rows",
                sel('kind=~"correctable|uncorrectable"'),
                f"{node}, kind",
                "sum",
            ),
        ),
    ]
    return queries
