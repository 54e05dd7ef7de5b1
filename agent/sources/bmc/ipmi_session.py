"""One IPMI 2.0 (RMCP+) session with a BMC, bounded by a deadline, and its failures in words.

python-ipmi's native `rmcpplus` interface does the protocol (RAKP, HMAC-SHA1 integrity,
AES-CBC-128: cipher suite 3, the one ipmitool's lanplus and FreeIPMI pick by default).
What it does not do is bound a read as a whole: it waits per request, retries, and
during session set-up keeps reading while garbage arrives. So each session's socket
here is wrapped: every wait ends at the read's deadline (the module's timeout from the
start), whatever python-ipmi's own loops do, and a refused port is remembered so that
"nothing listens there" is not reported as silence.

A session per read, closed at its end, never shared: a read runs on one worker thread,
several targets at once, and python-ipmi's connection objects hold per-session state
(sequence numbers, keys) with no locking of their own. Keeping sessions open between
scrapes would save about a millisecond per read (a quarter of it against ipmi_sim) at
the price of a keep-alive thread per BMC and one of the few session slots a BMC has
(often 4 to 10, shared with operators' ipmitool) held for good.
"""

from __future__ import annotations

import contextlib
import math
import socket
import struct
import time
from typing import Any

import pyipmi
import pyipmi.interfaces
from pyipmi.errors import (
    AuthenticationError,
    CompletionCodeError,
    DecodingError,
    EncodingError,
    IpmiConnectionError,
    IpmiLongPasswordError,
    IpmiTimeoutError,
    MessageStatusCodeError,
    NotSupportedError,
    RetryError,
)
from pyipmi.interfaces.rmcpplus import RmcpPlus

from nvwatch.agent.sources.bmc.reading import BmcError, Module, Target

CIPHER_SUITE = 3  # RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128
BMC_IPMB_ADDRESS = 0x20  # the BMC's own address: the sensors it owns are the ones read
# One request's wait: FreeIPMI's retransmission timeout is 1 s; a BMC answers in
# milliseconds, so a request unanswered after a second is lost, and sent again.
REQUEST_TIMEOUT_S = 1.0
# Re-sends of a lost request: as many as the module's timeout leaves room for, as
# FreeIPMI retransmits until its session timeout. A fixed count ended a silent BMC's
# read after 4 s whatever the module's `timeout` said.
REQUEST_RETRIES_AT_LEAST = 3
_PRIVILEGES = {"user": "user", "operator": "operator", "admin": "administrator"}
# RMCP+ status codes that mean "this user, with this password or role, may not log in"
_REFUSED_USER = {0x0D: "unknown user", 0x0C: "invalid user name", 0x0F: "wrong password"}
_REFUSED_ROLE = (0x09, 0x0A, 0x0B)
# what a reply python-ipmi cannot parse raises, besides its own DecodingError
MALFORMED_REPLY = (DecodingError, EncodingError, struct.error, ValueError, IndexError, KeyError)


class _DeadlineSocket:
    """The UDP socket python-ipmi uses (send, recv, settimeout, connect, close), with
    every wait cut at the read's deadline."""

    def __init__(self, family: int, deadline: float) -> None:
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        self._deadline = deadline
        self._timeout = REQUEST_TIMEOUT_S
        self.refused = False  # an ICMP port unreachable came back: nothing listens
        self.timed_out = False  # a wait ended with nothing received

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = REQUEST_TIMEOUT_S if timeout is None else timeout

    def connect(self, address: tuple[Any, ...]) -> None:
        self._sock.connect(address)

    def send(self, data: bytes) -> int:
        return self._sock.send(data)

    def recv(self, size: int) -> bytes:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            self.timed_out = True
            raise TimeoutError("the read's deadline passed")
        self._sock.settimeout(min(self._timeout, remaining))
        try:
            return self._sock.recv(size)
        except ConnectionRefusedError:
            self.refused = True
            raise
        except TimeoutError:
            self.timed_out = True
            raise

    def close(self) -> None:
        self._sock.close()


def _retries_until(deadline: float) -> int:
    """Re-sends that fit before `deadline` at one REQUEST_TIMEOUT_S wait each (the
    deadline socket cuts the last wait short)."""
    left = max(0.0, deadline - time.monotonic())
    return max(REQUEST_RETRIES_AT_LEAST, math.ceil(left / REQUEST_TIMEOUT_S))


class _BoundedRmcpPlus(RmcpPlus):  # type: ignore[misc]
    """python-ipmi's RMCP+ interface on a deadline socket of the address's family."""

    def __init__(self, family: int, deadline: float) -> None:
        super().__init__(
            cipher_suite=CIPHER_SUITE,
            keep_alive_interval=0,
            max_retries=_retries_until(deadline),
        )
        self._family = family
        self._deadline = deadline
        self.deadline_socket: _DeadlineSocket | None = None

    def open(self) -> None:
        self.deadline_socket = self._sock = _DeadlineSocket(self._family, self._deadline)
        self.set_timeout(REQUEST_TIMEOUT_S)

    def ping(self) -> None:
        """The presence ping, sent again while unanswered (UDP loses packets) and time is
        left; a refused port fails at once."""
        retries = _retries_until(self._deadline)
        for attempt in range(retries + 1):
            try:
                super().ping()
                return
            except IpmiConnectionError:
                last = attempt == retries or time.monotonic() >= self._deadline
                if last or (self.deadline_socket and self.deadline_socket.refused):
                    raise


