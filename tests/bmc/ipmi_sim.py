"""A real BMC for the tests: OpenIPMI's `ipmi_sim` on loopback, with a console to change it.

One ipmi_sim per fixture: its own temp dir, free ports (UDP for IPMI, TCP for the
console), an SDR compiled by `sdrcomp` from the sensor table of tests/bmc/sim_sensors.py,
SIGPIPE ignored (a console client closing early kills it otherwise), stopped by pid at
teardown with SIGKILL after a grace period.

With `dcmi_plugin`, the small C module in tests/bmc/dcmi_power.c (compiled once per
session by `build_dcmi_plugin`) adds DCMI Get Power Reading, which stock ipmi_sim lacks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from nvwatch.sim.ports import LOOPBACK, free_port
from tests.bmc.sim_sensors import (
    BMC_ADDRESS,
    POWER,
    POWER_M,
    SENSORS,
    emu_source,
    initial_raw,
    lan_conf,
    sdr_source,
)

# how long a start may take: it answers within ~0.1 s, but a rare start took 8.8 s
READY_TIMEOUT_S = 20.0
STOP_GRACE_S = 5.0
CONSOLE_TIMEOUT_S = 5.0
PLUGIN_SOURCE = Path(__file__).with_name("dcmi_power.c")


def build_dcmi_plugin(directory: Path) -> Path:
    """tests/bmc/dcmi_power.c compiled into `directory` (once: reused while newer than
    the source). Needs gcc and libopenipmi-dev's headers."""
    output = directory / "dcmi_power.so"
    if output.exists() and output.stat().st_mtime >= PLUGIN_SOURCE.stat().st_mtime:
        return output
    compiler = shutil.which("gcc") or "gcc"
    done = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(output), str(PLUGIN_SOURCE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"cannot compile {PLUGIN_SOURCE.name}: {done.stderr.strip()}")
    return output


class Console:
    """ipmi_sim's telnet-style console: a command per line, echoed, then the next `> `."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection((LOOPBACK, port), timeout=CONSOLE_TIMEOUT_S)
        self._lock = threading.Lock()
        self._buffer = b""
        self._until_prompt()

    def close(self) -> None:
        self._sock.close()

    def run(self, command: str) -> str:
        """Run one command; RuntimeError with ipmi_sim's message when it refuses it."""
        with self._lock:
            self._sock.sendall(command.encode() + b"\n")
            output = self._until_prompt()
        text = output.replace(command, "", 1).strip()
        if "**" in text:
            raise RuntimeError(f"ipmi_sim refused {command!r}: {text}")
        return text

    def _until_prompt(self) -> str:
        deadline = time.monotonic() + CONSOLE_TIMEOUT_S
        while b"> " not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError(f"ipmi_sim console: no prompt, got {self._buffer!r}")
            chunk = self._sock.recv(4096)
            if not chunk:
                raise ConnectionError("ipmi_sim closed its console")
            self._buffer += _without_telnet_commands(chunk)
        text, _, self._buffer = self._buffer.partition(b"> ")
        return text.decode(errors="replace")


def _without_telnet_commands(data: bytes) -> bytes:
    """Drop telnet IAC sequences (0xFF and the two bytes after it) from console output."""
    out = bytearray()
    skip = 0
    for byte in data:
        if skip:
            skip -= 1
        elif byte == 0xFF:
            skip = 2
        else:
            out.append(byte)
    return bytes(out)


class IpmiSim:
    """A running ipmi_sim: where it listens and its console, for fault injection."""

    def __init__(
        self, process: subprocess.Popen[bytes], port: int, console: Console, dcmi: bool
    ) -> None:
        self.process = process
        self.host = LOOPBACK
        self.port = port
        self.console = console
        self.dcmi = dcmi  # the DCMI plug-in is loaded

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def set_raw(self, number: int, raw: int) -> None:
        self.console.run(f"sensor_set_value {BMC_ADDRESS:#04x} 0 {number} {raw} 1")

    def set_bit(self, number: int, bit: int, value: bool) -> None:
        self.console.run(f"sensor_set_bit {BMC_ADDRESS:#04x} 0 {number} {bit} {int(value)} 1")

    def supply_present_only(self, number: int) -> None:
        self.console.run(f"sensor_set_bit_clr_rest {BMC_ADDRESS:#04x} 0 {number} 0 0")

    def set_dcmi_watts(self, watts: int) -> None:
        """The DCMI reading (plug-in only); the power sensor follows, rounded to its M."""
        self.console.run(f"dcmi_power {BMC_ADDRESS:#04x} {watts}")

    def reset(self) -> None:
        """Every sensor (and DCMI's reading) back to its initial value."""
        for sensor in SENSORS:
            if sensor.unit:
                self.console.run(
                    f"sensor_set_value {BMC_ADDRESS:#04x} 0 {sensor.number} {sensor.raw} 0"
                )
            else:
                for number in sensor.names:
                    self.supply_present_only(number)
        if self.dcmi:
            self.set_dcmi_watts(initial_raw(POWER) * POWER_M)


def _udp_port() -> int:
    return free_port(kind=socket.SOCK_DGRAM)


def _write_files(root: Path, udp_port: int, console_port: int, plugin: Path | None) -> None:
    (root / "lan.conf").write_text(lan_conf("bmc1", udp_port, console_port, plugin))
    (root / "bmc1.emu").write_text(emu_source())
    (root / "bmc1.sdrs").write_text(sdr_source())
    subprocess.run(
        ["sdrcomp", "-o", str(root / "sdr.20.main"), str(root / "bmc1.sdrs")],
        check=True,
        capture_output=True,
        timeout=60,
    )
    state = root / "state" / "ipmi_sim" / "bmc1"
    state.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "sdr.20.main", state / "sdr.20.main")


def _udp_bound(port: int) -> bool:
    """Whether something holds UDP `port` on loopback: binding it ourselves fails."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return True
    return False


def _wait_until_ready(
    process: subprocess.Popen[bytes], udp_port: int, console_port: int, log: Path
) -> Console:
    """The console once it accepts and the LAN channel once it is bound (the console
    comes up first)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    console: Console | None = None
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"ipmi_sim exited with {process.returncode}: {log.read_text()}")
        with contextlib.suppress(OSError):
            console = console or Console(console_port)
        if console is not None and _udp_bound(udp_port):
            return console
        if time.monotonic() > deadline:
            if console is not None:
                console.close()
            raise RuntimeError(f"ipmi_sim not ready after {READY_TIMEOUT_S:g}s: {log.read_text()}")
        time.sleep(0.02)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM by pid (it takes 1-2 s to exit), then SIGKILL after the grace period."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_GRACE_S)


@contextlib.contextmanager
def running_ipmi_sim(root: Path, plugin: Path | None = None) -> Iterator[IpmiSim]:
    """An ipmi_sim in `root` for the duration of the block, stopped by pid afterwards."""
    udp_port, console_port = _udp_port(), free_port()
    _write_files(root, udp_port, console_port, plugin)
    log = root / "sim.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            ["ipmi_sim", "-c", "lan.conf", "-f", "bmc1.emu", "-s", str(root / "state"), "-n"],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            # Python ignores SIGPIPE and the child keeps that: a console client that
            # closes before reading the reply would kill ipmi_sim otherwise
            restore_signals=False,
            env={**os.environ, "T": str(root)},
        )
    try:
        console = _wait_until_ready(process, udp_port, console_port, log)
        try:
            yield IpmiSim(process, udp_port, console, dcmi=plugin is not None)
        finally:
            console.close()
    finally:
        stop(process)
