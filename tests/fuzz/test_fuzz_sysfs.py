"""Fuzz the sysfs parsers and readers: only NotAValue, never another exception.

The InfiniBand source catches NotAValue alone around a parser, so anything else a
parser raised would take the whole source down for one odd file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.agent.sources.infiniband_parse import NotAValue, parse_counter, parse_rate, parse_state
from nvwatch.agent.sources.pci_affinity import Resolver
from nvwatch.agent.sources.presence import read_function
from tests.infiniband.sysfs_tree import add_device, add_pci_device, healthy_port

from .strategies import FUZZ, near

COUNTERS = near(["0\n", "1234567890\n", f"{2**64 - 1}\n", "N/A (no PMA)\n", ""])
STATES = near(["4: ACTIVE\n", "5: LinkUp\n", "7: Phy Test\n", "9: <unknown>\n", "1: DOWN"])
RATES = near(["100 Gb/sec (4X EDR)\n", "2.5 Gb/sec (1X SDR)\n", "0 GB/sec\n", "10 Gb/sec (4X)"])


@FUZZ
@given(COUNTERS)
def test_parse_counter(text: str) -> None:
    try:
        value = parse_counter(text)
    except NotAValue:
        return
    assert 0 <= value < 1 << 64
    assert str(value) == (text.strip().lstrip("0") or "0")


@FUZZ
@given(STATES)
def test_parse_state(text: str) -> None:
    try:
        code, name = parse_state(text)
    except NotAValue:
        return
    assert code >= 0 and isinstance(name, str)


@FUZZ
@given(RATES)
def test_parse_rate(text: str) -> None:
    try:
        rate = parse_rate(text)
    except NotAValue:
        return
    assert rate.bytes_per_second >= 0


FILES = ["counters/port_xmit_data", "counters/symbol_error", "state", "rate", "hw_counters/x"]


@FUZZ
@given(st.sampled_from(FILES), st.binary(max_size=64) | COUNTERS.map(str.encode))
def test_the_source_survives_any_file_content(relative: str, content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        add_device(root, "mlx5_0", ports={"1": healthy_port()})
        (root / "class/infiniband/mlx5_0/ports/1" / relative).write_bytes(content)
        source = InfinibandSource(root)
        (device,) = source.collect().devices
        (port,) = device.ports
        # the odd file costs at most itself: every other counter is still read
        assert port.receive_bytes == 8000
        assert source.parse_errors_total <= 1


@FUZZ
@given(st.binary(max_size=80), st.binary(max_size=80), st.binary(max_size=40))
def test_presence_and_numa_survive_any_file_content(
    vendor: bytes, pci_class: bytes, numa: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = ("pci0000:00", "0000:3b:00.0")
        add_pci_device(root, path)
        function = root / "devices" / Path(*path)
        (function / "vendor").write_bytes(vendor)
        (function / "class").write_bytes(pci_class)
        (function / "numa_node").write_bytes(numa)
        found = read_function(str(function))
        assert found is None or (0 <= found.vendor < 1 << 16 and 0 <= found.device_class < 1 << 24)
        node = Resolver(root).numa_node(path)
        assert node is None or node >= 0


@pytest.mark.parametrize("text", ["4: ACTIVE", "١: DOWN", "9" * 5000 + ": X"])
def test_state_examples(text: str) -> None:
    # non-ASCII digits and numbers past int()'s digit limit are not states
    if text.isascii() and len(text) < 100:
        assert parse_state(text) == (4, "ACTIVE")
    else:
        with pytest.raises(NotAValue):
            parse_state(text)
