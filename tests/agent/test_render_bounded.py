"""The slot table is bounded: a series that disappears leaves it with the last exposition
that showed it, however many processes come and go or ports flap."""

from __future__ import annotations

from types import MappingProxyType

from nvwatch.agent.catalogue import BY_NAME
from nvwatch.agent.exposition.render import Exposition, build_exposition, prepare
from nvwatch.agent.exposition.slots import table_of
from nvwatch.agent.poller import Snapshot, SourceStatus
from nvwatch.agent.sources.infiniband import InfinibandDevice, InfinibandPort, InfinibandSample
from nvwatch.agent.sources.nvml.samples import GpuInfo, GpuSample, NvmlSample, ProcessSample

# a uuid and device names no other test uses: the table is shared by the whole process
UUID = "GPU-bounded-slot-table-test"
RATE = 50 * 10**9
PROCESSES = table_of(BY_NAME["nvwatch_gpu_process_memory_bytes"])
UP = table_of(BY_NAME["nvwatch_gpu_up"])
PORT_STATE = table_of(BY_NAME["nvwatch_ib_port_state"])


def _gpu(pids: range, up: bool = True) -> GpuSample:
    processes = tuple(ProcessSample(pid=p, memory_bytes=2**30, name="python3") for p in pids)
    info = GpuInfo(name="NVIDIA H100 80GB HBM3", uuid=UUID, pci_bus_id="00000000:18:00.0")
    return GpuSample(index=0, uuid=UUID, info=info, up=up, power_watts=300.0, processes=processes)


def _hca(name: str, ports: int) -> InfinibandDevice:
    return InfinibandDevice(
        name=name,
        board_id="MT_0000000838",
        firmware_version="28.39.1002",
        hca_type="MT4129",
        node_guid="a088:c203:0012:3456",
        pci_path=None,
        ports=tuple(
            InfinibandPort(name, str(p), 4, "ACTIVE", 5, "LinkUp", RATE, "400 Gb/sec", "IB")
            for p in range(1, ports + 1)
        ),
    )


def _publish(samples: dict[str, object]) -> Exposition:
    statuses = {
        name: SourceStatus(name, True, 0.01, 0, None, prepare(name, sample))
        for name, sample in samples.items()
    }
    return build_exposition(Snapshot(MappingProxyType(statuses), 1, 1.7e9, 0.0))


def _pids() -> set[str]:
    return {key[2] for key in PROCESSES.refs if key[1] == UUID}


def test_process_churn_does_not_grow_the_table() -> None:
    exposition = None
    for poll in range(300):
        # three processes a poll, each living two polls: pids never come back
        exposition = _publish({"nvml": NvmlSample(gpus=(_gpu(range(poll, poll + 3)),))})
        assert _pids() == {str(p) for p in range(poll, poll + 3)}
    assert exposition is not None
    del exposition
    assert _pids() == set(), "no exposition shows them any more"


def test_the_previous_exposition_keeps_its_series_until_it_is_dropped() -> None:
    # the agent swaps one exposition for the next: for a moment both are alive
    before = _publish({"nvml": NvmlSample(gpus=(_gpu(range(7000, 7002)),))})
    after = _publish({"nvml": NvmlSample(gpus=(_gpu(range(7001, 7003)),))})
    assert _pids() == {"7000", "7001", "7002"}
    del before
    assert _pids() == {"7001", "7002"}
    assert b'pid="7001"' in after.text


def test_a_gpu_off_the_bus_and_back() -> None:
    up = _publish({"nvml": NvmlSample(gpus=(_gpu(range(1, 3)),))})
    lost = _publish({"nvml": NvmlSample(gpus=(_gpu(range(1, 3), up=False),))})
    del up
    assert _pids() == set(), "a lost GPU has no process series"
    assert b"nvwatch_gpu_power_watts" not in lost.text
    back = _publish({"nvml": NvmlSample(gpus=(_gpu(range(1, 3)),))})
    del lost
    assert _pids() == {"1", "2"} and b"nvwatch_gpu_power_watts" in back.text
    assert {key for key in UP.refs if key[1] == UUID} == {("0", UUID)}


def test_port_flaps_and_renamed_hcas_do_not_grow_the_table() -> None:
    exposition = None
    for poll in range(200):
        # the second port comes and goes; the second HCA comes back under a new name
        # (mlx5_ib reloaded), as a flapping fabric and a driver reload would show them
        devices = (_hca("mlx5_bounded_a", 1 + poll % 2), _hca(f"mlx5_bounded_{poll}", 1))
        exposition = _publish({"infiniband": InfinibandSample(devices=devices)})
        ours = {key for key in PORT_STATE.refs if key[0].startswith("mlx5_bounded")}
        expected = {("mlx5_bounded_a", str(p)) for p in range(1, 2 + poll % 2)}
        assert ours == expected | {(f"mlx5_bounded_{poll}", "1")}
    del exposition
    assert not {key for key in PORT_STATE.refs if key[0].startswith("mlx5_bounded")}
