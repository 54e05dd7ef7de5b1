"""`nvwatch serve --bmc-config --bmc-allow`: a target off the list is answered 403 and
sent no IPMI packet, counted by UDP sockets standing where BMCs would; a listed one
(by address, or by a file_sd file `nvwatch inventory` writes) is read as before.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvwatch.agent.inventory import write_json_atomic
from nvwatch.agent.inventory_bmc import bmc_target_group
from nvwatch.agent.server.probe_allow import RECHECK_S
from nvwatch.sim.ports import LOOPBACK, free_port
from tests.processes import stop

TIMEOUT_MS = 500
CONFIG = f"modules:\n  default:\n    user: admin\n    pass: secret\n    timeout: {TIMEOUT_MS}\n"
ALLOWED = "127.0.0.61"  # on the list by address
LISTED = "127.0.0.62"  # in the file_sd file
REFUSED = "127.0.0.63"  # on no list
NODE = {"cluster": "c1", "rack": "r1", "node_class": "gpu", "instance": "node-1"}


class Bmc:
    """A UDP socket where a BMC would be: it takes datagrams, answers none, counts them."""

    def __init__(self, host: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.setblocking(False)
        self.target = f"{host}:{self.sock.getsockname()[1]}"
        self.received = 0

    def count(self, wait_s: float = 0.0) -> int:
        """Datagrams received so far, waiting up to `wait_s` for a first one."""
        deadline = time.monotonic() + wait_s
        while True:
            with contextlib.suppress(BlockingIOError):
                while self.sock.recv(65536):
                    self.received += 1
            left = deadline - time.monotonic()
            if self.received or left <= 0:
                return self.received
            select.select([self.sock], [], [], left)


@pytest.fixture
def bmcs() -> Iterator[dict[str, Bmc]]:
    made = {host: Bmc(host) for host in (ALLOWED, LISTED, REFUSED, LOOPBACK)}
    try:
        yield made
    finally:
        for bmc in made.values():
            bmc.sock.close()


def _serve(directory: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    (directory / "ipmi.yml").write_text(CONFIG)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "nvwatch.agent.cli", "serve", "--sources=host",
         f"--listen={LOOPBACK}:{port}", f"--bmc-config={directory / 'ipmi.yml'}",
         "--bmc-cache=0.1s", *args],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "NVWATCH_LOG_FORMAT": "text"},
    )  # fmt: skip
    return process, port


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}{path}", timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _wait_serving(process: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()  # type: ignore[union-attr]
        with contextlib.suppress(OSError):
            if _get(port, "/healthz")[0] == 200:
                return
        time.sleep(0.1)
    raise TimeoutError("nvwatch serve did not come up")


def _probe(port: int, target: str) -> tuple[int, str]:
    return _get(port, f"/probe?target={target}&module=default")


def test_a_target_off_the_list_is_403_and_sent_nothing(
    tmp_path: Path, bmcs: dict[str, Bmc]
) -> None:
    targets = tmp_path / "targets"
    write_json_atomic(targets / "bmc-gpu.json", [bmc_target_group(bmcs[LISTED].target, NODE)])
    # 127.0.0.1 is allowed by address: `localhost`, which resolves to it, is still not
    allow = f"{ALLOWED},{LOOPBACK},{targets}/bmc-*.json"
    process, port = _serve(tmp_path, f"--bmc-allow={allow}")
    try:
        _wait_serving(process, port)
        refused = _probe(port, bmcs[REFUSED].target)
        by_name = _probe(port, f"localhost:{bmcs[LOOPBACK].target.rsplit(':', 1)[1]}")
        # the listed ones are read: each gets its packets, and is down at the timeout
        for host in (ALLOWED, LISTED):
            status, body = _probe(port, bmcs[host].target)
            assert status == 200 and "nvwatch_bmc_up 0" in body, body
            assert bmcs[host].count(wait_s=5.0) >= 1, host
        # a BMC added by an inventory run is read without a restart
        added = Bmc("127.0.0.64")
        try:
            groups = [bmc_target_group(b, NODE) for b in (bmcs[LISTED].target, added.target)]
            write_json_atomic(targets / "bmc-gpu.json", groups)
            deadline = time.monotonic() + RECHECK_S + 10
            while _probe(port, added.target)[0] == 403 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert added.count(wait_s=5.0) >= 1
        finally:
            added.sock.close()
    finally:
        stop(process, 10)
    assert refused == (403, f"target {REFUSED} is not on --bmc-allow: nothing sent\n")
    assert by_name == (403, "target localhost is not on --bmc-allow: nothing sent\n")
    # sent after the listed targets got theirs: nothing came to the others
    assert bmcs[REFUSED].count() == 0 and bmcs[LOOPBACK].count() == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--bmc-allow=10.0.0.0/16,10.0.0.5:623"], "--bmc-allow: '10.0.0.5:623' is not one of"),
        (["--bmc-allow=10.0.0.5/16"], "--bmc-allow: '10.0.0.5/16': 10.0.0.5/16 has host bits"),
        (["--bmc-allow=missing/bmc-gpu.json"], "cannot read --bmc-allow file missing/bmc-gpu"),
    ],
)
def test_a_bad_allowlist_is_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    process, _ = _serve(tmp_path, *args)
    try:
        _, err = process.communicate(timeout=60)
    finally:
        stop(process, 10)
    assert process.returncode == 2
    assert err.count("\n") == 1 and says in err, err


def test_an_allowlist_without_a_bmc_config_is_one_line_and_exit_2() -> None:
    process = subprocess.run(
        [sys.executable, "-m", "nvwatch.agent.cli", "serve", "--sources=host",
         f"--listen={LOOPBACK}:{free_port()}"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "NVWATCH_BMC_ALLOW": "10.0.0.0/16"},
    )  # fmt: skip
    assert process.returncode == 2
    assert process.stderr == (
        "nvwatch: error: --bmc-allow lists the targets /probe may read: give --bmc-config\n"
    )
