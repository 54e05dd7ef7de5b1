"""Builders for small real sysfs trees in a test's tmp_path (files and symlinks on disk)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def write_files(base: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        path = base / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def add_device(
    root: Path,
    device: str,
    *,
    attrs: Mapping[str, str] | None = None,
    ports: Mapping[str, Mapping[str, str]] | None = None,
) -> Path:
    """class/infiniband/<device> with device attributes and ports/<n>/<relative path>."""
    device_dir = root / "class" / "infiniband" / device
    device_dir.mkdir(parents=True, exist_ok=True)
    defaults = {
        "board_id": "MT_2180110032\n",
        "fw_ver": "12.28.2006\n",
        "hca_type": "MT4115\n",
        "node_guid": "0c42:a103:0001:0203\n",
    }
    write_files(device_dir, {**defaults, **(attrs or {})})
    for port, files in (ports or {}).items():
        write_files(device_dir / "ports" / port, files)
    return device_dir


def healthy_port(**overrides: str) -> dict[str, str]:
    files = {
        "state": "4: ACTIVE\n",
        "phys_state": "5: LinkUp\n",
        "rate": "100 Gb/sec (4X EDR)\n",
        "link_layer": "InfiniBand\n",
        "counters/port_xmit_data": "1000\n",
        "counters/port_rcv_data": "2000\n",
        "counters/port_xmit_packets": "30\n",
        "counters/port_rcv_packets": "40\n",
        "counters/port_xmit_wait": "7\n",
        "counters/symbol_error": "1\n",
        "counters/link_downed": "2\n",
        "hw_counters/local_ack_timeout_err": "5\n",
        "hw_counters/lifespan": "12\n",
    }
    files.update(overrides)
    return files


def add_pci_device(root: Path, path: tuple[str, ...], *, numa_node: int | None = None) -> None:
    """devices/<path...> plus the bus/pci/devices/<bus id> link, as the kernel lays it out."""
    node = root / "devices"
    node = node.joinpath(*path)
    node.mkdir(parents=True, exist_ok=True)
    if numa_node is not None:
        (node / "numa_node").write_text(f"{numa_node}\n")
    bus = root / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    link = bus / path[-1]
    if not link.is_symlink():
        os.symlink(os.path.join("..", "..", "..", "devices", *path), link)


def link_hca(root: Path, device: str, path: tuple[str, ...]) -> None:
    add_pci_device(root, path)
    device_dir = root / "class" / "infiniband" / device
    device_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.join("..", "..", "..", "devices", *path), device_dir / "device")


@contextlib.contextmanager
def fifo_in_place(path: Path) -> Iterator[Path]:
    """A FIFO in place of the file at `path`, removed on the way out, after releasing any
    reader stuck on it (a writer opening it lets a blocked open return): nothing leaks."""
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        path.unlink()


def returns_within(seconds: float, call: Callable[[], T]) -> T:
    """`call()` on a thread; fails (instead of hanging) when it has not returned in time."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"blocked for more than {seconds}s"
    if errors:
        raise errors[0]
    return result[0]
