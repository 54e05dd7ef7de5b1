"""A wrong-password flood from several addresses must not lock new or known scrapers out,
nor one from many fresh addresses a new scraper.

The flooders run in another process at the lowest priority (as remote attackers cost the
node nothing but their requests); the server runs in this one, with the production bcrypt
budget (1 worker, 4 waiting places, 1 place per client).
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt

from nvwatch.agent.server.auth import bcrypt_cost
from nvwatch.agent.webconfig import WebConfig
from tests.agent.server_helpers import (
    Served,
    read_until_closed,
    serving,
    statuses,
    wait_for,
    web_config,
)

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
FLOOD_SAMPLE_S = 1.5
SLACK_S = 0.5  # scheduling on a shared 2-core machine, the loop's own turn, the reply

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


def _bcrypt_seconds(hashed: bytes) -> float:
    """One bcrypt check of `hashed` as the server's worker runs it: on a thread at its
    lowered priority, median of three."""
    took: list[float] = []

    def measure() -> None:
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        for _ in range(3):
            started = time.perf_counter()
            bcrypt.checkpw(b"wrong", hashed)
            took.append(time.perf_counter() - started)

    thread = threading.Thread(target=measure)
    thread.start()
    thread.join(30)
    return statistics.median(took)


def _basic(user: str) -> str:
    token = base64.b64encode(f"{user}:{user}-password".encode()).decode()
    return f"Basic {token}"


def _scrape(source: str, port: int, user: str) -> tuple[list[int], float]:
    """Statuses of one scrape from `source` with `user`'s credentials, and its seconds."""
    request = (
        f"GET /metrics HTTP/1.1\r\nHost: node\r\nAuthorization: {_basic(user)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), 10, (source, 0)) as sock:
        sock.sendall(request)
        codes = statuses(read_until_closed(sock, 10))
    return codes, time.perf_counter() - started


def test_new_and_known_scrapers_get_in_during_a_flood_from_five_addresses(
    tmp_path: Path,
) -> None:
    # before: the five flooding addresses held all five places (1 running + 4 waiting),
    # and every scraper whose credentials were not yet remembered got 429 until it ended
    users = ["known-first"] + [f"{kind}-{n}" for n in range(ROUNDS) for kind in ("new", "known")]
    hashes = {
        user: bcrypt.hashpw(f"{user}-password".encode(), bcrypt.gensalt(COST)) for user in users
    }
    lines = "".join(f"  {user}: '{hashed.decode()}'\n" for user, hashed in hashes.items())
    web = web_config(tmp_path, "basic_auth_users:\n" + lines)
    assert {bcrypt_cost(hashed) for hashed in web.users.values()} == {COST}
    alone = _bcrypt_seconds(hashes["known-first"])
    rounds: list[dict[str, tuple[list[int], float]]] = []
    with serving(web) as served:
        # a scraper on 127.0.0.8 proves one credential before the flood: its address is known
        assert _scrape("127.0.0.8", served.port, "known-first")[0] == [200]
        flooding = time.monotonic()
        with _flood(served.port):
            # the flood is under way: its first checks have failed, the budget is spent
            assert wait_for(lambda: served.refused()["unauthorized"] >= 10, timeout=20)
            assert wait_for(lambda: served.refused()["auth_busy"] >= 50, timeout=20)
            # A bcrypt duration is the longer of one measured alone at the worker's priority
            # and one as the worker makes them under this flood (it always has a suspect's
            # check to make), whose 429s cost the loop thread a core
            checked = served.refused()["unauthorized"]
            time.sleep(FLOOD_SAMPLE_S)
            flooded = FLOOD_SAMPLE_S / max(1, served.refused()["unauthorized"] - checked)
            bound = 3 * max(alone, flooded) + SLACK_S
            # Every scrape must get 200. The time bound must hold in one of up to ROUNDS
            # rounds: the suite shares two cores with other work, and a round spoilt by a
            # neighbour's burst says nothing about the server.
            while len(rounds) < ROUNDS and not any(_within(r, bound) for r in rounds):
                n = len(rounds)
                rounds.append(
                    {
                        f"new 127.0.0.{9 + n}": _scrape(
                            f"127.0.0.{9 + n}", served.port, f"new-{n}"
                        ),
                        # a credential not yet remembered, from the known address
                        "known 127.0.0.8": _scrape("127.0.0.8", served.port, f"known-{n}"),
                    }
                )
            flooding = time.monotonic() - flooding
        refused = served.refused()
    print(f"bcrypt at cost {COST}: {alone * 1e3:.0f} ms alone, {flooded * 1e3:.0f} ms flooded")
    for n, scrapes in enumerate(rounds):
        took = ", ".join(f"{who} {codes} {s * 1e3:.0f} ms" for who, (codes, s) in scrapes.items())
        print(f"round {n + 1} (bound {bound * 1e3:.0f} ms): {took}")
    busy = refused["auth_busy"]
    print(f"flood of {flooding:.1f} s: 401 x{refused['unauthorized']}, 429 x{busy}")
    for scrapes in rounds:
        for who, (codes, _) in scrapes.items():
            assert codes == [200], f"{who}: {codes}"
    assert any(_within(scrapes, bound) for scrapes in rounds)


def _within(scrapes: dict[str, tuple[list[int], float]], bound: float) -> bool:
    return all(took <= bound for _, took in scrapes.values())


def _flood_pace(served: Served) -> float:
    """Seconds per check as the worker makes them under the flood (it always has a
    suspect's check to make), over FLOOD_SAMPLE_S."""
    checked = served.refused()["unauthorized"]
    time.sleep(FLOOD_SAMPLE_S)
    return FLOOD_SAMPLE_S / max(1, served.refused()["unauthorized"] - checked)


def _scrapes_during_a_fresh_flood(web: WebConfig) -> Round:
    """A new server, flooded from MANY_FLOODERS; SCRAPER's SCRAPES scrapes one interval
    apart from the flood's first 429 on, and the worker's pace under the flood."""
    scrapes: list[tuple[list[int], float]] = []
    with serving(web) as served, _flood(served.port, MANY_FLOODERS, THREADS_PER_MANY):
        # every place is taken: the flood's first attempts, ranked new, fill the line
        assert wait_for(lambda: served.refused()["auth_busy"] >= 1, timeout=20)
        began, checked = time.monotonic(), served.refused()["unauthorized"]
        for n in range(SCRAPES):
            scrapes.append(_scrape(SCRAPER, served.port, "scraper"))
            if n == 0:  # the flood's checks made while the first scrape waited
                ahead = served.refused()["unauthorized"] - checked
            # a scrape every interval, from its start, as Prometheus schedules them
            time.sleep(max(0.0, began + (n + 1) * SCRAPE_EVERY_S - time.monotonic()))
        # the worker's pace over the scrapes and just after: the longer of the two
        during = (time.monotonic() - began) / max(1, served.refused()["unauthorized"] - checked)
        pace = max(during, _flood_pace(served))
    return Round(scrapes, pace, ahead)


@dataclass(frozen=True)
class Round:
    scrapes: list[tuple[list[int], float]]  # statuses and seconds of each scrape
    pace: float  # seconds per check under the flood
    ahead: int  # the flood's checks made while the first scrape waited

    def within(self, alone: float) -> bool:
        bound = self.bound(alone)
        return all(took <= bound for _, took in self.scrapes)

    def bound(self, alone: float) -> float:
        # the check running when the scrape comes, its own, one for scheduling noise
        return 3 * max(alone, self.pace) + SLACK_S


def test_a_new_scraper_gets_in_from_the_first_second_of_a_flood_from_fresh_addresses(
    tmp_path: Path,
) -> None:
    # before: each flooding address's first attempt ranked new, like the scraper's, until
    # its check failed; 19 of them held the new places for 19 bcrypt durations (4 of 8
    # scrapes 429 in the first ~13 s on a loaded 2-core machine). Now an address sending
    # a second request while its first waits, or back at once after a 429, is a suspect
    # before any bcrypt, and the scraper's check waits for the one running at most.
    hashed = bcrypt.hashpw(b"scraper-password", bcrypt.gensalt(COST))
    web = web_config(tmp_path, f"basic_auth_users:\n  scraper: '{hashed.decode()}'\n")
    alone = _bcrypt_seconds(hashed)
    rounds: list[Round] = []
    # every scrape of every round must get 200; the time bound must hold in one round
    # of up to ROUNDS (a neighbour's burst on the shared machine can spoil one)
    while len(rounds) < ROUNDS and not any(r.within(alone) for r in rounds):
        rounds.append(_scrapes_during_a_fresh_flood(web))
    for n, r in enumerate(rounds):
        took = ", ".join(f"{codes} {s * 1e3:.0f} ms" for codes, s in r.scrapes)
        print(f"round {n + 1}: bcrypt {alone * 1e3:.0f} ms alone, {r.pace * 1e3:.0f} ms flooded "
              f"(bound {r.bound(alone) * 1e3:.0f} ms), {r.ahead} flood checks while the "
              f"first waited: {took}")  # fmt: skip
    for r in rounds:
        assert [codes for codes, _ in r.scrapes] == [[200]] * SCRAPES
    assert any(r.within(alone) for r in rounds)
