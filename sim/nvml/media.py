"""Video, JPEG and optical-flow engines: encoder capacity, statistics and sessions,
frame-buffer capture, NVJPG and OFA utilization.

The simulated workloads are training and inference jobs, which use none of these
engines: everything that exists reads idle. Which engines exist follows the chips: A100
and H100 have no NVENC; NVJPG arrived with A100; OFA with Turing.
"""

from __future__ import annotations

from typing import Any

import pynvml

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.nvml.abi import (
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    SUCCESS,
    as_int,
    deref,
    set_out,
)
from nvwatch.sim.nvml.core import NvmlCore, device_call

_SAMPLING_PERIOD_US = 167000  # ~ the driver's engine sampling period (as for the decoder)
_ENCODERS = (pynvml.NVML_ENCODER_QUERY_H264, pynvml.NVML_ENCODER_QUERY_HEVC)  # no AV1


def has_nvenc(gpu: SimulatedGpu) -> bool:
    return gpu.model.architecture not in ("ampere", "hopper")  # GA100, GH100: no NVENC


def has_nvjpg(gpu: SimulatedGpu) -> bool:
    return gpu.model.architecture in ("ampere", "hopper")


def has_ofa(gpu: SimulatedGpu) -> bool:
    return gpu.model.architecture in ("turing", "ampere", "hopper")


def _no_sessions(count: Any) -> int:
    set_out(count, 0)
    return SUCCESS


class MediaQueries(NvmlCore):
    @device_call
    def nvmlDeviceGetEncoderCapacity(self, gpu: SimulatedGpu, codec: Any, capacity: Any) -> int:
        which = as_int(codec)
        if not has_nvenc(gpu):
            return ERROR_NOT_SUPPORTED
        if which == pynvml.NVML_ENCODER_QUERY_AV1:
            return ERROR_NOT_SUPPORTED  # AV1 encoding arrived with Ada
        if which not in _ENCODERS:
            return ERROR_INVALID_ARGUMENT
        set_out(capacity, 100)  # percent left: nothing is encoding
        return SUCCESS

    @device_call
    def nvmlDeviceGetEncoderStats(
        self, gpu: SimulatedGpu, sessions: Any, fps: Any, latency_us: Any
    ) -> int:
        if not has_nvenc(gpu):
            return ERROR_NOT_SUPPORTED
        for out in (sessions, fps, latency_us):
            set_out(out, 0)
        return SUCCESS

    @device_call
    def nvmlDeviceGetEncoderSessions(self, gpu: SimulatedGpu, count: Any, infos: Any) -> int:
        return _no_sessions(count) if has_nvenc(gpu) else ERROR_NOT_SUPPORTED

    @device_call
    def nvmlDeviceGetFBCStats(self, gpu: SimulatedGpu, stats: Any) -> int:
        fbc = deref(stats)
        fbc.sessionsCount = fbc.averageFPS = fbc.averageLatency = 0
        return SUCCESS

    @device_call
    def nvmlDeviceGetFBCSessions(self, gpu: SimulatedGpu, count: Any, infos: Any) -> int:
        return _no_sessions(count)

    @device_call
    def nvmlDeviceGetJpgUtilization(self, gpu: SimulatedGpu, util: Any, period: Any) -> int:
        if not has_nvjpg(gpu):
            return ERROR_NOT_SUPPORTED
        set_out(util, 0)
        set_out(period, _SAMPLING_PERIOD_US)
        return SUCCESS

    @device_call
    def nvmlDeviceGetOfaUtilization(self, gpu: SimulatedGpu, util: Any, period: Any) -> int:
        if not has_ofa(gpu):
            return ERROR_NOT_SUPPORTED
        set_out(util, 0)
        set_out(period, _SAMPLING_PERIOD_US)
        return SUCCESS