class Session:
    """An open RMCP+ session: `ipmi` (python-ipmi's connection) for the requests."""

    def __init__(self, target: Target, module: Module, deadline: float) -> None:
        self.target = target
        self.deadline = deadline
        family, address = _resolve(target)
        self._interface = _BoundedRmcpPlus(family, deadline)
        self.ipmi: Any = pyipmi.create_connection(self._interface)
        self.ipmi.session.set_session_type_rmcp(address, port=target.port)
        self.ipmi.session.set_auth_type_user(module.user, module.password)
        self.ipmi.session.set_priv_level(_privilege(module))
        self.ipmi.target = pyipmi.Target(ipmb_address=BMC_IPMB_ADDRESS)

    def open(self) -> None:
        self.ipmi.open()

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    @property
    def refused(self) -> bool:
        sock = self._interface.deadline_socket
        return sock is not None and sock.refused

    @property
    def timed_out(self) -> bool:
        sock = self._interface.deadline_socket
        return sock is not None and sock.timed_out

    def without_retries(self) -> None:
        """Requests from now on are sent once: for an optional one (DCMI) that a BMC may
        leave unanswered, where waiting four times buys nothing."""
        self._interface.max_retries = 0

    def close(self) -> None:
        """Close Session, then the socket, whatever the first does (a BMC gone mid-read
        must not keep the socket open)."""
        try:
            # the read is done: a failed goodbye does not change its result
            with contextlib.suppress(Exception):
                if not self.expired:
                    self.ipmi.session.close()
        finally:
            self._interface.close()


def _privilege(module: Module) -> str:
    """python-ipmi's name of the module's privilege level."""
    level = _PRIVILEGES.get(module.privilege.lower())
    if level is None:
        raise BmcError(f"module {module.name}: unknown privilege {module.privilege!r}")
    return level


def _resolve(target: Target) -> tuple[int, str]:
    """(address family, numeric address) of the target: python-ipmi's socket is IPv4
    only, so the family is chosen here. A name is looked up once, by the system's
    resolver (not bounded by the module's timeout: use addresses, as the hand-over
    table's IPMI column does)."""
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError) as exc:
        raise BmcError(f"cannot resolve {target.host}: {_os_reason(exc)}") from None
    family, _, _, _, sockaddr = infos[0]
    return int(family), str(sockaddr[0])


def failure_reason(exc: BaseException, session: Session, module: Module, started: float) -> str:
    """One line saying why the read failed, for the probe's body and the log."""
    waited = f"{time.monotonic() - started:.1f} s"
    if isinstance(exc, BmcError):
        return str(exc)
    if session.refused:
        return f"connection refused: nothing listens on UDP port {session.target.port}"
    if isinstance(exc, (AuthenticationError, IpmiLongPasswordError)):
        return "authentication failed (wrong user or password?)"
    if isinstance(exc, MessageStatusCodeError):
        return _status_reason(exc, module)
    if isinstance(exc, RetryError) and not session.timed_out:
        # python-ipmi's helpers give up after answers, not silence: the BMC stayed busy
        # or kept cancelling the SDR reservation (another client walking it)
        return "the BMC kept answering busy (or cancelled the SDR reservation): gave up"
    if isinstance(exc, (TimeoutError, IpmiConnectionError, IpmiTimeoutError, RetryError)):
        return f"no answer within {waited}"
    if isinstance(exc, NotSupportedError):
        return f"not supported: {_one_line(exc)}"
    if isinstance(exc, CompletionCodeError):
        return f"the BMC refused a request: {exc.cc_desc} (completion code {exc.cc:#04x})"
    if isinstance(exc, MALFORMED_REPLY):
        return f"malformed reply: {_one_line(exc) or type(exc).__name__}"
    if isinstance(exc, OSError):
        return f"network error: {_os_reason(exc)}"
    return f"unexpected {type(exc).__name__}: {_one_line(exc)}"


def _status_reason(exc: MessageStatusCodeError, module: Module) -> str:
    if exc.msc in _REFUSED_USER:
        return f"authentication failed ({_REFUSED_USER[exc.msc]}: wrong user or password?)"
    if exc.msc in _REFUSED_ROLE:
        return f"session refused: privilege {module.privilege} is not allowed for this user"
    return f"session refused: {exc.msc_desc} (RMCP+ status {exc.msc:#04x})"


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return _one_line(exc) or type(exc).__name__


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]
