"""Directories that are not what sysfs would put there, on real trees in tmp_path.

Before: an HCA whose ports/ could not be listed lost every port series with no log line
and no parse error counted, and a symbolic link loop in class/infiniband was listed as a
device, found "vanished" on every poll and relisted on every poll.

The tests run as root, which lists a chmod 000 directory anyway: a file or a FIFO named
`ports` makes os.listdir fail with ENOTDIR, through the same path an EACCES or EIO from
the kernel takes (any OSError but ENOENT); the chmod 000 case runs where it bites.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from nvwatch.agent.sources import SourceAbsent, SourceUnavailable
from nvwatch.agent.sources.infiniband import InfinibandSample, InfinibandSource

from .exposition import agent_samples, scrape
from .sysfs_tree import add_device, healthy_port

CLASS = "class/infiniband"
LOGGER = "nvwatch.agent.sources.infiniband"


def _unlistable(directory: Path, how: str) -> None:
    """Make `directory` exist as something os.listdir refuses."""
    shutil.rmtree(directory)
    if how == "file":
        directory.write_text("not a directory\n")
    else:
        os.mkfifo(directory)


def _ports(sample: InfinibandSample) -> dict[str, list[str]]:
    return {device.name: [port.port for port in device.ports] for device in sample.devices}


def _warnings(caplog: pytest.LogCaptureFixture, fragment: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and fragment in r.getMessage()
    ]


@pytest.mark.parametrize("how", ["file", "fifo"])
def test_an_unlistable_ports_directory_is_a_parse_error_each_poll_logged_once(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    add_device(tmp_path, "mlx5_1", ports={"1": healthy_port()})
    ports = tmp_path / CLASS / "mlx5_1/ports"
    _unlistable(ports, how)
    source = InfinibandSource(tmp_path)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        samples = [source.collect() for _ in range(3)]
    # the other device keeps its ports, this one keeps its own labels
    assert _ports(samples[-1]) == {"mlx5_0": ["1"], "mlx5_1": []}
    assert samples[-1].devices[1].firmware_version == "12.28.2006"
    # counted on every poll that loses the ports, like a garbage value is
    assert source.parse_errors_total == 3
    (line,) = _warnings(caplog, str(ports))
    assert "cannot list: Not a directory" in line


def test_an_unlistable_counters_directory_is_counted_too(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    _unlistable(tmp_path / CLASS / "mlx5_0/ports/1/counters", "file")
    source = InfinibandSource(tmp_path)
    (device,) = source.collect().devices
    assert device.ports[0].state == 4 and device.ports[0].transmit_bytes is None
    assert source.parse_errors_total == 1


def test_an_unlistable_ports_directory_is_exported_as_parse_errors(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    _unlistable(tmp_path / CLASS / "mlx5_0/ports", "file")
    samples = agent_samples(tmp_path)
    assert samples[("nvwatch_agent_parse_errors_total", (("source", "infiniband"),))] == 2
    assert samples[("nvwatch_agent_source_up", (("source", "infiniband"),))] == 1


def test_a_missing_ports_directory_is_no_error(tmp_path: Path) -> None:
    # ENOENT is "no ports here" (or a device being unplugged), as before
    add_device(tmp_path, "mlx5_0")
    source = InfinibandSource(tmp_path)
    assert _ports(source.collect()) == {"mlx5_0": []}
    assert source.parse_errors_total == 0


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="root lists directories despite chmod 000"
)
def test_a_chmod_000_ports_directory_is_a_parse_error(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    ports = tmp_path / CLASS / "mlx5_0/ports"
    ports.chmod(0)
    try:
        source = InfinibandSource(tmp_path)
        assert _ports(source.collect()) == {"mlx5_0": []}
    finally:
        ports.chmod(0o755)
    assert source.parse_errors_total == 1


@pytest.mark.parametrize("loop", [["loop"], ["a", "b"]], ids=["self", "a-b-a"])
def test_a_symlink_loop_in_the_class_directory_is_skipped_and_logged_once(
    tmp_path: Path, loop: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    class_dir = tmp_path / CLASS
    for name, target in zip(loop, loop[1:] + loop[:1], strict=True):
        os.symlink(target, class_dir / name)  # ln -s loop loop; a -> b -> a
    source = InfinibandSource(tmp_path, relist_every=1000)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        first = source.collect()
        # a counter file added now is seen only at a relist: none may happen
        hw = class_dir / "mlx5_0/ports/1/hw_counters/out_of_sequence"
        hw.write_text("9\n")
        later = [source.collect() for _ in range(3)]
    assert [d.name for d in first.devices] == ["mlx5_0"]
    assert all(_ports(sample) == {"mlx5_0": ["1"]} for sample in later)
    assert all("out_of_sequence" not in s.devices[0].ports[0].hw_counters for s in later)
    for name in loop:
        (line,) = _warnings(caplog, str(class_dir / name))
        assert "symbolic link loop: skipped" in line
    assert source.parse_errors_total == 0
    _, series = scrape(later[-1])
    assert {dict(labels).get("device") for _, labels in series} <= {"mlx5_0", None}


def test_a_class_directory_of_loops_only_is_an_empty_one(tmp_path: Path) -> None:
    # before: served as "up" with no device; now the verdict of an empty directory
    class_dir = tmp_path / CLASS
    class_dir.mkdir(parents=True)
    os.symlink("loop", class_dir / "loop")
    (tmp_path / "bus/pci/devices").mkdir(parents=True)
    with pytest.raises(SourceAbsent, match="no InfiniBand or RoCE HCA on this node"):
        InfinibandSource(tmp_path).collect()


def test_a_device_that_becomes_a_loop_is_gone(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    source = InfinibandSource(tmp_path)
    source.collect()
    device = tmp_path / CLASS / "mlx5_0"
    shutil.rmtree(device)
    os.symlink("mlx5_0", device)
    with pytest.raises(SourceUnavailable, match="InfiniBand devices gone: mlx5_0"):
        source.collect()


def test_a_symlink_loop_among_the_ports_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    add_device(tmp_path, "mlx5_0", ports={"2": healthy_port()})
    loop = tmp_path / CLASS / "mlx5_0/ports/1"
    os.symlink("1", loop)
    source = InfinibandSource(tmp_path)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        samples = [source.collect() for _ in range(2)]
    assert all(_ports(sample) == {"mlx5_0": ["2"]} for sample in samples)
    (line,) = _warnings(caplog, str(loop))
    assert "symbolic link loop: skipped" in line
    assert source.parse_errors_total == 0
