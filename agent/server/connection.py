"""One client connection: its state, its buffers and its non-blocking socket calls.

All methods run on the server's loop thread and never block: each returns what it could
do now, and the loop waits on the selector for the rest.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import selectors
import socket
import ssl
import struct
import termios
from collections import deque
from typing import TYPE_CHECKING

from nvwatch.agent.server.request import Request

if TYPE_CHECKING:
    from nvwatch.agent.server.deferred import Deferred

_READ_CHUNK = 64 * 1024
# TLS: one record per send, so a send retried after SSLWantWriteError is the same buffer
# and length, as OpenSSL requires
_TLS_SEND = 16 * 1024
_TLS_HANDSHAKE = 0x16  # first byte of a TLS record carrying a ClientHello
_INT_ZERO = struct.pack("i", 0)
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class State(enum.Enum):
    DETECT = "detect"  # TLS port: waiting for the first bytes, to tell TLS from plain HTTP
    HANDSHAKE = "handshake"  # TLS handshake in progress
    READ = "read"  # waiting for (the rest of) a request head
    AUTH = "auth"  # a bcrypt worker is checking this request's credentials
    WORKER = "worker"  # a worker thread is producing this request's response (deferred.py)
    WRITE = "write"  # a response is going out
    LINGER = "linger"  # error reply sent, write side shut: dropping what still arrives
    # done with, but the kernel still holds response bytes the client has not acknowledged:
    # closed once they are, reset at the write deadline (loop.py says why)
    FLUSH = "flush"


class Connection:
    __slots__ = (
        "close_after",
        "deadline",
        "deferred",
        "discarded",
        "drain",
        "eof",
        "events",
        "inbuf",
        "keep_alive",
        "out",
        "peer",
        "request",
        "sock",
        "state",
        "timeout_reason",
        "tls",
        "trusted",
        "write_deadline",
    )

    def __init__(self, sock: socket.socket, peer: str, state: State, deadline: float) -> None:
        self.sock = sock
        self.peer = peer  # the client's address, for per-client budgets
        self.state = state
        self.deadline = deadline
        # what to count when the deadline passes; None: a quiet close (idle keep-alive)
        self.timeout_reason: str | None = "header_timeout"
        self.inbuf = bytearray()
        self.out: deque[memoryview] = deque()
        self.close_after = False
        # after the reply, read what the client may still send before closing (see _linger)
        self.drain = False
        self.keep_alive = True
        self.request: Request | None = None  # the request a bcrypt worker is checking
        self.deferred: Deferred | None = None  # the response a worker is producing
        self.events = 0  # selector interest currently registered; 0: not registered
        self.discarded = 0
        self.eof = False  # the client has finished sending (half-close or gone)
        self.tls = False
        # a request on this connection passed basic auth: its events are handled first
        self.trusted = False
        # when the last response must have been read by the client (monotonic seconds)
        self.write_deadline = 0.0

    def wanted_events(self) -> int:
        if self.state is State.WRITE:
            return selectors.EVENT_WRITE
        if self.state in (State.AUTH, State.WORKER, State.FLUSH):
            return 0
        return selectors.EVENT_READ

    # --- reading --------------------------------------------------------------------------

    def receive(self, cap: int) -> bool:
        """Read what has arrived into `inbuf`, up to `cap` bytes held.

        False when the connection failed; at the end of the client's stream `eof` is set
        and True returned, so requests it sent before half-closing are still answered.
        """
        while len(self.inbuf) < cap:
            try:
                data = self.sock.recv(min(_READ_CHUNK, cap - len(self.inbuf)))
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return True
            except OSError:  # ssl.SSLError included: a broken TLS stream is a gone peer
                return False
            if not data:
                self.eof = True
                return True
            self.inbuf += data
        return True

    def first_byte(self) -> int | None:
        """The first byte the client sent, without consuming it; None: nothing yet.

        Raises ConnectionError when the client closed before sending anything.
        """
        try:
            data = self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return None
        if not data:
            raise ConnectionError("closed before sending")
        return data[0]

    def looks_like_tls(self, first: int) -> bool:
        return first == _TLS_HANDSHAKE

    def discard(self, limit: int) -> bool:
        """Drop what arrived (raw bytes, below TLS); False: peer done or `limit` reached."""
        while self.discarded < limit:
            try:
                data = socket.socket.recv(self.sock, _READ_CHUNK)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            self.discarded += len(data)
        return False

    # --- TLS --------------------------------------------------------------------------------

    def handshake_step(self) -> int:
        """Advance the handshake: 0 when done, else the selector event it waits for.

        Raises ssl.SSLError or OSError when the handshake fails.
        """
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            return selectors.EVENT_READ
        except ssl.SSLWantWriteError:
            return selectors.EVENT_WRITE
        return 0

    # --- writing ----------------------------------------------------------------------------

    def queue(self, chunks: list[bytes]) -> None:
        self.out.extend(memoryview(chunk) for chunk in chunks)

    def flush(self) -> bool:
        """Send what the socket takes now; True when nothing is left. OSError: peer gone."""
        while self.out:
            chunk = self.out[0]
            piece = chunk[:_TLS_SEND] if self.tls else chunk
            try:
                sent = self.sock.send(piece)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return False
            if sent >= len(chunk):
                self.out.popleft()
            else:
                self.out[0] = chunk[sent:]
        return True

    def send_now(self, data: bytes) -> None:
        """One best-effort send of a short reply on a connection about to close."""
        send_now(self.sock, data)

    def shut_write(self) -> None:
        """End our side: TLS close_notify if possible, then FIN; reading stays open."""
        if isinstance(self.sock, ssl.SSLSocket):
            with contextlib.suppress(OSError, ValueError):
                self.sock.unwrap()
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self.sock, socket.SHUT_WR)

    def unacknowledged(self) -> int:
        """Bytes in the kernel's send queue the client has not acknowledged (SIOCOUTQ).

        A send "completes" once the kernel has the bytes: a 250 KB body fits in the send
        buffer, so only this tells whether the client is reading.
        """
        try:
            raw = fcntl.ioctl(self.sock.fileno(), termios.TIOCOUTQ, _INT_ZERO)
        except (OSError, ValueError):  # closed, or not a TCP socket
            return 0
        return int(struct.unpack("i", raw)[0])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def abort(self) -> None:
        """Close with a reset: the kernel drops the unsent bytes now instead of keeping an
        orphaned socket retrying them for minutes."""
        with contextlib.suppress(OSError):
            socket.socket.setsockopt(self.sock, socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self.close()


def send_now(sock: socket.socket, data: bytes) -> None:
    """One best-effort send below any TLS layer; a client that cannot take it loses it."""
    with contextlib.suppress(OSError):
        socket.socket.send(sock, data)
