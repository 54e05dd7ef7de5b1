"""The server's event loop: one thread, a selector, every connection's state machine.

Why not a thread per connection: a thread costs a stack and a scheduler slot for as long
as its client keeps the connection open, so 1,000 slowloris connections held 1,008
threads and 25 MB that never came back. Here an open connection costs a socket and a
small object; what bounds the work is the request deadline, the connection limit and the
bcrypt budget (agent/server/limits.py), and a scrape only copies cached bytes, so one
thread serves every client without waiting on any of them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import math
import selectors
import socket
import ssl
import time

from nvwatch.agent.server.admission import CHECKING, Admission, answer, trusted_first
from nvwatch.agent.server.auth import BasicAuth, BcryptPool
from nvwatch.agent.server.connection import Connection, State
from nvwatch.agent.server.deferred import Deferred, DeferredReplies
from nvwatch.agent.server.limits import HttpStats, ServerLimits
from nvwatch.agent.server.request import HttpError, Request, take_request
from nvwatch.agent.server.responses import Response, encode, refusal
from nvwatch.agent.server.routes import ALLOWED_METHODS, METHOD_NOT_ALLOWED, Router
from nvwatch.agent.server.table import ConnectionTable
from nvwatch.agent.webconfig import WebConfig
from nvwatch.agent.webconfig_tls import san_allowed

log = logging.getLogger(__name__)

_TICK_S = 0.25  # how often deadlines are checked; they are enforced to within this
_ACCEPT_BATCH = 16  # connections accepted per wake-up before other clients get a turn
_ACCEPT_PAUSE_S = 0.1  # after accept() fails (no descriptors left), before trying again
_LISTENER, _WAKE = object(), object()
_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\nContent-Length: 16\r\n"
    b"Connection: close\r\n\r\nrequest timeout\n"
)
_REFUSING_MAX = 64  # refusals past the connection limit that may linger at once
CONNECTION_LIMIT = refusal(503, "too many connections", "connection_limit", (("Retry-After", "1"),))
# what Go's server answers on its TLS port to a client speaking plain HTTP
HTTP_ON_TLS = refusal(400, "Client sent an HTTP request to an HTTPS server.", "http_on_tls_port")


class EventLoop:
    def __init__(
        self,
        listener: socket.socket,
        router: Router,
        web: WebConfig | None,
        pool: tuple[BasicAuth, BcryptPool] | None,
        limits: ServerLimits,
        stats: HttpStats,
    ) -> None:
        self._listener = listener
        self._router, self._limits, self._stats = router, limits, stats
        self._tls = web.tls_context if web else None
        self._sans = web.client_allowed_sans if web else frozenset()
        self._extra = web.headers if web else ()
        self._admission = Admission(web, pool, limits, self._wake)
        self._deferred = DeferredReplies(self._wake)
        self._limit = stats.connection_limit
        self._cap = limits.max_head_bytes + 1  # bytes read ahead: a head over the limit is seen
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._conns = ConnectionTable(self._selector, stats)
        self._stopping = False
        self._accept_resume = 0.0

    # --- lifecycle (stop and wake are called from other threads) ---------------------------

    def run(self) -> None:
        for sock, data in ((self._listener, _LISTENER), (self._wake_r, _WAKE)):
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, data)
        self._wake_w.setblocking(False)
        next_sweep = 0.0
        try:
            while not self._stopping:
                # with nothing to time out, sleep until something happens (a simulated
                # fleet runs a hundred idle servers in one process)
                timeout = _TICK_S if self._conns or self._accept_resume else None
                for data in trusted_first(self._selector.select(timeout)):
                    self._guarded(data)
                self._finish_checks()
                now = time.monotonic()
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + _TICK_S
        finally:
            self.close()

    def stop(self) -> None:
        self._stopping = True
        self._wake()

    def close(self) -> None:
        """Fail every open connection at once, as a killed process would, and unbind."""
        self._conns.close_all()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _guarded(self, data: object) -> None:
        """Handle one ready socket; a bug met serving one connection closes that one.

        Anything else (the listener, the wake-up pipe, the selector) escapes: the loop
        ends and the thread's death ends the process (agent/threads.py), because a loop
        that cannot accept must not linger with its port closed.
        """
        try:
            self._dispatch(data)
        except Exception:
            if not isinstance(data, Connection):
                raise
            self._internal_error(data)

    def _internal_error(self, conn: Connection) -> None:
        log.exception("internal error serving %s; closing that connection", conn.peer)
        self._stats.refuse("internal_error")
        self._conns.abort(conn)

    def _dispatch(self, data: object) -> None:
        if data is _LISTENER:
            self._accept()
        elif data is _WAKE:
            with contextlib.suppress(OSError):
                self._wake_r.recv(4096)
        elif isinstance(data, Connection) and data in self._conns:
            self._on_event(data)

    # --- accepting ---------------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, address = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.ECONNABORTED:
                    continue
                # EMFILE and kin: the listener stays readable, so stop watching it a moment
                # rather than spin on it
                self._stats.refuse("accept_failed")
                self._selector.unregister(self._listener)
                self._accept_resume = time.monotonic() + _ACCEPT_PAUSE_S
                return
            sock.setblocking(False)
            if len(self._conns) >= self._limit and not self._conns.evict():
                self._refuse(sock, str(address[0]))
            else:
                self._open(sock, str(address[0]))

    def _refuse(self, sock: socket.socket, peer: str) -> None:
        """503 and close, past the limit. A few such replies at a time linger like any
        error reply, so the client reads the 503 instead of a reset; beyond those, or on
        the TLS port (no handshake is spent on a refusal), the socket is just closed."""
        if self._tls is None and len(self._conns) < self._limit + _REFUSING_MAX:
            conn = self._open(sock, peer)
            self._conns.served(conn)
            self._reply(conn, CONNECTION_LIMIT)
            return
        self._stats.refuse("connection_limit")
        sock.close()

    def _open(self, sock: socket.socket, peer: str) -> Connection:
        with contextlib.suppress(OSError):
            # responses are written whole; Nagle would hold their last packet ~40 ms
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state = State.DETECT if self._tls else State.READ
        conn = Connection(sock, peer, state, time.monotonic() + self._limits.header_timeout_s)
        self._conns.add(conn)
        return conn

    # --- events --------------------------------------------------------------------------------

    def _on_event(self, conn: Connection) -> None:
        state = conn.state
        if state is State.DETECT:
            self._detect(conn)
        elif state is State.HANDSHAKE:
            self._handshake(conn)
        elif state is State.READ:
            if conn.receive(self._cap):
                self._advance(conn)
            else:
                self._close(conn)
        elif state is State.WRITE:
            self._write(conn)
            if conn.state is State.READ:
                self._advance(conn)
        elif state is State.LINGER and not conn.discard(self._limits.linger_bytes):
            self._close(conn)

    def _detect(self, conn: Connection) -> None:
        try:
            first = conn.first_byte()
        except OSError:  # ConnectionError included: closed before sending anything
            self._close(conn)
            return
        if first is None:
            return
        if not conn.looks_like_tls(first):
            conn.state = State.READ
            conn.receive(self._cap)
            self._reply(conn, HTTP_ON_TLS)
            return
        assert self._tls is not None
        self._conns.unwatch(conn)
        # handshake on this thread, step by step as bytes arrive, under the head deadline
        try:
            conn.sock = self._tls.wrap_socket(
                conn.sock, server_side=True, do_handshake_on_connect=False
            )
        except OSError:  # the client already went away
            self._close(conn)
            return
        conn.tls = True
        conn.state = State.HANDSHAKE
        self._handshake(conn)

    def _handshake(self, conn: Connection) -> None:
        try:
            wanted = conn.handshake_step()
        except OSError as exc:  # ssl.SSLError included
            log.debug("TLS handshake failed: %s", exc)
            self._stats.refuse("tls_handshake")
            self._close(conn)
            return
        if wanted:
            self._watch(conn, wanted)
            return
        if not self._san_allowed(conn):
            self._stats.refuse("client_cert_san")
            self._close(conn)
            return
        conn.state = State.READ
        # the request may have come with the last handshake flight
        if conn.receive(self._cap):
            self._advance(conn)
        else:
            self._close(conn)

    def _san_allowed(self, conn: Connection) -> bool:
        assert isinstance(conn.sock, ssl.SSLSocket)
        return not self._sans or san_allowed(conn.sock.getpeercert(), self._sans)

    # --- requests ------------------------------------------------------------------------------

    def _advance(self, conn: Connection) -> None:
        """Serve the requests conn's buffer holds, until one waits on the network or bcrypt."""
        while conn.state is State.READ:
            if conn.tls and conn.sock.pending() and not conn.receive(self._cap):  # type: ignore[attr-defined]
                self._close(conn)
                return
            try:
                request = take_request(conn.inbuf, self._limits)
            except HttpError as exc:
                self._reply(conn, refusal(exc.status, exc.message, exc.reason))
                break
            if request is None:
                if conn.eof:
                    self._close(conn)
                    return
                if conn.inbuf and conn.timeout_reason is None:
                    # the first bytes of the next request on a kept-alive connection
                    self._set_deadline(conn, self._limits.header_timeout_s, "header_timeout")
                break
            self._conns.served(conn)
            self._on_request(conn, request)
        if conn in self._conns:
            self._watch(conn)

    def _on_request(self, conn: Connection, request: Request) -> None:
        conn.keep_alive = request.keep_alive and not request.has_body and not conn.eof
        if request.method not in ALLOWED_METHODS:
            self._reply(conn, METHOD_NOT_ALLOWED, request)
            return
        verdict = self._admission.decide(conn, request)
        if verdict is CHECKING:
            conn.state, conn.request = State.AUTH, request
            conn.deadline, conn.timeout_reason = math.inf, None  # a worker always answers
        else:
            self._respond(conn, verdict, request)

    def _respond(self, conn: Connection, verdict: bool | Response, request: Request) -> None:
        """Reply now, or wait for the worker producing the response (a BMC read)."""
        response = answer(verdict, functools.partial(self._router.respond, request))
        if isinstance(response, Deferred):
            self._deferred.wait(conn, request, response)
        else:
            self._reply(conn, response, request)

    def _finish_checks(self) -> None:
        """Answer the requests whose bcrypt check or response worker has finished."""
        for conn, ok in (*self._admission.finished(), *self._deferred.finished()):
            try:
                self._finish_check(conn, ok)
            except Exception:
                self._internal_error(conn)

    def _finish_check(self, conn: Connection, ok: bool | Response) -> None:
        request, conn.request = conn.request, None
        if conn not in self._conns or request is None:
            return
        self._respond(conn, ok, request)
        if conn.state is State.READ:
            self._advance(conn)  # requests pipelined behind the checked one
        elif conn in self._conns:
            self._watch(conn)

    # --- responses -----------------------------------------------------------------------------

    def _reply(self, conn: Connection, response: Response, request: Request | None = None) -> None:
        if response.refused:
            self._stats.refuse(response.refused)
        keep_alive = (
            request is not None and conn.keep_alive and not response.close and response.status < 400
        )
        head_only = request is not None and request.method == "HEAD"
        conn.queue(encode(response, head_only=head_only, keep_alive=keep_alive, extra=self._extra))
        conn.close_after = not keep_alive
        # unread input is possible after a refused head, a body, or pipelined requests
        conn.drain = request is None or request.has_body or bool(conn.inbuf)
        conn.state = State.WRITE
        self._set_deadline(conn, self._limits.write_timeout_s, "write_timeout")
        conn.write_deadline = conn.deadline
        self._write(conn)

    def _write(self, conn: Connection) -> None:
        try:
            done = conn.flush()
        except OSError:
            self._close(conn)
            return
        if not done:
            self._watch(conn)
        elif conn.close_after and conn.drain:
            self._linger(conn)
        elif conn.close_after:
            conn.shut_write()  # all the client sent was read: a close cannot reset
            self._close(conn)
        else:
            conn.state = State.READ
            self._set_deadline(conn, self._limits.idle_timeout_s, None)
            self._conns.wait_again(conn)

    def _linger(self, conn: Connection) -> None:
        # Closing with unread input makes the kernel send a reset, which can destroy the
        # reply before the client reads it: shut our side, drop input for a moment, close.
        conn.shut_write()
        conn.state = State.LINGER
        self._conns.served(conn)
        self._set_deadline(conn, self._limits.linger_s, None)
        if conn.discard(self._limits.linger_bytes):
            self._watch(conn)
        else:
            self._close(conn)

    # --- bookkeeping ---------------------------------------------------------------------------

    def _set_deadline(self, conn: Connection, seconds: float, reason: str | None) -> None:
        conn.deadline, conn.timeout_reason = time.monotonic() + seconds, reason

    def _sweep(self, now: float) -> None:
        for conn in self._conns.expired(now):
            if conn.state is State.WORKER:
                self._finish_check(conn, self._deferred.late(conn))
                continue
            if conn.timeout_reason is not None:
                self._stats.refuse(conn.timeout_reason)
            if conn.timeout_reason == "write_timeout":
                self._conns.abort(conn)
                continue
            if conn.timeout_reason == "header_timeout" and conn.inbuf and not conn.tls:
                conn.write_deadline = now + self._limits.linger_s
                conn.send_now(_TIMEOUT)
            self._close(conn)
        self._conns.sweep_unacknowledged(now)
        if self._accept_resume and now >= self._accept_resume:
            self._accept_resume = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, _LISTENER)

    def _watch(self, conn: Connection, events: int | None = None) -> None:
        self._conns.watch(conn, events)

    def _close(self, conn: Connection) -> None:
        self._conns.close(conn)
