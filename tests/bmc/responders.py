"""Loopback UDP peers that are not BMCs: one that never answers, one that answers garbage.

Each runs on its own thread with a bounded loop (a stop flag checked every 50 ms, and a
cap on datagrams) and is closed when the block ends.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

from pyipmi.interfaces.rmcp import RMCP_CLASS_ASF, AsfPong, RmcpMsg

from nvwatch.agent.sources.bmc.reading import Target
from nvwatch.sim.ports import LOOPBACK

MAX_DATAGRAMS = 10_000
Answer = Callable[[bytes], bytes | None]


def silent(_request: bytes) -> bytes | None:
    """A host that takes every datagram and answers none (a BMC that hangs)."""
    return None


def garbage(request: bytes) -> bytes | None:
    """Bytes that are no RMCP message at all."""
    return b"\x13\x37 not an RMCP message " + request[:4]


def pong_then_garbage(request: bytes) -> bytes | None:
    """A valid RMCP presence pong to a ping, and garbage inside RMCP to anything else:
    the session set-up starts, and every reply after the pong is malformed."""
    if len(request) > 3 and request[3] == RMCP_CLASS_ASF:
        return bytes(RmcpMsg(RMCP_CLASS_ASF).pack(AsfPong().pack(), 0xFF))
    return b"\x06\x00\xff\x07" + b"\x00\xde\xad\xbe\xef" * 4


@contextlib.contextmanager
def responder(answer: Answer) -> Iterator[Target]:
    """A UDP socket on loopback answering each datagram with `answer`; yields its address."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((LOOPBACK, 0))
    sock.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        for _ in range(MAX_DATAGRAMS):
            if stop.is_set():
                return
            try:
                request, peer = sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            reply = answer(request)
            if reply is not None:
                sock.sendto(reply, peer)

    thread = threading.Thread(target=serve, name="udp-responder", daemon=True)
    thread.start()
    try:
        yield Target(LOOPBACK, int(sock.getsockname()[1]))
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close()
