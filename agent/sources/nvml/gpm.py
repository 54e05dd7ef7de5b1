"""GPU Performance Monitoring (Hopper+): SM activity, occupancy, tensor and DRAM use.

GPM metrics are rates between two samples, so each GPU keeps the sample of the previous
poll: poll N reports the activity between poll N-1 and poll N, the same window the
Prometheus scrape sees. These are the DCGM profiling metrics (DCGM_FI_PROF_SM_ACTIVE,
..._SM_OCCUPANCY, ..._PIPE_TENSOR_ACTIVE, ..._DRAM_ACTIVE), without running DCGM.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pynvml

from nvwatch.agent.sources.nvml.device import Device, error_name, plain_number

log = logging.getLogger(__name__)

# NVML refuses metrics from samples closer together than this.
MIN_INTERVAL_S = 0.1

#: Catalogue field -> NVML_GPM_METRIC_* id; NVML reports them in percent.
GPM_METRICS: tuple[tuple[str, int], ...] = (
    ("sm_active", pynvml.NVML_GPM_METRIC_SM_UTIL),
    ("sm_occupancy", pynvml.NVML_GPM_METRIC_SM_OCCUPANCY),
    ("tensor_active", pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL),
    ("dram_active", pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL),
)


@dataclass(frozen=True)
class GpmReading:
    sm_active_ratio: float | None = None
    sm_occupancy_ratio: float | None = None
    tensor_active_ratio: float | None = None
    dram_active_ratio: float | None = None


class GpmSampler:
    """Two GPM sample buffers per GPU, or per MIG GPU instance, swapped each poll.

    With `gpu_instance_id`, the samples are that GPU instance's (nvmlGpmMigSampleGet on
    the parent GPU), as ratios of the instance's own SMs and memory bandwidth.
    """

    def __init__(self, device: Device, gpu_instance_id: int | None = None) -> None:
        self._device = device
        self._gpu_instance_id = gpu_instance_id
        self._supported: bool | None = None
        self._retry_at = 0.0
        self._previous: Any = None
        self._previous_at: float | None = None
        self._spare: Any = None

    def read(self) -> GpmReading:
        """Ratios since the previous call; empty on the first call or without GPM."""
        if not self._is_supported():
            return GpmReading()
        try:
            return self._read()
        except pynvml.NVMLError as err:
            self._device.raise_if_down(err)
            log.debug("GPU %d: GPM read failed: %s", self._device.index, error_name(err))
            # the pair is broken: start again from a fresh first sample next poll
            self._previous_at = None
            return GpmReading()

    def close(self) -> None:
        for sample in (self._previous, self._spare):
            if sample is not None:
                try:
                    pynvml.nvmlGpmSampleFree(sample)
                except pynvml.NVMLError as err:
                    log.debug("nvmlGpmSampleFree: %s", error_name(err))
        self._previous = self._spare = None
        self._previous_at = None

    def _is_supported(self) -> bool:
        now = self._device.session.clock()
        if self._supported is None or (not self._supported and now >= self._retry_at):
            # nvmlGpmQueryDeviceSupport answers "no" before Hopper; ask again only rarely
            support = self._device.call("gpm_support", pynvml.nvmlGpmQueryDeviceSupport)
            self._supported = support is not None and bool(support.isSupportedDevice)
            self._retry_at = now + self._device.session.reprobe_interval
        return self._supported

    def _read(self) -> GpmReading:
        if self._previous is None:
            self._previous = pynvml.nvmlGpmSampleAlloc()
            self._spare = pynvml.nvmlGpmSampleAlloc()
        now = self._device.session.clock()
        if self._previous_at is not None and now - self._previous_at < MIN_INTERVAL_S:
            return GpmReading()
        current = self._spare
        if self._gpu_instance_id is None:
            pynvml.nvmlGpmSampleGet(self._device.handle, current)
        else:
            pynvml.nvmlGpmMigSampleGet(self._device.handle, self._gpu_instance_id, current)
        previous_at, self._previous_at = self._previous_at, now
        self._spare, self._previous = self._previous, current
        if previous_at is None:
            return GpmReading()
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1 = self._spare  # the older sample
        request.sample2 = current
        for slot, (_, metric_id) in enumerate(GPM_METRICS):
            request.metrics[slot].metricId = metric_id
        pynvml.nvmlGpmMetricsGet(request)
        ratios: dict[str, float | None] = {}
        for slot, (name, _) in enumerate(GPM_METRICS):
            metric = request.metrics[slot]
            value = plain_number(metric.value) if metric.nvmlReturn == pynvml.NVML_SUCCESS else None
            ratios[name] = min(value / 100.0, 1.0) if value is not None else None
        return GpmReading(
            sm_active_ratio=ratios["sm_active"],
            sm_occupancy_ratio=ratios["sm_occupancy"],
            tensor_active_ratio=ratios["tensor_active"],
            dram_active_ratio=ratios["dram_active"],
        )
