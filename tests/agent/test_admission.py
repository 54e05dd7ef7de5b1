"""The bcrypt admission's ranks, order and evictions, without threads or sockets' traffic.

A fake pool records what the admission hands to its worker; the test finishes those
checks itself, so every step is decided in the order written here.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from nvwatch.agent.server.admission import (
    BACK_TOO_SOON_S,
    CHECKING,
    KNOWN,
    NEW,
    SUSPECT,
    Admission,
    RecentClients,
    WaitingLine,
    client_of,
)
from nvwatch.agent.server.auth import BasicAuth, Pending
from nvwatch.agent.server.connection import Connection, State
from nvwatch.agent.server.limits import ServerLimits
from nvwatch.agent.server.request import Request
from nvwatch.agent.server.routes import AUTH_BUSY
from tests.agent.server_helpers import Certs, make_certs

# --- the waiting line ----------------------------------------------------------------------


def test_the_line_is_taken_best_rank_first_oldest_first_within_a_rank() -> None:
    line: WaitingLine[str] = WaitingLine(size=6, suspects=6)
    for item, rank in [("s1", SUSPECT), ("n1", NEW), ("k1", KNOWN), ("s2", SUSPECT),
                       ("n2", NEW), ("k2", KNOWN)]:  # fmt: skip
        assert line.add(item, rank) == (True, None)
    assert [line.take() for _ in range(7)] == ["k1", "k2", "n1", "n2", "s1", "s2", None]


def test_suspects_hold_only_their_share_even_with_places_free() -> None:
    line: WaitingLine[str] = WaitingLine(size=4, suspects=2)
    assert line.add("s1", SUSPECT) == (True, None)
    assert line.add("s2", SUSPECT) == (True, None)
    assert line.add("s3", SUSPECT) == (False, None)
    assert len(line) == 2 and line.waiting(SUSPECT) == 2
    assert line.add("n1", NEW) == (True, None)
    assert line.add("k1", KNOWN) == (True, None)


def test_a_full_line_evicts_the_newest_of_the_worst_rank_for_a_better_one() -> None:
    line: WaitingLine[str] = WaitingLine(size=4, suspects=2)
    for item, rank in [("s1", SUSPECT), ("s2", SUSPECT), ("n1", NEW), ("n2", NEW)]:
        assert line.add(item, rank) == (True, None)
    assert line.add("s3", SUSPECT) == (False, None)  # no better than the worst
    assert line.add("n3", NEW) == (True, "s2")  # the newest suspect goes
    assert line.add("n4", NEW) == (True, "s1")
    assert line.add("n5", NEW) == (False, None)  # equals never evict each other
    assert line.add("k1", KNOWN) == (True, "n4")  # then the newest new one
    assert [line.take() for _ in range(5)] == ["k1", "n1", "n2", "n3", None]


def test_recent_clients_keep_at_most_their_size_least_recent_dropped() -> None:
    recent = RecentClients(size=3)
    for at, client in enumerate(["a", "b", "c", "a", "d"]):
        recent.note(client, float(at))
    assert len(recent) == 3
    assert not recent.within("b", 5.0, 100.0)  # the least recently noted went
    assert recent.within("a", 5.0, 100.0) and not recent.within("a", 5.0, 2.0)


# --- the admission, with a pool that only records ----------------------------------------


class RecordingPool:
    """A BcryptPool stand-in: checks handed over wait here until the test finishes them."""

    def __init__(self, auth: BasicAuth, workers: int) -> None:
        self._auth = auth
        self.workers = workers
        self.running: list[tuple[Pending, object, Any]] = []
        self.started: list[str] = []  # peers, in the order their checks started

    def submit(self, pending: Pending, token: object, done: Any) -> None:
        self.running.append((pending, token, done))
        self.started.append(token.conn.peer)  # type: ignore[attr-defined]

    def finish(self) -> None:
        """The oldest running check is made (a real bcrypt, at cost 4) and handed back."""
        pending, token, done = self.running.pop(0)
        done(token, self._auth.verify(pending))


HASHED = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4))
_passwords = (f"guess-{n}".encode() for n in itertools.count())


def _request(password: bytes | None) -> Request:
    headers: dict[str, tuple[str, ...]] = {"host": ("node",)}
    if password is not None:
        token = base64.b64encode(b"prometheus:" + password).decode()
        headers["authorization"] = (f"Basic {token}",)
    return Request("GET", "/metrics", (1, 1), headers, keep_alive=False, has_body=False)


@contextlib.contextmanager
def _admission(**limits: Any) -> Iterator[tuple[Admission, RecordingPool, list[Connection]]]:
    """An admission over a recording pool; its connections are closed at the end."""
    auth = BasicAuth({"prometheus": HASHED})
    pool = RecordingPool(auth, ServerLimits(**limits).bcrypt_workers)
    admission = Admission(None, (auth, pool), ServerLimits(**limits), lambda: None)  # type: ignore[arg-type]
    conns: list[Connection] = []
    try:
        yield admission, pool, conns
    finally:
        for conn in conns:
            conn.close()


def _conn(conns: list[Connection], peer: str) -> Connection:
    conn = Connection(socket.socket(), peer, State.READ, 0.0)
    conns.append(conn)
    return conn


def _ask(
    admission: Admission, conns: list[Connection], peer: str, password: bytes | None = None
) -> tuple[Connection, object]:
    conn = _conn(conns, peer)
    return conn, admission.decide(conn, _request(password or next(_passwords)))


def _answers(admission: Admission) -> dict[str, object]:
    return {conn.peer: verdict for conn, verdict in admission.finished()}


def test_flooders_become_suspects_and_new_and_known_clients_go_first() -> None:
    with _admission() as (admission, pool, conns):
        # one scraper proves its credentials: its address is known from then on
        assert _ask(admission, conns, "10.0.0.8", b"right")[1] is CHECKING
        pool.finish()
        assert _answers(admission) == {"10.0.0.8": True}
        # five flooding addresses: each first check fails, so each becomes a suspect
        for n in range(1, 6):
            assert _ask(admission, conns, f"10.6.6.{n}")[1] is CHECKING
            pool.finish()
            assert _answers(admission) == {f"10.6.6.{n}": False}
        assert all(admission.rank(f"10.6.6.{n}", 0.0) == SUSPECT for n in range(1, 6))
        # the flood goes on: one suspect runs, two wait, the rest find the share spent
        verdicts = [_ask(admission, conns, f"10.6.6.{n}")[1] for n in range(1, 6)]
        assert verdicts == [CHECKING, CHECKING, CHECKING, AUTH_BUSY, AUTH_BUSY]
        # a new scraper and a known one still find places, and go before the suspects
        assert admission.rank("10.0.0.9", 0.0) == NEW
        assert admission.rank("10.0.0.8", 0.0) == KNOWN
        assert _ask(admission, conns, "10.0.0.9")[1] is CHECKING
        assert _ask(admission, conns, "10.0.0.8")[1] is CHECKING
        # the line is full (2 suspects, 1 new, 1 known): another new one evicts a suspect
        assert _ask(admission, conns, "10.0.0.10")[1] is CHECKING
        assert _answers(admission) == {"10.6.6.3": AUTH_BUSY}
        for _ in range(5):
            pool.finish()
            assert len(_answers(admission)) == 1
        assert pool.started[6:] == ["10.6.6.1", "10.0.0.8", "10.0.0.9", "10.0.0.10", "10.6.6.2"]


def test_one_client_holds_one_place_and_gets_it_back_when_its_check_ends() -> None:
    with _admission(bcrypt_queue=4) as (admission, pool, conns):
        assert _ask(admission, conns, "10.0.0.1")[1] is CHECKING
        assert _ask(admission, conns, "10.0.0.1")[1] is AUTH_BUSY
        pool.finish()
        assert _answers(admission) == {"10.0.0.1": False}
        assert _ask(admission, conns, "10.0.0.1")[1] is CHECKING


def test_a_suspect_is_forgiven_by_a_success_or_after_its_window() -> None:
    with _admission(bcrypt_suspect_s=60.0) as (admission, pool, conns):
        _ask(admission, conns, "10.0.0.1")
        pool.finish()
        list(admission.finished())
        now = time.monotonic()
        assert admission.rank("10.0.0.1", now) == SUSPECT
        assert admission.rank("10.0.0.1", now + 61.0) == NEW
        _ask(admission, conns, "10.0.0.1", b"right")
        pool.finish()
        list(admission.finished())
        assert admission.rank("10.0.0.1", now) == KNOWN


def test_a_remembered_wrong_password_marks_a_suspect_a_missing_header_does_not() -> None:
    with _admission() as (admission, pool, conns):
        _ask(admission, conns, "10.0.0.1", b"wrong")
        pool.finish()
        list(admission.finished())
        # the same address again, with no credentials: a browser asking for the prompt
        conn = _conn(conns, "10.0.0.2")
        assert admission.decide(conn, _request(None)) is False
        assert admission.rank("10.0.0.2", 0.0) == NEW
        # the remembered wrong password, from another address: no bcrypt, but a suspect
        assert _ask(admission, conns, "10.0.0.3", b"wrong")[1] is False
        assert admission.rank("10.0.0.3", 0.0) == SUSPECT
        assert pool.started == ["10.0.0.1"]


def test_a_new_client_asking_twice_at_once_is_a_suspect_and_so_is_its_waiting_check() -> None:
    # before: each flooding address's first check ranked new until it failed, so
    # nineteen fresh addresses held the new places for nineteen bcrypt durations
    with _admission() as (admission, pool, conns):
        assert _ask(admission, conns, "10.6.6.1")[1] is CHECKING  # runs
        for n in range(2, 6):  # four fresh addresses take the four places, ranked new
            assert _ask(admission, conns, f"10.6.6.{n}")[1] is CHECKING
        # each sends a second request while its first waits: no scraper does that
        for n in range(2, 6):
            assert _ask(admission, conns, f"10.6.6.{n}")[1] is AUTH_BUSY
            assert admission.rank(f"10.6.6.{n}", time.monotonic()) == SUSPECT
        # two waiting checks kept a suspect's place; the others lost theirs (429)
        assert set(_answers(admission).values()) == {AUTH_BUSY}
        # a new scraper now finds a place, and goes before the suspects
        assert _ask(admission, conns, "10.0.0.9", b"right")[1] is CHECKING
        pool.finish()
        assert _answers(admission) == {"10.6.6.1": False}
        pool.finish()
        assert _answers(admission) == {"10.0.0.9": True}
        assert pool.started == ["10.6.6.1", "10.0.0.9", "10.6.6.2"]


def test_a_new_client_back_at_once_after_a_429_is_a_suspect_one_back_later_is_not() -> None:
    with _admission(bcrypt_queue=1) as (admission, pool, conns):
        assert _ask(admission, conns, "10.6.6.1")[1] is CHECKING  # runs
        assert _ask(admission, conns, "10.6.6.2")[1] is CHECKING  # the one place
        assert _ask(admission, conns, "10.6.6.3")[1] is AUTH_BUSY
        assert _ask(admission, conns, "10.0.0.9")[1] is AUTH_BUSY
        # one thread per address, retrying at once: a suspect before any bcrypt
        assert _ask(admission, conns, "10.6.6.3")[1] is AUTH_BUSY
        assert admission.rank("10.6.6.3", time.monotonic()) == SUSPECT
        # a scraper comes back a scrape interval later: still new
        time.sleep(BACK_TOO_SOON_S + 0.05)
        assert _ask(admission, conns, "10.0.0.9")[1] is AUTH_BUSY  # the place is still taken
        assert admission.rank("10.0.0.9", time.monotonic()) == NEW
        assert pool.started == ["10.6.6.1"]


# --- who the client is under TLS -----------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _tls_conn(certs: Certs, client_cert: tuple[Path, Path] | None) -> Connection:
    """The server side of a finished handshake, client certificate verified if given."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certs.server_cert, certs.server_key)
    server_context.load_verify_locations(certs.ca)
    server_context.verify_mode = ssl.CERT_OPTIONAL
    client_context = ssl.create_default_context(cafile=str(certs.ca))
    if client_cert:
        client_context.load_cert_chain(*client_cert)
    ours, theirs = socket.socketpair()
    ours.settimeout(10)
    theirs.settimeout(10)
    client = client_context.wrap_socket(
        theirs, server_hostname="localhost", do_handshake_on_connect=False
    )
    handshake = threading.Thread(target=client.do_handshake)
    handshake.start()
    server = server_context.wrap_socket(ours, server_side=True)
    handshake.join(10)
    client.close()
    return Connection(server, "127.0.0.1", State.READ, 0.0)


def test_a_verified_client_certificate_is_its_client_and_ranks_known(certs: Certs) -> None:
    with_cert = _tls_conn(certs, (certs.client_cert, certs.client_key))
    without = _tls_conn(certs, None)
    try:
        client = client_of(with_cert)
        assert client.startswith("cert ") and client_of(without) == "127.0.0.1"
        with _admission() as (admission, _, _):
            assert admission.rank(client, 0.0) == KNOWN
            assert admission.rank("127.0.0.1", 0.0) == NEW
    finally:
        with_cert.close()
        without.close()
