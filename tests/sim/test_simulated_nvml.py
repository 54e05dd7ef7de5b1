"""The simulated C library through the REAL pynvml bindings: API surface, units, support."""

from __future__ import annotations

import contextvars
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from nvwatch.sim.clock import ManualClock
from nvwatch.sim.nvml import (
    DispatchingNvml,
    FaultInjectingNvml,
    SimulatedNvml,
    bind,
    exec_environment,
    install,
    uninstall,
)
from nvwatch.sim.profiles import PROFILES, gpu_pci_bus_id, nvswitch_pci_bus_id
from tests.sim.conftest import start


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_identifies_its_gpus(name: str) -> None:
    profile = PROFILES[name]
    start(name)
    assert pynvml.nvmlDeviceGetCount() == profile.gpu_count
    assert pynvml.nvmlSystemGetDriverVersion() == profile.driver_version
    assert pynvml.nvmlSystemGetCudaDriverVersion() == profile.cuda_driver_version
    uuids = set()
    for index, model in enumerate(profile.gpus):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        assert pynvml.nvmlDeviceGetIndex(handle) == index
        assert pynvml.nvmlDeviceGetName(handle) == model.name
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        assert uuid.startswith("GPU-")
        uuids.add(uuid)
        pci = pynvml.nvmlDeviceGetPciInfo(handle)
        assert pci.busId == gpu_pci_bus_id(profile, index)
        assert pci.busIdLegacy == gpu_pci_bus_id(profile, index)[4:]
        # units: bytes and milliwatts, as pynvml returns them from the real library
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert memory.total == model.memory_bytes
        assert memory.free + memory.used + memory.reserved == memory.total
        v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
        assert v1.used == memory.used + memory.reserved
        assert pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) == model.tdp_watts * 1000
        assert pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle) == [
            model.min_power_limit_watts * 1000,
            model.max_power_limit_watts * 1000,
        ]
        assert pynvml.nvmlDeviceGetCudaComputeCapability(handle) == model.cuda_compute_capability
        assert pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM) == (
            model.max_sm_clock_mhz
        )
        assert pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle) == model.pcie_generation
        # handles found by UUID and by bus id are the same GPU
        by_uuid = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        assert pynvml.nvmlDeviceGetIndex(by_uuid) == index
        by_bus = pynvml.nvmlDeviceGetHandleByPciBusId(pci.busIdLegacy)
        assert pynvml.nvmlDeviceGetIndex(by_bus) == index
    assert len(uuids) == profile.gpu_count


def _raises_not_supported(call: object, *args: object) -> bool:
    try:
        call(*args)  # type: ignore[operator]
    except pynvml.NVMLError_NotSupported:
        return True
    return False


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_not_supported_follows_the_model_flags(name: str) -> None:
    profile = PROFILES[name]
    start(name)
    for index, model in enumerate(profile.gpus):
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        assert _raises_not_supported(pynvml.nvmlDeviceGetEccMode, h) is not model.ecc
        assert (
            _raises_not_supported(
                pynvml.nvmlDeviceGetTotalEccErrors,
                h,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            )
            is not model.ecc
        )
        assert _raises_not_supported(pynvml.nvmlDeviceGetFanSpeed, h) is not model.fan
        assert _raises_not_supported(pynvml.nvmlDeviceGetTotalEnergyConsumption, h) is not (
            model.energy_counter
        )
        assert _raises_not_supported(pynvml.nvmlDeviceGetRemappedRows, h) is not (
            model.row_remapping
        )
        assert _raises_not_supported(
            pynvml.nvmlDeviceGetRetiredPages,
            h,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        ) is not (model.ecc and not model.row_remapping)
        assert (
            _raises_not_supported(
                pynvml.nvmlDeviceGetViolationStatus, h, pynvml.NVML_PERF_POLICY_POWER
            )
            is not model.violation_counters
        )
        assert _raises_not_supported(
            pynvml.nvmlDeviceGetTemperatureThreshold, h, pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX
        ) is (model.temp_gpu_max_c is None)
        assert _raises_not_supported(pynvml.nvmlDeviceGetMigMode, h) is not model.mig
        has_links = bool(profile.nvlinks[index]) and model.nvlink_version > 0
        assert _raises_not_supported(pynvml.nvmlDeviceGetNvLinkState, h, 0) is not has_links
        (mem_temp,) = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
        expected = pynvml.NVML_SUCCESS if model.memory_temperature else 3
        assert mem_temp.nvmlReturn == expected
        support = pynvml.nvmlGpmQueryDeviceSupport(h)
        assert support.isSupportedDevice == int(model.gpm)


