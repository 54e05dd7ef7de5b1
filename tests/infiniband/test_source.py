"""InfinibandSource over real sysfs trees in tmp_path, including every odd file."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from nvwatch.agent.catalogue import BY_NAME
from nvwatch.agent.sources import Source, SourceAbsent, SourceUnavailable
from nvwatch.agent.sources.infiniband import (
    InfinibandPort,
    InfinibandSample,
    InfinibandSource,
    read_sysfs_text,
)
from nvwatch.agent.sources.infiniband_parse import (
    SATURATION_FLAGGED,
    SWITCH_ONLY_COUNTERS,
    hw_counter_selection,
)

from .sysfs_tree import add_device, healthy_port


def _port(sample: InfinibandSample, device: str, port: str = "1") -> InfinibandPort:
    (dev,) = [d for d in sample.devices if d.name == device]
    (p,) = [p for p in dev.ports if p.port == port]
    return p


def test_is_a_source(tmp_path: Path) -> None:
    source = InfinibandSource(tmp_path)
    assert isinstance(source, Source)
    assert source.name == "infiniband"


def test_no_infiniband_class_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match=r"no InfiniBand devices: .*does not exist"):
        InfinibandSource(tmp_path).collect()


def test_empty_class_dir_without_hcas_on_pci_is_absent(tmp_path: Path) -> None:
    (tmp_path / "class" / "infiniband").mkdir(parents=True)
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    with pytest.raises(SourceAbsent, match="no InfiniBand or RoCE HCA on this node"):
        InfinibandSource(tmp_path).collect()


def test_empty_class_dir_without_a_pci_tree_is_down(tmp_path: Path) -> None:
    # presence unknown: down, since silence about a broken HCA costs more
    (tmp_path / "class" / "infiniband").mkdir(parents=True)
    with pytest.raises(SourceUnavailable, match=r"is empty, and .* cannot be listed"):
        InfinibandSource(tmp_path).collect()


def test_healthy_port_exact_values(tmp_path: Path) -> None:
    big = 1 << 40
    add_device(
        tmp_path,
        "mlx5_0",
        ports={
            "1": healthy_port(
                **{
                    "counters/port_xmit_data": f"{big}\n",
                    "counters/port_rcv_data": f"{big + 3}\n",
                    "counters/port_xmit_packets": f"{(1 << 64) - 1}\n",
                }
            )
        },
    )
    sample = InfinibandSource(tmp_path).collect()
    (device,) = sample.devices
    assert device.name == "mlx5_0"
    assert device.board_id == "MT_2180110032"
    assert device.firmware_version == "12.28.2006"
    assert device.hca_type == "MT4115"
    assert device.node_guid == "0c42:a103:0001:0203"
    port = _port(sample, "mlx5_0")
    assert (port.state, port.state_name) == (4, "ACTIVE")
    assert (port.physical_state, port.physical_state_name) == (5, "LinkUp")
    assert port.rate_bytes_per_second == 12_500_000_000
    assert port.link_layer == "InfiniBand"
    assert port.transmit_bytes == 4 * big
    assert port.receive_bytes == 4 * (big + 3)
    assert port.counters["port_xmit_packets"] == (1 << 64) - 1  # exact as a Python int
    assert port.counters["port_xmit_wait"] == 7
    assert port.errors == {"symbol": 1, "link_downed": 2}
    assert port.hw_counters == {"local_ack_timeout_err": 5}  # lifespan is a setting, not a counter
    assert port.nearest_gpus == ()


# The kernel's error counter files under ports/<n>/counters/ (drivers/infiniband/core/sysfs.c).
_KERNEL_ERROR_FILES = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
)


def _expected_type(file_name: str) -> str:
    """The naming rule of the `type` label: spelled-out words, no port_ prefix or _errors."""
    words = file_name.lower().removeprefix("port_").removesuffix("_errors")
    words = words.removesuffix("_error").replace("rcv", "receive").replace("xmit", "transmit")
    return words


def test_every_error_counter_maps_to_its_type(tmp_path: Path) -> None:
    # distinct values, so a label pointing at the wrong file is caught, not only a missing one
    files = {f"counters/{name}": f"{i + 1}\n" for i, name in enumerate(_KERNEL_ERROR_FILES)}
    add_device(tmp_path, "mlx5_0", ports={"1": files})
    port = _port(InfinibandSource(tmp_path).collect(), "mlx5_0")
    expected = {_expected_type(name): i + 1 for i, name in enumerate(_KERNEL_ERROR_FILES)}
    assert port.errors == expected
    # and the label values are the ones the catalogue documents for the family
    documented = BY_NAME["nvwatch_ib_port_errors_total"].help.split(":", 1)[1]
    assert {t.strip(" .") for t in documented.split(",")} == set(expected)


def test_counters_ext_64_bit_values_win(tmp_path: Path) -> None:
    add_device(
        tmp_path,
        "mlx4_0",
        ports={
            "1": healthy_port(
                **{
                    "counters/port_xmit_data": "4294967295\n",  # 32-bit, stuck
                    "counters_ext/port_xmit_data_64": "123456789012345\n",
                    "counters_ext/port_rcv_packets_64": "99\n",
                }
            )
        },
    )
    port = _port(InfinibandSource(tmp_path).collect(), "mlx4_0")
    assert port.transmit_bytes == 4 * 123456789012345
    assert port.counters["port_rcv_packets"] == 99


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("N/A (no PMA)\n", "no PMA"),
        ("", "empty"),
        ("garbage\n", "garbage"),
        ("\xff\xfe\n", "undecodable"),
    ],
)
def test_odd_counter_is_absent_and_only_that(tmp_path: Path, content: str, why: str) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**{"counters/symbol_error": content})})
    add_device(tmp_path, "mlx5_1", ports={"1": healthy_port()})
    sample = InfinibandSource(tmp_path).collect()
    port = _port(sample, "mlx5_0")
    assert "symbol_error" not in port.counters, why
    assert "symbol" not in port.errors
    assert "symbol_error" not in port.saturated
    assert port.transmit_bytes == 4000
    assert port.errors == {"link_downed": 2}
    assert _port(sample, "mlx5_1").errors == {"symbol": 1, "link_downed": 2}


def test_degraded_device_every_counter_no_pma(tmp_path: Path) -> None:
    files = healthy_port()
    files = {k: ("N/A (no PMA)\n" if k.startswith("counters/") else v) for k, v in files.items()}
    add_device(tmp_path, "mlx5_0", ports={"1": files})
    port = _port(InfinibandSource(tmp_path).collect(), "mlx5_0")
    assert port.counters == {}
    assert port.transmit_bytes is None
    assert port.state == 4  # the port itself is still described


def test_missing_files_are_absent(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", attrs={}, ports={"1": {"state": "4: ACTIVE\n"}})
    (tmp_path / "class/infiniband/mlx5_0/fw_ver").unlink()
    sample = InfinibandSource(tmp_path).collect()
    port = _port(sample, "mlx5_0")
    assert sample.devices[0].firmware_version is None
    assert port.state == 4
    assert port.physical_state is None
    assert port.rate_bytes_per_second is None
    assert port.link_layer is None
    assert port.counters == {} and port.hw_counters == {}


@pytest.mark.parametrize(
    ("field", "content"),
    [("state", "ACTIVE\n"), ("phys_state", "\n"), ("rate", "fast\n")],
)
def test_garbage_port_attributes_are_absent(tmp_path: Path, field: str, content: str) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**{field: content})})
    port = _port(InfinibandSource(tmp_path).collect(), "mlx5_0")
    values = {
        "state": port.state,
        "phys_state": port.physical_state,
        "rate": port.rate_bytes_per_second,
    }
    assert values.pop(field) is None
    assert None not in values.values()
    assert port.transmit_bytes == 4000


def test_empty_cage_rate_is_zero(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(rate="0 GB/sec\n")})
    assert _port(InfinibandSource(tmp_path).collect(), "mlx5_0").rate_bytes_per_second == 0


def _denying_reader(denied: str) -> Callable[[str], str]:
    def read(path: str) -> str:
        if path.endswith(denied):
            raise PermissionError(13, "Permission denied", path)
        return read_sysfs_text(path)

    return read


def test_permission_denied_via_injected_reader(tmp_path: Path) -> None:
    # Always runs, also as root (where chmod 000 does not stop a read).
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    source = InfinibandSource(tmp_path, reader=_denying_reader("counters/port_xmit_data"))
    port = _port(source.collect(), "mlx5_0")
    assert port.transmit_bytes is None
    assert port.receive_bytes == 8000


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads files despite chmod 000"
)
def test_permission_denied_via_chmod(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    target = tmp_path / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"
    target.chmod(0)
    try:
        port = _port(InfinibandSource(tmp_path).collect(), "mlx5_0")
    finally:
        target.chmod(0o644)
    assert port.transmit_bytes is None
    assert port.receive_bytes == 8000


def test_io_error_from_the_kernel_is_absent(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})

    def read(path: str) -> str:
        if path.endswith("port_xmit_wait"):
            raise OSError(5, "Input/output error")  # a failed PMA query
        return read_sysfs_text(path)

    port = _port(InfinibandSource(tmp_path, reader=read).collect(), "mlx5_0")
    assert "port_xmit_wait" not in port.counters
    assert port.transmit_bytes == 4000


def test_odd_file_logged_once_across_polls(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**{"counters/symbol_error": "x\n"})})
    source = InfinibandSource(tmp_path, reader=_denying_reader("port_rcv_data"))
    with caplog.at_level(logging.DEBUG, logger="nvwatch.agent.sources.infiniband"):
        for _ in range(5):
            source.collect()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("symbol_error" in m for m in messages) == 1
    assert sum("port_rcv_data" in m and "permission denied" in m for m in messages) == 1


def test_device_vanishing_mid_read_leaves_the_others(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    add_device(tmp_path, "mlx5_1", ports={"1": healthy_port()})
    doomed = tmp_path / "class/infiniband/mlx5_0"
    armed = False

    def read(path: str) -> str:
        # Once armed, the first read of mlx5_0 finds it being unplugged.
        if armed and path.startswith(str(doomed)) and doomed.exists():
            shutil.rmtree(doomed)
        return read_sysfs_text(path)

    source = InfinibandSource(tmp_path, reader=read)
    source.collect()  # lists both devices
    armed = True
    sample = source.collect()
    assert [d.name for d in sample.devices] == ["mlx5_1"]
    assert _port(sample, "mlx5_1").transmit_bytes == 4000
    # The next poll re-lists and no longer looks for the vanished device.
    assert [d.name for d in source.collect().devices] == ["mlx5_1"]


def test_hot_plug_is_seen_on_the_next_poll(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    source = InfinibandSource(tmp_path, relist_every=1000)
    assert [d.name for d in source.collect().devices] == ["mlx5_0"]
    add_device(tmp_path, "mlx5_1", ports={"1": healthy_port()})
    assert [d.name for d in source.collect().devices] == ["mlx5_0", "mlx5_1"]


def test_listing_is_cached_between_polls(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    source = InfinibandSource(tmp_path, relist_every=3)
    source.collect()
    # A counter file added without a device-level change is picked up only at re-list.
    (tmp_path / "class/infiniband/mlx5_0/ports/1/hw_counters/out_of_sequence").write_text("9\n")
    seen = ["out_of_sequence" in _port(source.collect(), "mlx5_0").hw_counters for _ in range(3)]
    assert seen == [False, False, True]


def test_counter_values_change_between_cached_polls(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    source = InfinibandSource(tmp_path)
    assert _port(source.collect(), "mlx5_0").transmit_bytes == 4000
    (tmp_path / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data").write_text("1500\n")
    assert _port(source.collect(), "mlx5_0").transmit_bytes == 6000


@pytest.mark.parametrize(
    ("counter", "top"),
    [
        ("symbol_error", 65535),
        ("port_rcv_errors", 65535),
        ("VL15_dropped", 65535),
        ("link_downed", 255),
        ("port_xmit_discards", 65535),
        ("local_link_integrity_errors", 15),
        ("excessive_buffer_overrun_errors", 15),
        ("port_xmit_wait", 4294967295),
    ],
)
def test_saturation(tmp_path: Path, counter: str, top: int) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**{f"counters/{counter}": f"{top}\n"})})
    add_device(
        tmp_path, "mlx5_1", ports={"1": healthy_port(**{f"counters/{counter}": f"{top - 1}\n"})}
    )
    sample = InfinibandSource(tmp_path).collect()
    assert _port(sample, "mlx5_0").saturated[counter] is True
    assert _port(sample, "mlx5_1").saturated[counter] is False
    # every other narrow counter present reads 0, so alerts need no absent()
    others = {k: v for k, v in _port(sample, "mlx5_0").saturated.items() if k != counter}
    assert others and not any(others.values())


def test_no_saturation_flag_for_switch_only_counters(tmp_path: Path) -> None:
    # an HCA never counts these: a flag for them would be a series that is always 0
    files = {f"counters/{name}": "255\n" for name in SWITCH_ONLY_COUNTERS}
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**files)})
    port = _port(InfinibandSource(tmp_path).collect(), "mlx5_0")
    assert set(port.counters) >= SWITCH_ONLY_COUNTERS
    assert not SWITCH_ONLY_COUNTERS & set(port.saturated)
    assert set(port.saturated) == set(SATURATION_FLAGGED) & set(port.counters)


def test_hw_counters_selection_reads_only_the_chosen_files(tmp_path: Path) -> None:
    extra = {
        "hw_counters/out_of_sequence": "7\n",
        "hw_counters/rx_read_requests": "9\n",
        "hw_counters/out_of_buffer": "3\n",
    }
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port(**extra)})
    opened: list[str] = []

    def reader(path: str) -> str:
        opened.append(path)
        return read_sysfs_text(path)

    chosen = InfinibandSource(
        tmp_path, reader=reader, hw_counters=hw_counter_selection("default")
    ).collect()
    assert _port(chosen, "mlx5_0").hw_counters == {"out_of_sequence": 7, "local_ack_timeout_err": 5}
    assert not any("rx_read_requests" in path or "out_of_buffer" in path for path in opened)
    every = InfinibandSource(tmp_path, hw_counters=hw_counter_selection("all")).collect()
    assert set(_port(every, "mlx5_0").hw_counters) >= {"out_of_sequence", "rx_read_requests"}


def test_ports_sorted_numerically(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={p: healthy_port() for p in ("2", "10", "1")})
    (device,) = InfinibandSource(tmp_path).collect().devices
    assert [p.port for p in device.ports] == ["1", "2", "10"]


def test_gpu_bus_ids_failure_does_not_break_ports(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})

    def broken() -> list[str]:
        raise RuntimeError("NVML went away")

    port = _port(InfinibandSource(tmp_path, gpu_bus_ids=broken).collect(), "mlx5_0")
    assert port.nearest_gpus == ()
    assert port.transmit_bytes == 4000


def test_relist_every_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        InfinibandSource(tmp_path, relist_every=0)
