"""A bounded soak: a simulated dgx-h100 agent under all three attacks at once.

30 s of 64 authorised scrapers (each 4 scrapes/s, as many Prometheus servers would be),
200 slowloris connections held open (reopened as the request deadline cuts them) and 10
wrong-password clients in a loop. The agent runs as `nvwatch serve` in its own process.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.client
import itertools
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import psutil

from nvwatch.sim.ports import free_port
from tests.agent.test_server_auth import _ATTACKER

SOAK_S = 30.0
INTERVAL_S = 1.0
GOOD = {"Authorization": "Basic " + base64.b64encode(b"prometheus:s3cret").decode()}
# as Prometheus asks: gzip, so 64 scrapers cost the test process little
SCRAPE = {**GOOD, "Accept-Encoding": "gzip"}
PARTIAL = b"GET /metrics HTTP/1.1\r\nHost: node\r\nX-Slow: "


@contextlib.contextmanager
def _agent(tmp_path: Path) -> Iterator[tuple[int, psutil.Process]]:
    web = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    port = free_port()
    argv = [sys.executable, "-m", "nvwatch.agent.cli", "serve", "--simulate", "dgx-h100",
            "--interval", f"{INTERVAL_S:g}s", "--listen", f"127.0.0.1:{port}",
            "--web-config", str(web)]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while _get(port, "/healthz")[0] != 200:
            assert time.monotonic() < deadline and process.poll() is None, "agent did not start"
            time.sleep(0.2)
        yield port, psutil.Process(process.pid)
    finally:
        process.terminate()
        process.wait(15)


def _get(port: int, path: str) -> tuple[int, bytes]:
    """(status, body) of one authorised GET on a fresh connection; 0 if it failed."""
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", path, headers=GOOD)
        response = connection.getresponse()
        body = response.read()
        connection.close()
        return response.status, body
    except (OSError, http.client.HTTPException):
        return 0, b""


class Soak:
    def __init__(self, port: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.scrapes: list[int] = []
        self.health: list[int] = []
        self.poll_times: set[float] = set()
        self.slowloris_opened = 0

    def scraper(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self.stop.wait(0.25):
            try:
                connection.request("GET", "/metrics", headers=SCRAPE)
                response = connection.getresponse()
                body = gzip.decompress(response.read())
                self.scrapes.append(response.status)
            except (OSError, http.client.HTTPException):
                self.scrapes.append(0)
                connection.close()
                continue
            found = re.search(rb"^nvwatch_agent_last_poll_timestamp_seconds (\S+)$", body, re.M)
            if found:
                self.poll_times.add(float(found.group(1)))

    def prober(self) -> None:
        while not self.stop.wait(0.5):
            self.health.append(_get(self.port, "/healthz")[0])

    def slowloris(self, count: int) -> None:
        held: list[socket.socket] = []
        try:
            while not self.stop.wait(0.2):
                held = [sock for sock in held if _still_open(sock)]
                while len(held) < count:
                    sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                    sock.sendall(PARTIAL)
                    held.append(sock)
                    self.slowloris_opened += 1
        finally:
            for sock in held:
                sock.close()


def _still_open(sock: socket.socket) -> bool:
    """False once the server let the connection go (a 408, or its end); then closed."""
    sock.setblocking(False)
    try:
        sock.recv(4096)
    except BlockingIOError:
        sock.setblocking(True)
        return True
    except OSError:
        pass
    sock.close()
    return False


def test_soak_under_scrapers_slowloris_and_wrong_passwords(tmp_path: Path) -> None:
    with _agent(tmp_path) as (port, agent):
        threads_before, rss_before = agent.num_threads(), agent.memory_info().rss
        soak = Soak(port)
        workers = [threading.Thread(target=soak.scraper) for _ in range(64)]
        workers.append(threading.Thread(target=soak.prober))
        workers.append(threading.Thread(target=soak.slowloris, args=(200,)))
        attacker = subprocess.Popen(
            [sys.executable, "-c", _ATTACKER, str(port), "10"], stdout=subprocess.PIPE, text=True
        )
        threads_peak, rss_peak = threads_before, rss_before
        try:
            for worker in workers:
                worker.start()
            ends = time.monotonic() + SOAK_S
            while time.monotonic() < ends:
                time.sleep(1.0)
                threads_peak = max(threads_peak, agent.num_threads())
                rss_peak = max(rss_peak, agent.memory_info().rss)
        finally:
            soak.stop.set()
            attacker.kill()
            attacker.wait(10)
            for worker in workers:
                worker.join(30)
        time.sleep(2 * INTERVAL_S)  # one more poll publishes the final counts
        status, body = _get(port, "/metrics")
    gaps = [b - a for a, b in itertools.pairwise(sorted(soak.poll_times))]
    refused = dict(re.findall(rb'refused_total\{reason="(\w+)"\} (\S+)', body))
    print(f"{len(soak.scrapes)} scrapes, {len(soak.health)} health probes, "
          f"{soak.slowloris_opened} slowloris opened; poll gap mean {statistics.mean(gaps):.2f} s, "
          f"max {max(gaps):.2f} s; threads {threads_before} -> {threads_peak}; RSS "
          f"{rss_before / 2**20:.0f} -> {rss_peak / 2**20:.0f} MiB; refused {refused}")  # fmt: skip
    assert soak.scrapes and set(soak.scrapes) == {200}, "an authorised scrape failed"
    assert soak.health and set(soak.health) == {200}, "/healthz was not 200 throughout"
    assert abs(statistics.mean(gaps) - INTERVAL_S) <= 0.2 * INTERVAL_S
    assert threads_peak == threads_before  # no thread per connection
    assert rss_peak - rss_before <= 50 * 2**20
    assert status == 200
    assert float(refused[b"header_timeout"]) > 0
    assert float(refused[b"auth_busy"]) + float(refused[b"unauthorized"]) > 0