@pytest.mark.parametrize(("name", "links"), [("dgx-h100", 18), ("dgx1-v100", 6), ("dgx1-p100", 4)])
def test_nvlink_link_counts(name: str, links: int) -> None:
    start(name)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert all(pynvml.nvmlDeviceGetNvLinkState(h, link) == 1 for link in range(links))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetNvLinkState(h, links)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetNvLinkState(h, pynvml.NVML_NVLINK_MAX_LINKS)
    (count,) = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
    assert (count.nvmlReturn, count.value.uiVal) == (pynvml.NVML_SUCCESS, links)


def _peers(gpu: int, profile: str) -> Counter[int]:
    """GPU index at the far end of each of `gpu`'s links, via remote PCI info."""
    by_bus = {gpu_pci_bus_id(PROFILES[profile], i): i for i in range(8)}
    h = pynvml.nvmlDeviceGetHandleByIndex(gpu)
    peers: Counter[int] = Counter()
    for link in range(len(PROFILES[profile].nvlinks[gpu])):
        assert pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link) == (
            pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
        )
        peers[by_bus[pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId]] += 1
    return peers


def test_dgx1_cube_mesh_peers_via_remote_pci_info() -> None:
    start("dgx1-v100")
    # nvidia-smi topo -m on a DGX-1V: GPU0 NV1 to 1 and 2, NV2 to 3 and 4
    assert _peers(0, "dgx1-v100") == Counter({1: 1, 2: 1, 3: 2, 4: 2})
    assert _peers(5, "dgx1-v100") == Counter({1: 2, 4: 1, 6: 2, 7: 1})
    uninstall()
    start("dgx1-p100")
    for gpu in range(8):
        peers = _peers(gpu, "dgx1-p100")
        assert sum(peers.values()) == 4 and set(peers.values()) == {1}
        assert gpu ^ 4 in peers or (gpu + 4) % 8 in peers  # the i <-> i+4 cube edge


def test_nvswitch_and_bridge_remote_ends() -> None:
    start("dgx-h100")
    h = pynvml.nvmlDeviceGetHandleByIndex(3)
    assert (
        pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, 17) == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    )
    assert pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, 0).busId == nvswitch_pci_bus_id(0)
    assert pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, 17).busId == nvswitch_pci_bus_id(3)
    assert pynvml.nvmlDeviceGetNvLinkVersion(h, 0) == pynvml.NVML_NVLINK_VERSION_4_0
    uninstall()
    start("geforce-workstation")
    bridged = pynvml.nvmlDeviceGetHandleByIndex(2)
    assert _raises_not_supported(pynvml.nvmlDeviceGetNvLinkState, bridged, 2)
    remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(bridged, 1).busId
    assert remote == gpu_pci_bus_id(PROFILES["geforce-workstation"], 3)
    assert pynvml.nvmlDeviceGetNvLinkCapability(bridged, 0, pynvml.NVML_NVLINK_CAP_SLI_BRIDGE) == 1


def test_field_values_have_per_entry_return_codes() -> None:
    lib, clock = start("dgx-h100")
    clock.advance(20.0)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    values = pynvml.nvmlDeviceGetFieldValues(
        h,
        [
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 17),
            (pynvml.NVML_FI_DEV_NVLINK_GET_SPEED, 0),
            (pynvml.NVML_FI_DEV_NVLINK_GET_STATE, 40),
            pynvml.NVML_FI_DEV_MEMORY_TEMP,
            pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
            pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
            pynvml.NVML_FI_DEV_RETIRED_DBE,
            9999,
        ],
    )
    codes = [v.nvmlReturn for v in values]
    assert codes == [0, 0, 0, 2, 0, 0, 0, 0, 3, 3]
    gpu = lib.gpus[0]
    assert values[0].value.ullVal == int(gpu.links[0].tx_bytes) // 1024 > 0
    assert values[1].value.ullVal == int(gpu.links[17].rx_bytes) // 1024
    assert values[2].value.uiVal == 25_000  # MB/s per link per direction
    assert values[4].value.uiVal == round(gpu.memory_temperature_c)
    assert values[5].value.ullVal == pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    assert values[6].value.ullVal > 0
    assert values[7].value.ullVal == 0
    assert values[0].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    assert values[0].timestamp == int((20.0 + 1_700_000_000.0) * 1e6)


