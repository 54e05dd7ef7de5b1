"""The simulated fabric: a live sysfs tree per profile, scenarios, workload-driven traffic."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from nvwatch.agent.sources import SourceAbsent
from nvwatch.agent.sources.infiniband import InfinibandPort, InfinibandSource
from nvwatch.agent.sources.infiniband_parse import parse_counter
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fabric.fabric import (
    CONGESTION_STALL,
    IB_SCENARIOS,
    XMIT_WAIT_TICKS_PER_SECOND,
    SimulatedFabric,
    degraded_rate,
    is_ib_scenario,
)
from nvwatch.sim.profiles import get_profile
from nvwatch.sim.workload import Workload

EDR_BPS = 12_500_000_000


def _fabric(
    tmp_path: Path, profile: str = "dgx1-v100", **kwargs: object
) -> tuple[SimulatedFabric, ManualClock, InfinibandSource]:
    clock = ManualClock()
    fabric = SimulatedFabric(profile, tmp_path, clock=clock, **kwargs)  # type: ignore[arg-type]
    fabric.tick()
    return fabric, clock, InfinibandSource(tmp_path, gpu_bus_ids=fabric.gpu_bus_ids)


def _ports(source: InfinibandSource) -> dict[str, InfinibandPort]:
    return {d.name: d.ports[0] for d in source.collect().devices}


def _at(fabric: SimulatedFabric, clock: ManualClock, t: float) -> None:
    clock.advance(t - clock())
    fabric.tick()


@pytest.mark.parametrize(
    ("profile", "count", "rate_bps", "link_layer"),
    [
        ("dgx1-p100", 4, EDR_BPS, "InfiniBand"),
        ("dgx1-v100", 4, EDR_BPS, "InfiniBand"),
        ("dgx2", 8, EDR_BPS, "InfiniBand"),
        ("dgx-a100", 8, 25_000_000_000, "InfiniBand"),
        ("dgx-h100", 8, 50_000_000_000, "InfiniBand"),
        ("inference-t4", 1, 3_125_000_000, "Ethernet"),
    ],
)
def test_profile_fabric(
    tmp_path: Path, profile: str, count: int, rate_bps: int, link_layer: str
) -> None:
    _, _, source = _fabric(tmp_path, profile)
    devices = source.collect().devices
    assert [d.name for d in devices] == [f"mlx5_{i}" for i in range(count)]
    nics = get_profile(profile).nics
    for device, nic in zip(devices, nics, strict=True):
        assert device.hca_type == nic.hca_type
        assert device.board_id == nic.board_id
        assert device.firmware_version == nic.firmware_version
        assert device.node_guid is not None and len(device.node_guid.split(":")) == 4
        (port,) = device.ports
        assert port.rate_bytes_per_second == rate_bps
        assert port.link_layer == link_layer
        assert (port.state, port.physical_state) == (4, 5)
        assert port.transmit_bytes is not None and port.transmit_bytes > 1 << 38
        assert port.nearest_gpus  # every NIC shares a PCIe switch with GPUs
        assert "lifespan" not in port.hw_counters
    roce_only = {"np_cnp_sent", "rp_cnp_handled"}
    has_roce = all(roce_only <= set(d.ports[0].hw_counters) for d in devices)
    assert has_roce == (link_layer == "Ethernet")


@pytest.mark.parametrize("profile", ["dgx-station", "geforce-workstation"])
def test_profiles_without_infiniband(tmp_path: Path, profile: str) -> None:
    fabric = SimulatedFabric(profile, tmp_path, clock=ManualClock())
    fabric.tick()
    assert fabric.devices == ()
    assert not (tmp_path / "class" / "infiniband").exists()
    with pytest.raises(SourceAbsent):  # no HCA on the simulated PCI bus either
        InfinibandSource(tmp_path).collect()
    # the GPUs' PCI tree is there for the topology command
    for bus_id in fabric.gpu_bus_ids():
        assert (tmp_path / "bus/pci/devices" / bus_id[4:]).resolve().is_dir()


def test_congestion_xmit_wait_climbs(tmp_path: Path) -> None:
    fabric, clock, source = _fabric(tmp_path, port_scenarios={"mlx5_3": "ib-congestion"})
    assert fabric.scenarios == {"mlx5_3": "ib-congestion"}
    before = _ports(source)
    _at(fabric, clock, 60)
    after = _ports(source)

    def growth(device: str) -> int:
        return after[device].counters["port_xmit_wait"] - before[device].counters["port_xmit_wait"]

    # stalled CONGESTION_STALL of the time, until the 32-bit counter saturates
    expected = min(CONGESTION_STALL * XMIT_WAIT_TICKS_PER_SECOND * 60, 2**32 - 1)
    assert growth("mlx5_3") > 0.9 * expected
    assert growth("mlx5_0") < growth("mlx5_3") / 10
    assert after["mlx5_3"].state == 4


def test_congestion_eventually_saturates_xmit_wait(tmp_path: Path) -> None:
    fabric, clock, source = _fabric(tmp_path, scenario="ib-congestion")
    _at(fabric, clock, 3600)
    port = _ports(source)["mlx5_0"]
    assert port.counters["port_xmit_wait"] == (1 << 32) - 1
    assert port.saturated["port_xmit_wait"] is True
    assert port.saturated["symbol_error"] is False


def test_link_flap(tmp_path: Path) -> None:
    fabric, clock, source = _fabric(tmp_path, scenario="ib-link-flap")
    start = _ports(source)["mlx5_0"]
    _at(fabric, clock, 45)
    up = _ports(source)["mlx5_0"]
    assert (up.state, up.physical_state) == (4, 5)
    assert up.errors["link_downed"] == start.errors["link_downed"]
    _at(fabric, clock, 52)  # down window is [50, 60)
    down = _ports(source)["mlx5_0"]
    assert (down.state, down.state_name) == (1, "DOWN")
    assert (down.physical_state, down.physical_state_name) == (2, "Polling")
    assert down.errors["link_downed"] == start.errors["link_downed"] + 1
    _at(fabric, clock, 58)
    still_down = _ports(source)["mlx5_0"]
    assert still_down.transmit_bytes == down.transmit_bytes  # no traffic while down
    assert still_down.errors["link_downed"] == down.errors["link_downed"]
    _at(fabric, clock, 65)
    back = _ports(source)["mlx5_0"]
    assert (back.state, back.physical_state) == (4, 5)
    _at(fabric, clock, 115)
    assert _ports(source)["mlx5_0"].errors["link_downed"] == start.errors["link_downed"] + 2
    assert _ports(source)["mlx5_1"].errors["link_downed"] == 0  # only the target flaps


def test_degraded_rate_while_active(tmp_path: Path) -> None:
    fabric, clock, source = _fabric(tmp_path, "dgx-h100", scenario="ib-degraded")
    _at(fabric, clock, 30)
    ports = _ports(source)
    assert ports["mlx5_0"].rate_text == "100 Gb/sec (1X NDR)"
    assert ports["mlx5_0"].rate_bytes_per_second == 12_500_000_000
    assert ports["mlx5_1"].rate_bytes_per_second == 50_000_000_000
    assert (ports["mlx5_0"].state, ports["mlx5_0"].physical_state) == (4, 5)


@pytest.mark.parametrize(
    ("healthy", "degraded"),
    [
        ("100 Gb/sec (4X EDR)", "25 Gb/sec (1X EDR)"),
        ("200 Gb/sec (4X HDR)", "50 Gb/sec (1X HDR)"),
        ("400 Gb/sec (4X NDR)", "100 Gb/sec (1X NDR)"),
        ("10 Gb/sec (4X)", "2.5 Gb/sec (1X)"),
        ("25 Gb/sec (1X EDR)", "10 Gb/sec (1X QDR)"),
        ("10 Gb/sec (1X QDR)", "2.5 Gb/sec (1X SDR)"),
    ],
)
def test_degraded_rate_strings(healthy: str, degraded: str) -> None:
    assert degraded_rate(healthy) == degraded


def test_symbol_errors_climb(tmp_path: Path) -> None:
    fabric, clock, source = _fabric(tmp_path, scenario="ib-symbol-errors")
    before = _ports(source)
    _at(fabric, clock, 600)
    after = _ports(source)
    sym = after["mlx5_0"].errors["symbol"] - before["mlx5_0"].errors["symbol"]
    assert sym >= 5 * 600 * 0.99
    assert after["mlx5_0"].errors["link_error_recovery"] >= 4
    assert after["mlx5_0"].errors["receive"] > before["mlx5_0"].errors["receive"]
    assert after["mlx5_1"].errors["symbol"] == before["mlx5_1"].errors["symbol"]


@pytest.mark.parametrize(
    ("kind", "low", "high"),
    [("idle", 0.0, 1e-5), ("inference", 0.015, 0.025), ("training", 0.2, 0.3)],
)
def test_traffic_follows_workload(tmp_path: Path, kind: str, low: float, high: float) -> None:
    fabric, clock, source = _fabric(tmp_path, workload=Workload(kind=kind))
    before = _ports(source)["mlx5_0"]
    _at(fabric, clock, 120)
    after = _ports(source)["mlx5_0"]
    assert before.transmit_bytes is not None and after.transmit_bytes is not None
    share = (after.transmit_bytes - before.transmit_bytes) / (EDR_BPS * 120)
    assert low <= share <= high
    assert after.counters["port_xmit_packets"] >= before.counters["port_xmit_packets"]


def test_scenario_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ib-congestion, ib-link-flap"):
        SimulatedFabric("dgx-h100", tmp_path, scenario="ib-meltdown")
    with pytest.raises(ValueError, match="known"):
        SimulatedFabric("dgx-h100", tmp_path, port_scenarios={"mlx5_1": "thermal-runaway"})
    with pytest.raises(ValueError, match="no device 'mlx5_9'"):
        SimulatedFabric("dgx-h100", tmp_path, port_scenarios={"mlx5_9": "ib-degraded"})
    with pytest.raises(ValueError, match="has none"):
        SimulatedFabric("geforce-workstation", tmp_path, scenario="ib-link-flap")
    # GPU scenarios belong to the simulated NVML: accepted, no effect here
    fabric = SimulatedFabric("dgx-h100", tmp_path, scenario="thermal-runaway")
    assert fabric.scenarios == {}
    assert is_ib_scenario("ib-congestion") and not is_ib_scenario("healthy-training")
    assert set(IB_SCENARIOS) == {"ib-congestion", "ib-link-flap", "ib-degraded", "ib-symbol-errors"}


def test_unchanged_files_are_not_rewritten(tmp_path: Path) -> None:
    fabric, clock, _ = _fabric(tmp_path)
    port = tmp_path / "class/infiniband/mlx5_0/ports/1"
    rate_inode = (port / "rate").stat().st_ino
    data_inode = (port / "counters/port_xmit_data").stat().st_ino
    _at(fabric, clock, 10)
    assert (port / "rate").stat().st_ino == rate_inode
    assert (port / "counters/port_xmit_data").stat().st_ino != data_inode
    leftovers = [n for _, _, files in os.walk(tmp_path) for n in files if n.endswith(".tmp")]
    assert leftovers == []


def test_concurrent_reader_never_sees_half_a_file(tmp_path: Path) -> None:
    fabric, clock, _ = _fabric(tmp_path)
    path = tmp_path / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"
    stop = threading.Event()
    seen: list[int] = []

    def read() -> None:
        for _ in range(100_000):
            if stop.is_set():
                return
            seen.append(parse_counter(path.read_text()))  # raises on a torn read
            time.sleep(0)  # let the writer have the GIL between reads

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(100):
            clock.advance(0.5)
            fabric.tick()
    finally:
        stop.set()
        reader.join(timeout=10)
    assert seen and seen == sorted(seen)  # counters only go up


def test_deterministic_per_seed(tmp_path: Path) -> None:
    texts = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        fabric = SimulatedFabric("dgx1-p100", tmp_path / name, seed=seed, clock=ManualClock())
        fabric.tick()
        base = tmp_path / name / "class/infiniband/mlx5_0"
        texts.append(
            (base / "node_guid").read_text()
            + (base / "ports/1/counters/port_xmit_data").read_text()
        )
    assert texts[0] == texts[1]
    assert texts[0] != texts[2]


def test_a_port_busy_all_the_time_carries_less_than_its_rate() -> None:
    """Payload is at most the link's rate (EDR: 100 Gb/s, 12.5 GB/s per direction), as
    on hardware, where headers and flow control take a few per cent of it."""
    from nvwatch.sim.fabric.ib_port import SimulatedPort
    from nvwatch.sim.profiles import Nic
    from nvwatch.sim.workload import Workload

    nic = Nic("mlx5_0", "MT4115", "MT_2180110032", "12.28.2006", "InfiniBand",
              "100 Gb/sec (4X EDR)", 0)  # fmt: skip

    class AllReduceOnly(Workload):
        def comm_intensity(self, t: float) -> float:
            return 1.0

    port = SimulatedPort(nic, AllReduceOnly("training", seed=3), seed=3)
    for second in range(200):
        before = {d: port.counters[f"port_{d}_data"] for d in ("xmit", "rcv")}
        port.integrate(float(second), second + 1.0)
        for direction, words in before.items():
            sent = (port.counters[f"port_{direction}_data"] - words) * 4
            assert 0.9 * 12.5e9 < sent <= 12.5e9
