"""A wrong-password flood from several addresses must not lock new or known scrapers out,
nor one from many fresh addresses a new scraper.

The flooders run in another process at the lowest priority (as remote attackers cost the
node nothing but their requests); the server runs in this one, with the production bcrypt
budget (1 worker, 4 waiting places, 1 place per client).

What a scraper waits for is read from the order in which the server's waiting line hands
checks to the bcrypt worker, not from a clock: on a shared machine a scrape's seconds say
as much about the neighbours as about the server, while the order is the server's own
decision. Every scrape must get 200, and no suspect's check may go to the worker while a
scraper's waits; the seconds are printed for the reader.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from nvwatch.agent.server import admission
from nvwatch.agent.server.admission import KNOWN, NEW, SUSPECT, WaitingLine
from nvwatch.agent.server.auth import bcrypt_cost
from nvwatch.agent.webconfig import WebConfig
from tests.agent.server_helpers import read_until_closed, serving, statuses, wait_for, web_config

COST = 10  # the cost htpasswd -B uses by default, and the one a node would run
FLOODERS = [f"127.0.0.{n}" for n in range(2, 7)]  # five source addresses
THREADS_PER_FLOODER = 4
# many fresh addresses, each a first attempt ranked like a new scraper's until unmasked
MANY_FLOODERS = [f"127.0.0.{n}" for n in range(20, 39)]  # nineteen
THREADS_PER_MANY = 3
SCRAPER = "127.0.0.40"
SCRAPES = 8
SCRAPE_EVERY_S = 1.0  # as often as Prometheus scrapes at the shortest
FLOOD_MAX_S = 60.0  # the flood stops by itself after this, whatever the test does
FLOOD_MAX_REQUESTS = 20_000  # per thread
ROUNDS = 3
RANK_NAMES = {KNOWN: "known", NEW: "new", SUSPECT: "suspect"}

_FLOODER = textwrap.dedent(
    """
    import base64, os, socket, sys, threading, time
    port, sources, per_source = int(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3])
    max_s, max_requests = float(sys.argv[4]), int(sys.argv[5])
    os.nice(19)  # remote attackers do not compete with the agent for its CPU
    stop = threading.Event()
    sent = [0]

    def flood(source):
        for _ in range(max_requests):
            if stop.is_set():
                return
            # a new wrong password each time, so no cache can answer for bcrypt
            token = base64.b64encode(b"prometheus:" + os.urandom(8).hex().encode()).decode()
            request = ("GET /metrics HTTP/1.1\\r\\nHost: node\\r\\nAuthorization: Basic "
                       + token + "\\r\\nConnection: close\\r\\n\\r\\n").encode()
            try:
                with socket.create_connection(("127.0.0.1", port), 10, (source, 0)) as sock:
                    sock.sendall(request)
                    while sock.recv(65536):
                        pass
            except OSError:
                time.sleep(0.01)
            sent[0] += 1

    threads = [threading.Thread(target=flood, args=(source,))
               for source in sources for _ in range(per_source)]
    for thread in threads:
        thread.start()
    print("flooding", flush=True)
    # until the test closes stdin, or max_s at most
    watcher = threading.Thread(target=sys.stdin.read, daemon=True)
    watcher.start()
    watcher.join(max_s)
    stop.set()
    for thread in threads:
        thread.join(15)
    print("sent", sent[0], flush=True)
    """
)


@contextlib.contextmanager
def _flood(
    port: int, sources: list[str] = FLOODERS, threads: int = THREADS_PER_FLOODER
) -> Iterator[None]:
    flooder = subprocess.Popen(
        [sys.executable, "-c", _FLOODER, str(port), ",".join(sources),
         str(threads), str(FLOOD_MAX_S), str(FLOOD_MAX_REQUESTS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert flooder.stdout is not None and flooder.stdout.readline() == "flooding\n"
        yield
    finally:
        assert flooder.stdin is not None
        flooder.stdin.close()
        try:
            flooder.wait(30)
        finally:
            if flooder.poll() is None:
                flooder.kill()
                flooder.wait(10)
            assert flooder.stdout is not None
            flooder.stdout.close()


@dataclass
class LineLog:
    """What the server's waiting line did, in order: each check placed and each handed to
    the worker, with its rank and password (the line runs on the loop thread alone)."""

    events: list[tuple[str, int, bytes]] = field(default_factory=list)

    def waited_for(self, password: bytes) -> tuple[int | None, list[int]]:
        """The rank `password`'s check went to the worker at (None if it never went), and
        the ranks of the checks that went before it while it waited."""
        events = list(self.events)
        placed = events.index(next(e for e in events if e[0] == "placed" and e[2] == password))
        ahead: list[int] = []
        for kind, rank, checked in events[placed + 1 :]:
            if kind != "taken":
                continue
            if checked == password:
                return rank, ahead
            ahead.append(rank)
        return None, ahead


@pytest.fixture
def line_log(monkeypatch: pytest.MonkeyPatch) -> LineLog:
    log = LineLog()
    add, take = WaitingLine.add, WaitingLine.take

    def spied_add(line: WaitingLine[Any], item: Any, rank: int) -> tuple[bool, Any]:
        placed, evicted = add(line, item, rank)
        if placed:
            log.events.append(("placed", rank, item.pending.password))
        return placed, evicted

    def spied_take(line: WaitingLine[Any]) -> Any:
        # the rank it came from is the one that has one fewer waiting after
        before = [line.waiting(r) for r in admission.RANKS]
        item = take(line)
        if item is not None:
            rank = next(r for r in admission.RANKS if line.waiting(r) < before[r])
            log.events.append(("taken", rank, item.pending.password))
        return item

    monkeypatch.setattr(WaitingLine, "add", spied_add)
    monkeypatch.setattr(WaitingLine, "take", spied_take)
    return log


@dataclass(frozen=True)
class Scrape:
    codes: list[int]
    seconds: float
    password: bytes


def _password(user: str) -> bytes:
    return f"{user}-password".encode()


def _scrape(source: str, port: int, user: str) -> Scrape:
    """One scrape from `source` with `user`'s credentials."""
    token = base64.b64encode(user.encode() + b":" + _password(user)).decode()
    request = (
        f"GET /metrics HTTP/1.1\r\nHost: node\r\nAuthorization: Basic {token}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), 10, (source, 0)) as sock:
        sock.sendall(request)
        codes = statuses(read_until_closed(sock, 10))
    return Scrape(codes, time.perf_counter() - started, _password(user))


def _web(tmp_path: Path, users: list[str]) -> WebConfig:
    hashes = {user: bcrypt.hashpw(_password(user), bcrypt.gensalt(COST)) for user in users}
    lines = "".join(f"  {user}: '{hashed.decode()}'\n" for user, hashed in hashes.items())
    web = web_config(tmp_path, "basic_auth_users:\n" + lines)
    assert {bcrypt_cost(hashed) for hashed in web.users.values()} == {COST}
    return web


def _describe(who: str, scrape: Scrape, log: LineLog) -> str:
    rank, ahead = log.waited_for(scrape.password)
    went = "never checked" if rank is None else f"checked as {RANK_NAMES[rank]}"
    before = ", ".join(RANK_NAMES[r] for r in ahead) or "none"
    return f"{who}: {scrape.codes} in {scrape.seconds * 1e3:.0f} ms, {went}, after {before}"


def test_new_and_known_scrapers_get_in_during_a_flood_from_five_addresses(
    tmp_path: Path, line_log: LineLog
) -> None:
    # before: the five flooding addresses held all five places (1 running + 4 waiting),
    # and every scraper whose credentials were not yet remembered got 429 until it ended
    users = ["known-first"] + [f"{kind}-{n}" for n in range(ROUNDS) for kind in ("new", "known")]
    web = _web(tmp_path, users)
    scrapes: list[tuple[str, Scrape]] = []
    with serving(web) as served:
        # a scraper on 127.0.0.8 proves one credential before the flood: its address is known
        assert _scrape("127.0.0.8", served.port, "known-first").codes == [200]
        with _flood(served.port):
            # the flood is under way: its first checks have failed, the budget is spent
            assert wait_for(lambda: served.refused()["unauthorized"] >= 10, timeout=20)
            assert wait_for(lambda: served.refused()["auth_busy"] >= 50, timeout=20)
            for n in range(ROUNDS):
                source = f"127.0.0.{9 + n}"
                scrapes.append((f"new {source}", _scrape(source, served.port, f"new-{n}")))
                # a credential not yet remembered, from the known address
                scrapes.append(("known 127.0.0.8", _scrape("127.0.0.8", served.port, f"known-{n}")))
        refused = served.refused()
    for who, scrape in scrapes:
        print(_describe(who, scrape, line_log))
    print(f"flood: 401 x{refused['unauthorized']}, 429 x{refused['auth_busy']}")
    for who, scrape in scrapes:
        assert scrape.codes == [200], who
        rank, ahead = line_log.waited_for(scrape.password)
        # checked at its address's rank, and no suspect's check went first while it waited
        assert rank == (KNOWN if who.startswith("known") else NEW), who
        assert SUSPECT not in ahead, who


def test_a_new_scraper_gets_in_from_the_first_second_of_a_flood_from_fresh_addresses(
    tmp_path: Path, line_log: LineLog
) -> None:
    # before: each flooding address's first attempt ranked new, like the scraper's, until
    # its check failed; 19 of them held the new places for 19 bcrypt durations (4 of 8
    # scrapes 429 in the first ~13 s on a loaded 2-core machine). Now an address sending
    # a second request while its first waits, or back at once after a 429, is a suspect
    # before any bcrypt, and no suspect's check goes before the scraper's.
    web = _web(tmp_path, ["scraper"])
    scrapes: list[Scrape] = []
    with serving(web) as served, _flood(served.port, MANY_FLOODERS, THREADS_PER_MANY):
        # every place is taken: the flood's first attempts, ranked new, fill the line
        assert wait_for(lambda: served.refused()["auth_busy"] >= 1, timeout=20)
        began = time.monotonic()
        for n in range(SCRAPES):
            scrapes.append(_scrape(SCRAPER, served.port, "scraper"))
            # a scrape every interval, from its start, as Prometheus schedules them
            time.sleep(max(0.0, began + (n + 1) * SCRAPE_EVERY_S - time.monotonic()))
    print(_describe("first scrape", scrapes[0], line_log))
    print(
        "then (remembered): "
        + ", ".join(f"{s.codes} {s.seconds * 1e3:.0f} ms" for s in scrapes[1:])
    )
    assert [scrape.codes for scrape in scrapes] == [[200]] * SCRAPES
    # the first scrape's credential is checked once, as new; the others are remembered
    rank, ahead = line_log.waited_for(scrapes[0].password)
    assert rank == NEW
    # a flood address's first request is a new client's until it does what no scraper
    # does, so new checks may go first; a suspect's never
    assert SUSPECT not in ahead
    checks = [kind for kind, _, checked in line_log.events if checked == scrapes[0].password]
    assert checks == ["placed", "taken"]