def test_uninitialized_invalid_handle_and_missing_function() -> None:
    lib = SimulatedNvml("dgx-a100", clock=ManualClock())
    install(lib)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    pynvml.nvmlInit()
    other = SimulatedNvml("dgx-a100", clock=ManualClock())
    other.nvmlInit_v2()
    foreign = pynvml.c_nvmlDevice_t()
    assert other.nvmlDeviceGetHandleByIndex_v2(0, pynvml.byref(foreign)) == 0
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetName(foreign)  # a handle of another library
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(8)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlUnitGetCount()  # S-class units: not simulated
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "GPU is lost"
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_processes_hold_most_of_the_used_memory() -> None:
    start("dgx-h100")
    h = pynvml.nvmlDeviceGetHandleByIndex(2)
    used = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used
    (proc,) = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    assert 0.9 * used < proc.usedGpuMemory < used
    assert proc.pid > 0
    assert pynvml.nvmlDeviceGetGraphicsRunningProcesses(h) == []
    uninstall()
    start("dgx-h100", scenario="idle")
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(0)) == []


def test_xid_event_then_gpu_is_lost() -> None:
    _, clock = start("dgx-a100", scenario="gpu-lost")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    event_set = pynvml.nvmlEventSetCreate()
    for i in range(8):
        pynvml.nvmlDeviceRegisterEvents(
            pynvml.nvmlDeviceGetHandleByIndex(i), pynvml.nvmlEventTypeXidCriticalError, event_set
        )
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 20)
    clock.advance(31.0)
    data = pynvml.nvmlEventSetWait_v2(event_set, 20)
    assert (data.eventType, data.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 79)
    assert pynvml.nvmlDeviceGetIndex(data.device) == 0
    clock.advance(5.0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetName(handle)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetCount() == 8
    assert pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(1)) > 0
    pynvml.nvmlEventSetFree(event_set)


def test_event_wait_wakes_when_the_clock_moves_during_the_wait() -> None:
    _, clock = start("dgx-h100", scenario="xid-storm")
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), 0x8, event_set)
    timer = threading.Timer(0.05, clock.advance, args=(31.0,))
    timer.start()
    data = pynvml.nvmlEventSetWait_v2(event_set, 2000)  # returns long before the timeout
    timer.join()
    assert data.eventData == 13


