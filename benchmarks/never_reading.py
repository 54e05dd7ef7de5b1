"""Clients that ask for /metrics and never read the answer: how long the agent keeps them.

    python -m benchmarks.never_reading [--profile dgx-h100] [--clients 2000]

Starts `nvwatch serve --simulate=<profile>` in its own process and opens `--clients`
connections, each with a small receive buffer, each sending one GET /metrics (half
keep-alive, half `Connection: close`, no gzip: the ~250 KB body) and never reading. Then,
twice a second, it reads the kernel's own view of the agent's side of those connections
(/proc/net/tcp: sockets on the agent's port and the bytes queued on them, orphans
included) and the namespace's TCP memory (/proc/net/sockstat), until every one is gone or
the bound passes. Prints one JSON object. Target: every connection closed, and its queued
bytes freed, within the server's write timeout (30 s) of the last request, plus SLACK_S.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import socket
import sys
import time
from collections.abc import Collection, Iterator
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import nvwatch_command, running
from nvwatch.agent.server import ServerLimits
from nvwatch.sim.ports import free_port

PAGE = resource.getpagesize()
# states in /proc/net/tcp that hold no queued bytes: the listener, and TIME_WAIT (a
# connection the agent closed first, kept a minute by the kernel as a small stub)
_NOT_COUNTED = ("0A", "06")
# how late the last reset may come: the loop checks once per 0.25 s tick, the driver
# samples every 0.5 s, and the agent answers the last of 2,000 requests after the first
SLACK_S = 3.0


def request(keep_alive: bool) -> bytes:
    connection = "keep-alive" if keep_alive else "close"
    return f"GET /metrics HTTP/1.1\r\nHost: node\r\nConnection: {connection}\r\n\r\n".encode()


def server_side(port: int, peers: Collection[int] | None = None) -> tuple[int, int]:
    """(sockets, bytes queued to send) on local port `port`, listener and TIME_WAIT
    excluded; with `peers`, only the connections to those remote ports (the caller's
    own clients: another process may hold the same port number on another address)."""
    sockets = queued = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port != port or fields[3] in _NOT_COUNTED:
                    continue
                if peers is not None and int(fields[2].rsplit(":", 1)[1], 16) not in peers:
                    continue
                sockets += 1
                queued += int(fields[4].split(":")[0], 16)  # tx_queue
    return sockets, queued


def tcp_memory_bytes() -> int:
    """The namespace's TCP buffer memory in bytes (/proc/net/sockstat 'mem', in pages)."""
    with open("/proc/net/sockstat") as stat:
        for line in stat:
            if line.startswith("TCP:"):
                parts = line.split()
                return int(parts[parts.index("mem") + 1]) * PAGE
    return 0


@contextlib.contextmanager
def never_reading(port: int, count: int) -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    try:
        for index in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            # before connect, so the window it advertises stays small
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(10)
            sock.connect(("127.0.0.1", port))
            sock.sendall(request(keep_alive=index % 2 == 0))
        yield held
    finally:
        for sock in held:
            sock.close()


def measure(profile: str, clients: int, bound_s: float) -> dict[str, object]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, clients + 256)), hard))
    port = free_port()
    argv = [*nvwatch_command(), "serve", f"--simulate={profile}", f"--listen=127.0.0.1:{port}"]
    write_timeout = ServerLimits().write_timeout_s
    with running(argv, f"http://127.0.0.1:{port}/healthz"):
        baseline_mem = tcp_memory_bytes()
        with never_reading(port, clients):
            opened = time.monotonic()
            samples = []
            peak_queued = peak_mem = 0
            while time.monotonic() - opened < bound_s:
                sockets, queued = server_side(port)
                memory = tcp_memory_bytes() - baseline_mem
                peak_queued, peak_mem = max(peak_queued, queued), max(peak_mem, memory)
                samples.append((round(time.monotonic() - opened, 1), sockets, queued))
                if sockets == 0 and samples[-1][0] > 1.0:
                    break
                time.sleep(0.5)
            closed_after = samples[-1][0] if samples[-1][1] == 0 else None
    step = max(1, len(samples) // 12)
    return {
        "profile": profile,
        "clients": clients,
        "write_timeout_s": write_timeout,
        "all_closed_after_s": closed_after,
        "peak_server_bytes_queued_mib": round(peak_queued / 2**20, 1),
        "peak_tcp_memory_mib": round(peak_mem / 2**20, 1),
        # a dozen of the samples: seconds -> [server-side sockets, bytes queued on them]
        "server_sockets_at": {f"{t:g}s": [n, q] for t, n, q in samples[::step]},
        "pass": closed_after is not None and closed_after <= write_timeout + SLACK_S,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--bound", type=float, default=120.0, help="seconds to watch at most")
    args = parser.parse_args()
    print(json.dumps(measure(args.profile, args.clients, args.bound), indent=2))


if __name__ == "__main__":
    main()
