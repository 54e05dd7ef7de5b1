"""NvmlSample -> nvwatch_gpu_* and nvwatch_nvlink_* families (names from the catalogue).

A lost GPU keeps its identity (`nvwatch_gpu_info`) and `nvwatch_gpu_up 0`, nothing else:
no fake zeros that would make rate() see resets. Every per-GPU series carries `gpu` (the
NVML index) and `uuid`.

With `sample.nvlink_detail == "gpu"` the NVLink families get one series per GPU with
link="all" (see NvmlSource): bytes and errors summed over links, nvwatch_nvlink_up the
number of links up, the speed summed over links that are up, no remote_info. A sum is
omitted when any link lacks the value this poll, so aggregate counters never dip.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.exposition.families import FamilySet
from agent.sources.nvml.samples import (
    NVLINK_ERROR_TYPES,
    GpuSample,
    NvLinkSample,
    NvmlSample,
)


def render(sample: NvmlSample, out: FamilySet) -> None:
    for gpu in sample.gpus:
        _render_gpu(gpu, out)
        if gpu.up:
            if sample.nvlink_detail == "gpu":
                _render_nvlink_per_gpu(gpu, out)
            else:
                _render_nvlink_per_link(gpu, out)


def _render_gpu(gpu: GpuSample, out: FamilySet) -> None:
    ids = {"gpu": str(gpu.index), "uuid": gpu.uuid}
    info = gpu.info
    out.add(
        "nvwatch_gpu_info",
        {
            **ids,
            "name": info.name,
            "pci_bus_id": info.pci_bus_id,
            "serial": info.serial,
            "driver_version": info.driver_version,
            "cuda_version": info.cuda_version,
            "vbios": info.vbios,
        },
        1,
    )
    out.add("nvwatch_gpu_up", ids, 1 if gpu.up else 0)
    if not gpu.up:
        return

    out.add("nvwatch_gpu_utilization_ratio", ids, gpu.utilization_ratio)
    out.add("nvwatch_gpu_memory_utilization_ratio", ids, gpu.memory_utilization_ratio)
    out.add("nvwatch_gpu_memory_total_bytes", ids, gpu.memory_total_bytes)
    out.add("nvwatch_gpu_memory_used_bytes", ids, gpu.memory_used_bytes)
    out.add("nvwatch_gpu_memory_free_bytes", ids, gpu.memory_free_bytes)
    out.add("nvwatch_gpu_power_watts", ids, gpu.power_watts)
    out.add("nvwatch_gpu_power_limit_watts", ids, gpu.power_limit_watts)
    out.add("nvwatch_gpu_power_tdp_watts", ids, gpu.power_tdp_watts)
    out.add("nvwatch_gpu_energy_joules_total", ids, gpu.energy_joules)

    temperature = "nvwatch_gpu_temperature_celsius"
    out.add(temperature, {**ids, "sensor": "gpu"}, gpu.temperature_gpu_celsius)
    out.add(temperature, {**ids, "sensor": "memory"}, gpu.temperature_memory_celsius)
    threshold = "nvwatch_gpu_temperature_threshold_celsius"
    out.add(threshold, {**ids, "threshold": "slowdown"}, gpu.threshold_slowdown_celsius)
    out.add(threshold, {**ids, "threshold": "shutdown"}, gpu.threshold_shutdown_celsius)
    out.add(threshold, {**ids, "threshold": "gpu_max"}, gpu.threshold_gpu_max_celsius)
    out.add(threshold, {**ids, "threshold": "memory_max"}, gpu.threshold_memory_max_celsius)

    for clock, current, maximum in (
        ("sm", gpu.clock_sm_hertz, gpu.clock_sm_max_hertz),
        ("memory", gpu.clock_memory_hertz, gpu.clock_memory_max_hertz),
        ("graphics", gpu.clock_graphics_hertz, gpu.clock_graphics_max_hertz),
    ):
        out.add("nvwatch_gpu_clock_hertz", {**ids, "clock": clock}, current)
        out.add("nvwatch_gpu_clock_max_hertz", {**ids, "clock": clock}, maximum)

    for reason, active in gpu.clock_events.items():
        out.add("nvwatch_gpu_clock_event_active", {**ids, "reason": reason}, 1 if active else 0)
    for reason, seconds in gpu.throttle_seconds.items():
        out.add("nvwatch_gpu_throttle_seconds_total", {**ids, "reason": reason}, seconds)

    out.add("nvwatch_gpu_fan_speed_ratio", ids, gpu.fan_speed_ratio)
    pcie = "nvwatch_gpu_pcie_throughput_bytes_per_second"
    out.add(pcie, {**ids, "direction": "tx"}, gpu.pcie_tx_bytes_per_second)
    out.add(pcie, {**ids, "direction": "rx"}, gpu.pcie_rx_bytes_per_second)
    out.add("nvwatch_gpu_pcie_replays_total", ids, gpu.pcie_replays)
    generation = "nvwatch_gpu_pcie_link_generation"
    out.add(generation, {**ids, "kind": "current"}, gpu.pcie_link_generation_current)
    out.add(generation, {**ids, "kind": "max"}, gpu.pcie_link_generation_max)
    out.add("nvwatch_gpu_pcie_link_width", {**ids, "kind": "current"}, gpu.pcie_link_width_current)
    out.add("nvwatch_gpu_pcie_link_width", {**ids, "kind": "max"}, gpu.pcie_link_width_max)

    ecc = "nvwatch_gpu_ecc_errors_total"
    out.add(ecc, {**ids, "type": "corrected", "scope": "volatile"}, gpu.ecc_corrected_volatile)
    out.add(ecc, {**ids, "type": "corrected", "scope": "aggregate"}, gpu.ecc_corrected_aggregate)
    out.add(ecc, {**ids, "type": "uncorrected", "scope": "volatile"}, gpu.ecc_uncorrected_volatile)
    out.add(
        ecc, {**ids, "type": "uncorrected", "scope": "aggregate"}, gpu.ecc_uncorrected_aggregate
    )
    out.add("nvwatch_gpu_retired_pages", {**ids, "cause": "sbe"}, gpu.retired_pages_sbe)
    out.add("nvwatch_gpu_retired_pages", {**ids, "cause": "dbe"}, gpu.retired_pages_dbe)
    out.add("nvwatch_gpu_retired_pages_pending", ids, gpu.retired_pages_pending)
    rows = "nvwatch_gpu_remapped_rows"
    out.add(rows, {**ids, "kind": "correctable"}, gpu.remapped_rows_correctable)
    out.add(rows, {**ids, "kind": "uncorrectable"}, gpu.remapped_rows_uncorrectable)
    out.add(rows, {**ids, "kind": "pending"}, gpu.remapped_rows_pending)
    out.add(rows, {**ids, "kind": "failure"}, gpu.remapped_rows_failure)

    for xid, count in sorted(gpu.xid_counts.items()):
        out.add("nvwatch_gpu_xid_errors_total", {**ids, "xid": str(xid)}, count)

    out.add("nvwatch_gpu_sm_active_ratio", ids, gpu.sm_active_ratio)
    out.add("nvwatch_gpu_sm_occupancy_ratio", ids, gpu.sm_occupancy_ratio)
    out.add("nvwatch_gpu_tensor_active_ratio", ids, gpu.tensor_active_ratio)
    out.add("nvwatch_gpu_dram_active_ratio", ids, gpu.dram_active_ratio)

    for proc in gpu.processes:
        out.add(
            "nvwatch_gpu_process_memory_bytes",
            {**ids, "pid": str(proc.pid), "process": proc.name, "user": proc.user, "job": ""},
            proc.memory_bytes,
        )


def _render_nvlink_per_link(gpu: GpuSample, out: FamilySet) -> None:
    for link in gpu.nvlinks:
        labels = {"gpu": str(gpu.index), "uuid": gpu.uuid, "link": str(link.link)}
        out.add("nvwatch_nvlink_up", labels, None if link.up is None else int(link.up))
        out.add("nvwatch_nvlink_transmit_bytes_total", labels, link.transmit_bytes)
        out.add("nvwatch_nvlink_receive_bytes_total", labels, link.receive_bytes)
        for kind, _ in NVLINK_ERROR_TYPES:
            out.add("nvwatch_nvlink_errors_total", {**labels, "type": kind}, link.errors.get(kind))
        out.add("nvwatch_nvlink_speed_bytes_per_second", labels, link.speed_bytes_per_second)
        if link.remote_type is not None:
            out.add(
                "nvwatch_nvlink_remote_info",
                {
                    **labels,
                    "remote_type": link.remote_type,
                    "remote_gpu": "" if link.remote_gpu is None else str(link.remote_gpu),
                    "remote_pci_bus_id": link.remote_pci_bus_id or "",
                },
                1,
            )


def _render_nvlink_per_gpu(gpu: GpuSample, out: FamilySet) -> None:
    links = gpu.nvlinks
    if not links:
        return
    labels = {"gpu": str(gpu.index), "uuid": gpu.uuid, "link": "all"}
    states = [link.up for link in links]
    up_count = None if any(s is None for s in states) else sum(1 for s in states if s)
    out.add("nvwatch_nvlink_up", labels, up_count)
    out.add("nvwatch_nvlink_transmit_bytes_total", labels, _sum([x.transmit_bytes for x in links]))
    out.add("nvwatch_nvlink_receive_bytes_total", labels, _sum([x.receive_bytes for x in links]))
    for kind, _ in NVLINK_ERROR_TYPES:
        out.add(
            "nvwatch_nvlink_errors_total",
            {**labels, "type": kind},
            _sum([x.errors.get(kind) for x in links]),
        )
    out.add("nvwatch_nvlink_speed_bytes_per_second", labels, _speed_of_up_links(links))


def _sum(values: Sequence[int | None]) -> int | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _speed_of_up_links(links: Sequence[NvLinkSample]) -> float | None:
    if any(x.up is None for x in links):
        return None
    speeds = [x.speed_bytes_per_second for x in links if x.up]
    if any(s is None for s in speeds):
        return None
    return sum(s for s in speeds if s is not None)