def test_dispatching_routes_each_thread_to_its_node() -> None:
    install(DispatchingNvml())
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlInit()  # nothing bound in this context
    nodes = {
        "a": SimulatedNvml("dgx-h100", seed=1, clock=ManualClock()),
        "b": SimulatedNvml("inference-t4", seed=2, clock=ManualClock()),
    }
    seen: dict[str, tuple[int, str, str]] = {}

    def agent(node: str) -> None:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        seen[node] = (
            pynvml.nvmlDeviceGetCount(),
            pynvml.nvmlDeviceGetName(h),
            pynvml.nvmlDeviceGetUUID(h),
        )

    threads = []
    for node, lib in nodes.items():
        context = contextvars.copy_context()
        context.run(bind, lib)
        threads.append(threading.Thread(target=context.run, args=(agent, node)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen["a"][:2] == (8, "NVIDIA H100 80GB HBM3")
    assert seen["b"][:2] == (4, "Tesla T4")
    assert seen["a"][2] == nodes["a"].gpus[0].uuid != nodes["b"].gpus[0].uuid


def test_gpm_metrics_on_hopper_only() -> None:
    _, clock = start("dgx-h100")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(h, first)
    clock.advance(10.0)
    pynvml.nvmlGpmSampleGet(h, second)
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.sample1, request.sample2 = first, second
    wanted = [2, 3, 5, 10, 60, 400]
    request.numMetrics = len(wanted)
    for i, metric_id in enumerate(wanted):
        request.metrics[i].metricId = metric_id
    pynvml.nvmlGpmMetricsGet(request)
    results = {m.metricId: m for m in request.metrics[: len(wanted)]}
    assert 50.0 < results[2].value <= 100.0  # SM util, percent
    assert 0.0 < results[3].value < results[2].value  # occupancy below activity
    assert 0.0 < results[5].value < 100.0
    assert 0.0 < results[10].value < 100.0
    assert results[60].value > 1000.0  # NVLink MiB/s during all-reduce bursts
    assert results[400].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    pynvml.nvmlGpmSampleFree(first)
    pynvml.nvmlGpmSampleFree(second)
    uninstall()
    start("dgx-a100")
    sample = pynvml.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(pynvml.nvmlDeviceGetHandleByIndex(0), sample)


def test_gpustat_style_snippet_runs_unmodified() -> None:
    """The calls gpustat makes per GPU, with its error handling, on every profile."""
    for name in ("dgx-h100", "geforce-workstation"):
        install(SimulatedNvml(name, clock=ManualClock()))
        pynvml.nvmlInitWithFlags(0)
        rows = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                fan = pynvml.nvmlDeviceGetFanSpeed(handle)
            except pynvml.NVMLError:
                fan = None
            processes = pynvml.nvmlDeviceGetComputeRunningProcesses_v3(
                handle
            ) + pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)
            rows.append(
                {
                    "index": pynvml.nvmlDeviceGetIndex(handle),
                    "name": pynvml.nvmlDeviceGetName(handle),
                    "uuid": pynvml.nvmlDeviceGetUUID(handle),
                    "memory.used": memory.used // 2**20,
                    "temperature.gpu": pynvml.nvmlDeviceGetTemperature(
                        handle, pynvml.NVML_TEMPERATURE_GPU
                    ),
                    "fan.speed": fan,
                    "utilization.gpu": pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                    "power.draw": pynvml.nvmlDeviceGetPowerUsage(handle) // 1000,
                    "enforced.power.limit": pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) // 1000,
                    "processes": [(p.pid, p.usedGpuMemory) for p in processes],
                }
            )
        pynvml.nvmlShutdown()
        assert [r["index"] for r in rows] == list(range(len(rows)))
        assert all(r["memory.used"] > 1000 and len(r["processes"]) == 1 for r in rows)
        assert all(20 <= r["temperature.gpu"] < 90 for r in rows)
        assert all((r["fan.speed"] is None) == (name == "dgx-h100") for r in rows)
        uninstall()


def test_fault_injection_fails_a_fraction_of_calls() -> None:
    inner = SimulatedNvml("dgx-h100", clock=ManualClock())
    flaky = FaultInjectingNvml(inner, rate=0.5, seed=7)
    install(flaky)
    pynvml.nvmlInit()  # spared: the library must load
    failures = 0
    for _ in range(200):
        try:
            pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as error:
            assert error.value in flaky.codes
            failures += 1
    assert failures == flaky.injected
    assert 60 < failures < 140
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlUnitGetCount()  # S-class units: not simulated


