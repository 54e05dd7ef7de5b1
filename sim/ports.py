"""Picking a free TCP port for a server started by tests, benchmarks or the simulated stack.

One helper so every caller shares the same trade-off (stated below) instead of a copy each.
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK, kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    """A TCP port (or, with kind=SOCK_DGRAM, a UDP port: an IPMI BMC's) on `host` (an IPv4
    or IPv6 address) that nothing was listening on a moment ago.

    The port is bound to 0 (the kernel picks) and released at once, so another process
    could take it before the caller's server binds it. That race is accepted: the callers
    start servers in a separate process (prometheus, node_exporter, `nvwatch serve`) that
    must be told a port on its command line, and they fail loudly when the bind fails.
    A server started in this process should bind port 0 itself and read the port back.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, kind) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
