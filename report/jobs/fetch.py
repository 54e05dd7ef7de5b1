"""One job's summary from Prometheus: where it ran, how long, and its GPUs' series over
its life.

The job's GPUs and life come from `nvwatch_gpu_allocation_info{job_id=...}` (GPU series
carry no job labels; life.py). Every figure is then one instant query at the last scrape
over a window the length of the life, on the job's nodes only; the job's GPUs are picked
out of the answers by (instance, gpu). One Prometheus may hold several clusters whose
nodes may share names: every query keeps to the job's cluster.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from nvwatch.mixin.config import MixinConfig
from nvwatch.report.jobs.life import (
    AmbiguousJob,
    JobNotFound,
    Life,
    cluster_matcher,
    find_life,
    quote,
    regex_escape,
)
from nvwatch.report.jobs.model import (
    EXCLUSIVE,
    GPU_SHARE,
    GpuUse,
    JobSummary,
    NodeShare,
    PortUse,
    totals,
)
from nvwatch.report.jobs.notes import notes_for
from nvwatch.report.prom import PrometheusClient

__all__ = ["AmbiguousJob", "JobNotFound", "fetch_summary"]

PEER_POINTS = 240  # points per GPU of the peers' utilization over the life


def fetch_summary(
    client: PrometheusClient,
    cfg: MixinConfig,
    job_id: str,
    now: float,
    lookback_s: float,
    cluster: str | None = None,
) -> JobSummary:
    life = find_life(client, cfg, job_id, now, lookback_s, cluster)
    q = _Queries(client, cfg, life)
    per_gpu, events, models = q.gpu_figures(), q.clock_events(), q.models()
    gpus = tuple(
        _gpu_use(key, per_gpu, events.get(key, {}), models.get(key, "")) for key in life.gpus
    )
    summary = JobSummary(
        job_id=job_id,
        cluster=life.cluster,
        user=life.user,
        account=life.account,
        start=life.start,
        end=life.end,
        gpus=gpus,
        ports=q.ports(),
        nodes=q.node_shares(job_id),
        grid_intensity_g_per_kwh=cfg.grid_intensity_g_per_kwh,
        runs=life.runs,
        **totals(gpus),
    )
    return notes_for(summary, cfg, q.peer_median_utilization(job_id), q.stragglers(job_id))


class _Queries:
    """The instant queries over the job's life, on its nodes of its cluster."""

    def __init__(self, client: PrometheusClient, cfg: MixinConfig, life: Life) -> None:
        self.client, self.cfg, self.life = client, cfg, life
        names = "|".join(regex_escape(i) for i in life.instances)
        self.cluster = cluster_matcher(cfg, life.cluster)
        self.nodes = f'{self.cluster}, {cfg.instance_label}=~"{names}"'
        either = f'{cfg.cluster_label}=~"{regex_escape(life.cluster)}|"'
        self._bmc_nodes = f'{either}, {cfg.instance_label}=~"{names}"'

    def _at_end(self, expr: str) -> list[tuple[dict[str, str], Any]]:
        return self.client.query(expr, self.life.end)

    def _per_gpu(self, fn: str, metric: str) -> dict[tuple[str, str], float]:
        expr = f"{fn}({metric}{self.cfg.sel(self.nodes)}[{self.life.window}])"
        return {_gpu_key(self.cfg, s): float(v[1]) for s, v in self._at_end(expr)}

    def gpu_figures(self) -> dict[str, dict[tuple[str, str], float]]:
        figures = {
            "utilization": self._per_gpu("avg_over_time", "nvwatch_gpu_utilization_ratio"),
            "sm_active": self._per_gpu("avg_over_time", "nvwatch_gpu_sm_active_ratio"),
            "tensor_active": self._per_gpu("avg_over_time", "nvwatch_gpu_tensor_active_ratio"),
            "memory_peak_bytes": self._per_gpu("max_over_time", "nvwatch_gpu_memory_used_bytes"),
            "memory_total_bytes": self._per_gpu("max_over_time", "nvwatch_gpu_memory_total_bytes"),
            "power_mean_watts": self._per_gpu("avg_over_time", "nvwatch_gpu_power_watts"),
            "power_limit_watts": self._per_gpu("avg_over_time", "nvwatch_gpu_power_limit_watts"),
            "energy_joules": self._counter_deltas("nvwatch_gpu_energy_joules_total"),
            "nvlink_bytes": self._nvlink_bytes(),
        }
        return figures

    def _counter_deltas(self, metric: str) -> dict[tuple[str, str], float]:
        """Each GPU's counter over the life, exactly: its reading at the end less its
        reading at the start where it never reset (two numbers per GPU), from its raw
        samples only where it did (a day of them is thousands of points per GPU)."""
        selector = f"{metric}{self.cfg.sel(self.nodes)}"
        window = self.life.counter_window
        reset = {
            _gpu_key(self.cfg, s) for s, _ in self._at_end(f"resets({selector}[{window}]) > 0")
        }
        firsts = {
            _gpu_key(self.cfg, s): float(v[1])
            for s, v in self.client.query(selector, self.life.start)
        }
        out = {
            key: float(v[1]) - firsts[key]
            for s, v in self._at_end(selector)
            if (key := _gpu_key(self.cfg, s)) in firsts and key not in reset
        }
        if reset:
            for labels, values in self._at_end(f"{selector}[{window}]"):
                key = _gpu_key(self.cfg, labels)
                if key in reset:
                    out[key] = counter_delta(values)
        return out

    def _nvlink_bytes(self) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = {}
        by = f"{self.cfg.instance_label}, gpu"
        for way in ("transmit", "receive"):
            metric = f"nvwatch_nvlink_{way}_bytes_total{self.cfg.sel(self.nodes)}"
            expr = f"sum by ({by}) (increase({metric}[{self.life.counter_window}]))"
            for labels, value in self._at_end(expr):
                key = _gpu_key(self.cfg, labels)
                out[key] = out.get(key, 0.0) + float(value[1])
        return out

    def clock_events(self) -> dict[tuple[str, str], dict[str, float]]:
        metric = f"nvwatch_gpu_clock_event_active{self.cfg.sel(self.nodes)}"
        out: dict[tuple[str, str], dict[str, float]] = {}
        for labels, value in self._at_end(f"avg_over_time({metric}[{self.life.window}])"):
            share = float(value[1])
            if share > 0:
                out.setdefault(_gpu_key(self.cfg, labels), {})[labels.get("reason", "")] = share
        return out

    def models(self) -> dict[tuple[str, str], str]:
        info = f"nvwatch_gpu_info{self.cfg.sel(self.nodes)}"
        found = self._at_end(f"max_over_time({info}[{self.life.window}])")
        return {_gpu_key(self.cfg, s): s.get("name", "") for s, _ in found}

    def ports(self) -> tuple[PortUse, ...]:
        inst = self.cfg.instance_label
        rows: dict[tuple[str, str, str], list[float]] = {}
        for index, way in enumerate(("transmit", "receive")):
            metric = f"nvwatch_ib_port_{way}_bytes_total{self.cfg.ib_sel(self.nodes)}"
            expr = f"increase({metric}[{self.life.counter_window}])"
            for labels, value in self._at_end(expr):
                key = (labels.get(inst, ""), labels.get("device", ""), labels.get("port", ""))
                rows.setdefault(key, [0.0, 0.0])[index] += float(value[1])
        return tuple(PortUse(i, d, p, tx, rx) for (i, d, p), (tx, rx) in sorted(rows.items()))

    def node_shares(self, job_id: str) -> tuple[NodeShare, ...]:
        """Each node's BMC energy over the life; the whole of it is the job's where no
        other job held a GPU of the node meanwhile, else its share of the node's GPUs."""
        inst, window = self.cfg.instance_label, self.life.window
        gpus = f"max_over_time(nvwatch_gpu_utilization_ratio{self.cfg.sel(self.nodes)}[{window}])"
        totals_ = {
            s.get(inst, ""): int(float(v[1]))
            for s, v in self._at_end(f"count by ({inst}) ({gpus})")
        }
        others = self.cfg.sel(self.nodes, f"job_id!={quote(job_id)}")
        shared_expr = (
            f"count by ({inst}) (max_over_time(nvwatch_gpu_allocation_info{others}[{window}]))"
        )
        shared = {s.get(inst, "") for s, _ in self._at_end(shared_expr)}
        # the probe's targets carry the node's cluster label (docs/metrics.md); a BMC
        # without one still counts where its node's name is its cluster's alone
        power = f"nvwatch_bmc_power_watts{self.cfg.bmc_sel(self._bmc_nodes)}"
        watts: dict[str, float] = {}
        for labels, value in self._at_end(f"avg_over_time({power}[{window}])"):
            node = labels.get(inst, "")
            watts[node] = max(watts.get(node, 0.0), float(value[1]))  # the node's input
        held = {n: sum(1 for i, _ in self.life.gpus if i == n) for n in self.life.instances}
        span = self.life.end - self.life.start
        return tuple(
            NodeShare(
                instance=node,
                gpus_held=held[node],
                gpus_total=totals_.get(node, held[node]),
                method=GPU_SHARE if node in shared else EXCLUSIVE,
                node_energy_joules=watts[node] * span if node in watts else None,
            )
            for node in self.life.instances
        )

    def peer_median_utilization(self, job_id: str) -> float | None:
        """The median utilization of the GPUs other jobs held during this one's life,
        each averaged over the time it was held: the job's peers, not its own GPUs nor
        idle GPUs nobody held. A subquery of at most PEER_POINTS points per GPU."""
        by = f"{self.cfg.cluster_label}, {self.cfg.instance_label}, gpu"
        span = self.life.end - self.life.start
        resolution = max(self.life.interval, span / PEER_POINTS, 1.0)
        # the job's own cluster: another's GPUs run other work on other hardware
        others = self.cfg.sel(self.cluster, f"job_id!={quote(job_id)}")
        held = (
            f"nvwatch_gpu_utilization_ratio{self.cfg.sel(self.cluster)}\n"
            f"  and on ({by}) nvwatch_gpu_allocation_info{others}"
        )
        window = f"[{self.life.window}:{resolution:.0f}s]"
        found = self._at_end(f"quantile(0.5, avg_over_time(({held}){window}))")
        return float(found[0][1][1]) if found and found[0][1][1] != "NaN" else None

    def stragglers(self, job_id: str) -> list[dict[str, str]]:
        alerts = (
            f'ALERTS{{alertname="NvwatchJobStraggler", alertstate="firing", '
            f"{self.cluster}, job_id={quote(job_id)}}}"
        )
        return [s for s, _ in self._at_end(f"max_over_time({alerts}[{self.life.window}])")]


def _gpu_use(
    key: tuple[str, str],
    figures: dict[str, dict[tuple[str, str], float]],
    events: dict[str, float],
    model: str,
) -> GpuUse:
    values = {name: by_gpu.get(key) for name, by_gpu in figures.items()}
    return GpuUse(instance=key[0], gpu=key[1], model=model, clock_events=events, **values)


def counter_delta(samples: Iterable[list[Any]]) -> float:
    """A counter's increase over its raw samples, a reset counting from zero."""
    values = [float(v) for _, v in samples]
    total = 0.0
    for before, after in itertools.pairwise(values):
        total += after - before if after >= before else after
    return total


def _gpu_key(cfg: MixinConfig, labels: dict[str, str]) -> tuple[str, str]:
    return labels.get(cfg.instance_label, ""), labels.get("gpu", "")