def test_exec_environment_gives_child_processes_simulated_gpus() -> None:
    env = exec_environment("dgx-h100", None)
    assert env["NVWATCH_SIMULATE"] == "dgx-h100"
    code = (
        "import pynvml; pynvml.nvmlInit(); "
        "print(pynvml.nvmlDeviceGetCount(), "
        "pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "8 NVIDIA H100 80GB HBM3"
    with pytest.raises(ValueError, match="unknown scenario"):
        exec_environment("dgx-h100", "meltdown")


def _call_or_error(fn: Callable[..., Any], *args: object) -> Any:
    """The call's answer, or the NVMLError class it raised (to compare support)."""
    try:
        return fn(*args)
    except pynvml.NVMLError as err:
        return type(err)


def _field_or_error(entry: pynvml.c_nvmlFieldValue_t) -> object:
    if entry.nvmlReturn != pynvml.NVML_SUCCESS:
        return type(pynvml.NVMLError(entry.nvmlReturn))
    member = "uiVal" if entry.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT else "ullVal"
    return int(getattr(entry.value, member))


def _by_call(handle: object, links: int) -> list[tuple[tuple[int, int], object]]:
    """(field id, scope) -> what the call the agent no longer makes answers for it."""
    h = pynvml
    sbe, dbe = h.NVML_MEMORY_ERROR_TYPE_CORRECTED, h.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    vol, agg = h.NVML_VOLATILE_ECC, h.NVML_AGGREGATE_ECC
    remapped = _call_or_error(h.nvmlDeviceGetRemappedRows, handle)

    def pages(cause: int) -> object:
        answer = _call_or_error(h.nvmlDeviceGetRetiredPages, handle, cause)
        return len(answer) if isinstance(answer, list) else answer

    def violation(policy: int) -> object:
        answer = _call_or_error(h.nvmlDeviceGetViolationStatus, handle, policy)
        return answer if isinstance(answer, type) else answer.violationTime

    def ecc(kind: int, counter: int) -> object:
        return _call_or_error(h.nvmlDeviceGetTotalEccErrors, handle, kind, counter)

    def link_errors(link: int, counter: int) -> object:
        return _call_or_error(h.nvmlDeviceGetNvLinkErrorCounter, handle, link, counter)

    return [
        ((h.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 0), ecc(sbe, vol)),
        ((h.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, 0), ecc(dbe, vol)),
        ((h.NVML_FI_DEV_ECC_SBE_AGG_TOTAL, 0), ecc(sbe, agg)),
        ((h.NVML_FI_DEV_ECC_DBE_AGG_TOTAL, 0), ecc(dbe, agg)),
        (
            (h.NVML_FI_DEV_RETIRED_SBE, 0),
            pages(h.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        ),
        ((h.NVML_FI_DEV_RETIRED_DBE, 0), pages(h.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)),
        (
            (h.NVML_FI_DEV_RETIRED_PENDING, 0),
            _call_or_error(h.nvmlDeviceGetRetiredPagesPendingStatus, handle),
        ),
        *[
            (
                (h.NVML_FI_DEV_REMAPPED_COR + i, 0),
                remapped[i] if isinstance(remapped, tuple) else remapped,
            )
            for i in range(4)
        ],
        (
            (h.NVML_FI_DEV_PCIE_REPLAY_COUNTER, 0),
            _call_or_error(h.nvmlDeviceGetPcieReplayCounter, handle),
        ),
        *[((h.NVML_FI_DEV_PERF_POLICY_POWER + p, 0), violation(p)) for p in range(6)],
        *[
            (
                (h.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, n),
                link_errors(n, h.NVML_NVLINK_ERROR_DL_REPLAY),
            )
            for n in range(links)
        ],
        *[
            (
                (h.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, n),
                link_errors(n, h.NVML_NVLINK_ERROR_DL_RECOVERY),
            )
            for n in range(links)
        ],
    ]


@pytest.mark.parametrize(
    ("profile", "scenario"),
    [("dgx1-v100", "ecc-dbe"), ("dgx-a100", "ecc-dbe"), ("dgx-h100", "nvlink-degraded")],
)
def test_fields_the_agent_batches_answer_like_their_calls(profile: str, scenario: str) -> None:
    """Each field id the agent reads instead of a call: same value, same support."""
    lib, clock = start(profile, scenario=scenario)
    clock.advance(600.0)  # past every fault's onset, so counters have moved
    moved = 0
    for index, gpu in enumerate(lib.gpus):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        expected = _by_call(handle, len(gpu.links))
        answers = pynvml.nvmlDeviceGetFieldValues(handle, [ids for ids, _ in expected])
        got = [_field_or_error(entry) for entry in answers]
        assert got == [value for _, value in expected], f"GPU {index}"
        moved += sum(1 for value in got if isinstance(value, int) and value > 0)
    assert moved  # some counter moved, so equal values are not all zeros
