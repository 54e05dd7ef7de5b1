"""node_exporter's infiniband collector and nvwatch on one held-out tree: every value equal.

The tree (real files on disk) is none the simulator writes: ports whose counters hold
32-bit values (PortCounters, some at their all-ones maximum), 64-bit extended ones (data
and packets from PortCountersExtended, as counters/ serves them), and narrow counters
read wider than their PortCounters field (PortXmitWait's 64-bit form, which MAD tools
show and a vendor may serve). Debian's prometheus-node-exporter reads each file as a
uint64, as the kernel prints it; nvwatch must export the same number for every sample
both have, and flag saturation only where a value sits exactly at its field's maximum.
(An older kernel's counters_ext/*_64 files are left out: node_exporter 1.5 does not read
them and reports the 32-bit counters/ file, where nvwatch takes the 64-bit value;
tests/infiniband/test_source.py covers them.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import fetch, running
from benchmarks.scrape import compare_expositions
from nvwatch.agent.cli import cli
from nvwatch.sim.ports import free_port
from tests.conftest import require_tool
from tests.infiniband.sysfs_tree import add_device, healthy_port

U32 = 2**32 - 1
U64 = 2**64 - 1


def _port_32_bit() -> dict[str, str]:
    """A port whose PMA has only the 32-bit PortCounters: data wraps at 2^32 words."""
    return healthy_port(
        **{
            "counters/port_xmit_data": f"{U32}\n",
            "counters/port_rcv_data": "4000000000\n",
            "counters/port_xmit_packets": "123456789\n",
            "counters/port_rcv_packets": f"{U32 - 1}\n",
            "counters/port_xmit_wait": f"{U32}\n",  # pinned: saturated
            "counters/symbol_error": "65535\n",  # pinned: saturated
            "counters/link_downed": "255\n",  # pinned: saturated
            "counters/link_error_recovery": "254\n",
            "counters/port_rcv_errors": "17\n",
            "counters/port_rcv_remote_physical_errors": "0\n",
            "counters/port_xmit_discards": "65534\n",
            "counters/local_link_integrity_errors": "15\n",  # 4 bits, pinned
            "counters/excessive_buffer_overrun_errors": "3\n",
            "counters/VL15_dropped": "0\n",
        }
    )


def _port_extended() -> dict[str, str]:
    """PortCountersExtended behind counters/: data and packets past 32 bits."""
    return healthy_port(
        **{
            "counters/port_xmit_data": f"{3 * 2**40 + 5}\n",
            "counters/port_rcv_data": f"{2**45}\n",
            "counters/port_xmit_packets": f"{2**33 + 1}\n",
            "counters/port_rcv_packets": f"{2**50 - 3}\n",
            "counters/port_xmit_wait": f"{2**32 - 2}\n",
        }
    )


def _port_widened() -> dict[str, str]:
    """Narrow counters read wider than their PortCounters field: still counting."""
    return healthy_port(
        **{
            "counters/port_xmit_wait": f"{2**32}\n",
            "counters/symbol_error": f"{2**16 + 9}\n",
            "counters/link_downed": "300\n",
            "counters/port_rcv_errors": f"{2**20}\n",
            "counters/local_link_integrity_errors": "16\n",
        }
    )


def _port_widest() -> dict[str, str]:
    """The largest readings a 64-bit file holds (float64 rounds them alike on both sides)."""
    return healthy_port(
        **{
            "counters/port_xmit_wait": f"{U64}\n",
            "counters/port_xmit_packets": f"{U64}\n",
            "counters/symbol_error": f"{2**53 + 1}\n",
        }
    )


def held_out_tree(root: Path) -> None:
    add_device(root, "mlx5_0", ports={"1": _port_32_bit(), "2": _port_extended()})
    add_device(root, "mlx5_1", ports={"1": _port_widened(), "2": _port_widest()})


def _nvwatch(root: Path) -> str:
    result = CliRunner().invoke(
        cli, ["dump", "--sources", "infiniband", "--sysfs-root", str(root), "--settle", "0"]
    )
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


@pytest.fixture(scope="module")
def expositions(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(node_exporter's, nvwatch's) exposition of the held-out tree."""
    binary = require_tool("prometheus-node-exporter")
    root = tmp_path_factory.mktemp("held-out")
    held_out_tree(root)
    port = free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}/metrics"
    argv = [
        binary,
        "--collector.disable-defaults",
        "--collector.infiniband",
        f"--path.sysfs={root}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with running(argv, url, log=root.parent / "node-exporter.log"):
        node_exporter = fetch(url).decode()
    return node_exporter, _nvwatch(root)


def test_every_value_node_exporter_reads_nvwatch_exports_equal(
    expositions: tuple[str, str],
) -> None:
    node_exporter, nvwatch = expositions
    comparison = compare_expositions(node_exporter, nvwatch)
    assert comparison.mismatches == []
    # 4 ports: data, packets and transmit wait, state, physical state, rate; the error
    # counters each port has; the 2 devices' info
    assert comparison.compared >= 4 * 8 + 2


def test_no_value_is_dropped(expositions: tuple[str, str]) -> None:
    _, nvwatch = expositions
    assert _samples(nvwatch, "nvwatch_agent_parse_errors_total") == {
        (("source", "infiniband"),): 0.0
    }
    waits = _samples(nvwatch, "nvwatch_ib_port_transmit_wait_total")
    assert waits == {
        (("device", "mlx5_0"), ("port", "1")): float(U32),
        (("device", "mlx5_0"), ("port", "2")): float(2**32 - 2),
        (("device", "mlx5_1"), ("port", "1")): float(2**32),
        (("device", "mlx5_1"), ("port", "2")): float(U64),
    }


def test_saturation_is_flagged_only_at_a_field_maximum(expositions: tuple[str, str]) -> None:
    _, nvwatch = expositions
    flagged = {
        (dict(labels)["device"], dict(labels)["port"], dict(labels)["counter"])
        for labels, value in _samples(nvwatch, "nvwatch_ib_port_reading_saturated").items()
        if value == 1
    }
    assert flagged == {
        ("mlx5_0", "1", "port_xmit_wait"),
        ("mlx5_0", "1", "symbol_error"),
        ("mlx5_0", "1", "link_downed"),
        ("mlx5_0", "1", "local_link_integrity_errors"),
    }
