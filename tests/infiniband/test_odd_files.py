"""Files that are not what sysfs would put there: each costs its one value, never a source.

A FIFO where a counter was (open() of a FIFO blocks until a writer comes), a counter file
that vanishes and comes back, a number wider than 64 bits. Every test builds a real
tree on disk; the FIFO tests run the read on a thread so that a regression fails the test
instead of hanging it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nvwatch.agent.poller import Poller
from nvwatch.agent.sources.infiniband import InfinibandPort, InfinibandSample, InfinibandSource
from nvwatch.agent.sources.pci_affinity import Resolver
from nvwatch.agent.sources.presence import scan_pci

from .exposition import agent_samples
from .sysfs_tree import (
    add_device,
    add_pci_device,
    fifo_in_place,
    healthy_port,
    returns_within,
)

PORT = "class/infiniband/mlx5_0/ports/1"
# well under any poll timeout; a blocked open never returns at all
PROMPT_SECONDS = 5.0


def _port(sample: InfinibandSample, device: str, port: str = "1") -> InfinibandPort:
    (dev,) = [d for d in sample.devices if d.name == device]
    (p,) = [p for p in dev.ports if p.port == port]
    return p


def test_a_fifo_counter_costs_one_value_and_the_value_returns(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(), "2": healthy_port()})
    add_device(tmp_path, "mlx5_1", ports={"1": healthy_port()})
    counter = tmp_path / PORT / "counters/port_xmit_data"
    source = InfinibandSource(tmp_path)
    with fifo_in_place(counter):
        sample = returns_within(PROMPT_SECONDS, source.collect)
        broken = _port(sample, "mlx5_0")
        assert "port_xmit_data" not in broken.counters
        assert broken.receive_bytes == 8000 and broken.errors == {"symbol": 1, "link_downed": 2}
        assert broken.hw_counters == {"local_ack_timeout_err": 5}
        assert _port(sample, "mlx5_0", "2").transmit_bytes == 4000
        assert _port(sample, "mlx5_1").transmit_bytes == 4000
    counter.write_text("1500\n")
    assert _port(returns_within(PROMPT_SECONDS, source.collect), "mlx5_0").transmit_bytes == 6000


@pytest.mark.parametrize("attribute", ["state", "rate", "fw_ver"])
def test_a_fifo_attribute_costs_one_value(tmp_path: Path, attribute: str) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    where = tmp_path / (
        f"{PORT}/{attribute}" if attribute != "fw_ver" else "class/infiniband/mlx5_0/fw_ver"
    )
    with fifo_in_place(where):
        sample = returns_within(PROMPT_SECONDS, InfinibandSource(tmp_path).collect)
    port = _port(sample, "mlx5_0")
    values = {
        "state": port.state,
        "rate": port.rate_bytes_per_second,
        "fw_ver": sample.devices[0].firmware_version,
    }
    assert values.pop(attribute) is None
    assert None not in values.values()
    assert port.transmit_bytes == 4000


def test_a_fifo_keeps_the_source_up_through_the_poller(tmp_path: Path) -> None:
    # as an operator saw it: one FIFO and every IB series was gone until restart
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    counter = tmp_path / PORT / "counters/symbol_error"
    poller = Poller([InfinibandSource(tmp_path)], interval=1.0, timeout=2.0)
    try:
        with fifo_in_place(counter):
            for _ in range(2):
                started = time.monotonic()
                status = poller.poll_once().sources["infiniband"]
                assert status.up, status.error
                assert time.monotonic() - started < 1.0
        counter.write_text("3\n")
        status = poller.poll_once().sources["infiniband"]
        assert isinstance(status.prepared, InfinibandSample)
        assert _port(status.prepared, "mlx5_0").errors["symbol"] == 3
    finally:
        poller.stop()


def test_fifos_in_the_pci_tree_cost_one_function(tmp_path: Path) -> None:
    for address, vendor in (("0000:3b:00.0", "0x10de"), ("0000:5e:00.0", "0x10de")):
        add_pci_device(tmp_path, ("pci0000:00", address), numa_node=0)
        function = tmp_path / "devices/pci0000:00" / address
        (function / "vendor").write_text(vendor + "\n")
        (function / "class").write_text("0x030200\n")
    with fifo_in_place(tmp_path / "devices/pci0000:00/0000:3b:00.0/class"):
        scan = returns_within(PROMPT_SECONDS, lambda: scan_pci(tmp_path))
    assert [f.address for f in scan.nvidia_gpus()] == ["0000:5e:00.0"]
    path = ("pci0000:00", "0000:5e:00.0")
    with fifo_in_place(tmp_path / "devices/pci0000:00/0000:5e:00.0/numa_node"):
        assert returns_within(PROMPT_SECONDS, lambda: Resolver(tmp_path).numa_node(path)) is None
    assert Resolver(tmp_path).numa_node(path) is None  # the FIFO is gone: no file
    (tmp_path / "devices/pci0000:00/0000:5e:00.0/numa_node").write_text("1\n")
    assert Resolver(tmp_path).numa_node(path) == 1


# --- a counter file that vanishes and comes back --------------------------------------------


@pytest.mark.parametrize(
    "relative", ["counters/port_xmit_data", "hw_counters/local_ack_timeout_err"]
)
def test_a_vanished_counter_returns_on_the_next_poll(tmp_path: Path, relative: str) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    path = tmp_path / PORT / relative
    text = path.read_text()
    source = InfinibandSource(tmp_path)  # the default relist_every: 60 polls

    def present() -> bool:
        port = _port(source.collect(), "mlx5_0")
        return {**port.counters, **port.hw_counters}.get(path.name) is not None

    assert present()
    path.unlink()
    assert [present() for _ in range(3)] == [False, False, False]
    path.write_text(text)
    assert present()
    # and gone again, and back again: no state is left behind by the first round
    path.unlink()
    assert not present()
    path.write_text(text)
    assert present()


def test_a_counter_that_stays_gone_does_not_relist_every_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    source = InfinibandSource(tmp_path)
    source.collect()
    (tmp_path / PORT / "counters/port_rcv_data").unlink()
    (tmp_path / PORT / "phys_state").unlink()
    calls: list[str] = []
    real = os.listdir

    def counting(directory: str) -> list[str]:
        calls.append(directory)
        return real(directory)

    monkeypatch.setattr(os, "listdir", counting)
    per_poll = []
    for _ in range(5):
        calls.clear()
        source.collect()
        per_poll.append(len(calls))
    # the poll that finds it gone asks for a relist, the next one relists, and from then
    # on a poll lists class/infiniband alone (to see hot-plug), as before it went
    assert per_poll[2:] == [1, 1, 1], per_poll


def test_a_new_counter_file_is_still_found_at_the_relist(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    source = InfinibandSource(tmp_path, relist_every=2)
    source.collect()
    (tmp_path / PORT / "hw_counters/out_of_sequence").write_text("9\n")
    seen = ["out_of_sequence" in _port(source.collect(), "mlx5_0").hw_counters for _ in range(2)]
    assert seen == [False, True]


# --- values wider than 64 bits, and narrow counters read wider --------------------------


@pytest.mark.parametrize(
    ("relative", "text"),
    [
        ("counters/port_xmit_data", f"{2**64 + 1}\n"),
        ("counters/port_xmit_data", f"{2**64}\n"),
        ("counters_ext/port_xmit_data_64", f"{2**64}\n"),
        ("hw_counters/local_ack_timeout_err", f"{2**64 + 1}\n"),
        ("counters/port_xmit_wait", f"{2**64}\n"),
        ("counters/symbol_error", f"{2**64}\n"),
        ("counters/port_xmit_data", "9" * 5000 + "\n"),  # beyond int()'s digit limit
    ],
)
def test_a_value_wider_than_64_bits_is_dropped_and_counted(
    tmp_path: Path, relative: str, text: str
) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**{relative: text})})
    source = InfinibandSource(tmp_path)
    assert source.parse_errors_total == 0
    port = _port(source.collect(), "mlx5_0")
    name = Path(relative).name.removesuffix("_64")
    assert name not in port.counters and name not in port.hw_counters
    assert port.receive_bytes == 8000
    assert source.parse_errors_total == 1
    source.collect()
    assert source.parse_errors_total == 2  # every poll that drops it counts


@pytest.mark.parametrize(
    ("relative", "top"),
    [
        ("counters/port_xmit_data", 2**64 - 1),
        ("counters/port_xmit_wait", 2**32 - 1),
        ("counters/symbol_error", 2**16 - 1),
        ("counters/link_downed", 255),
        ("hw_counters/local_ack_timeout_err", 2**64 - 1),
    ],
)
def test_the_widest_value_of_a_counter_is_kept(tmp_path: Path, relative: str, top: int) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**{relative: f"{top}\n"})})
    source = InfinibandSource(tmp_path)
    port = _port(source.collect(), "mlx5_0")
    assert {**port.counters, **port.hw_counters}[Path(relative).name] == top
    assert source.parse_errors_total == 0


@pytest.mark.parametrize(
    ("counter", "reading"),
    [
        # PortXmitWait's 64-bit extended form, as MAD tools and a widened file show it
        ("port_xmit_wait", 2**32),
        ("port_xmit_wait", 2**40 + 7),
        ("port_xmit_wait", 2**64 - 1),
        ("symbol_error", 2**16),  # 16 bits in PortCounters
        ("link_downed", 256),  # 8 bits
        ("local_link_integrity_errors", 16),  # 4 bits
    ],
)
def test_a_narrow_counter_read_wider_than_its_field_is_kept_and_not_saturated(
    tmp_path: Path, counter: str, reading: int
) -> None:
    wide = healthy_port(**{f"counters/{counter}": f"{reading}\n"})
    add_device(tmp_path, "mlx5_0", ports={"1": wide})
    source = InfinibandSource(tmp_path)
    port = _port(source.collect(), "mlx5_0")
    assert port.counters[counter] == reading
    assert port.pinned == {}  # counting on in a wider field: not pinned
    assert source.parse_errors_total == 0


def test_no_pma_is_not_a_parse_error_and_garbage_is(tmp_path: Path) -> None:
    files = {k: "N/A (no PMA)\n" for k in healthy_port() if k.startswith("counters/")}
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**files)})
    add_device(tmp_path, "mlx5_1", ports={"1": healthy_port(state="ACTIVE\n", rate="fast\n")})
    source = InfinibandSource(tmp_path)
    source.collect()
    assert source.parse_errors_total == 2


def test_parse_errors_are_exported_and_the_wide_value_is_not(tmp_path: Path) -> None:
    # 2^64+1 in port_xmit_data was once exported as 1.8e19 bytes
    wide = {"counters/port_xmit_data": f"{2**64 + 1}\n"}
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**wide)})
    samples = agent_samples(tmp_path)
    assert samples[("nvwatch_agent_parse_errors_total", (("source", "infiniband"),))] == 2
    port = (("device", "mlx5_0"), ("port", "1"))
    assert ("nvwatch_ib_port_transmit_bytes_total", port) not in samples
    assert samples[("nvwatch_ib_port_receive_bytes_total", port)] == 8000
