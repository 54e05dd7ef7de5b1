"""Basic auth under attack: user-name timing, bcrypt floods, passwords bcrypt refuses."""

from __future__ import annotations

import base64
import contextlib
import http.client
import secrets
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from nvwatch.agent.server import ServerLimits
from nvwatch.agent.server import auth as auth_module
from nvwatch.agent.server.auth import bcrypt_cost
from nvwatch.sim.ports import free_port
from tests.agent.server_helpers import exchange, read_until_closed, serving, statuses, web_config


def _basic(user: bytes, password: bytes) -> str:
    return "Basic " + base64.b64encode(user + b":" + password).decode()


def _request(authorization: str, path: str = "/metrics") -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: node\r\nAuthorization: {authorization}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()


def _users(tmp_path: Path, cost: int, password: bytes = b"s3cret") -> str:
    hashed = bcrypt.hashpw(password, bcrypt.gensalt(rounds=cost)).decode()
    return f"basic_auth_users:\n  prometheus: '{hashed}'\n"


@pytest.fixture
def checked_costs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bcrypt cost of every check the server makes on a request (not at start-up)."""
    costs: list[int] = []

    def spy(password: bytes, hashed: bytes) -> bool:
        costs.append(bcrypt_cost(hashed))
        return bool(bcrypt.checkpw(password, hashed))

    spied = types.SimpleNamespace(checkpw=spy, gensalt=bcrypt.gensalt)
    monkeypatch.setattr(auth_module, "bcrypt", spied)
    return costs


def test_unknown_and_known_users_cost_one_bcrypt_of_the_same_cost(
    tmp_path: Path, checked_costs: list[int]
) -> None:
    # before: an unknown user was checked against a cost-4 dummy, a known one at cost 10,
    # so the answer's timing told which user names exist
    with serving(web_config(tmp_path, _users(tmp_path, cost=6))) as served:
        for user in (b"prometheus", b"nobody"):
            raw = exchange(served.port, _request(_basic(user, b"wrong")))
            assert statuses(raw) == [401]
    assert checked_costs == [6, 6]


def test_users_of_different_bcrypt_costs_are_refused_at_start_up(tmp_path: Path) -> None:
    # before: served, and a known cost-4 user's 401 took 1.3 ms, an unknown user's 107 ms
    web = tmp_path / "web.yml"
    low = bcrypt.hashpw(b"a", bcrypt.gensalt(rounds=4)).decode()
    high = bcrypt.hashpw(b"b", bcrypt.gensalt(rounds=12)).decode()
    web.write_text(f"basic_auth_users:\n  alice: '{low}'\n  bob: '{high}'\n")
    argv = [sys.executable, "-m", "nvwatch.agent.cli", "serve", "--simulate", "dgx-h100",
            "--listen", "127.0.0.1:0", "--web-config", str(web)]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    # one line: the web config is checked before the simulated node starts (and warns)
    (line,) = result.stderr.splitlines()
    for fragment in (str(web), "alice (bcrypt cost 4)", "bob (cost 12)", "htpasswd -nBC 12"):
        assert fragment in line, line


def test_a_known_user_and_an_unknown_user_take_as_long_to_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bcrypt worker's CPU seconds per refusal are compared, not the replies' wall
    # seconds: the check's work is what would tell user names apart, and a thread's CPU
    # time leaves out the turns a shared machine's other work takes (wall-clock medians
    # of 4 ms checks came out 5 ms against 18 ms under two loaded cores).
    spent: dict[bool, list[float]] = {True: [], False: []}
    verify = auth_module.BasicAuth.verify

    def timed(auth: auth_module.BasicAuth, pending: auth_module.Pending) -> bool:
        started = time.thread_time()
        ok = verify(auth, pending)
        spent[pending.known].append(time.thread_time() - started)
        return ok

    monkeypatch.setattr(auth_module.BasicAuth, "verify", timed)
    users = "".join(
        f"  {user}: '{bcrypt.hashpw(b'right', bcrypt.gensalt(rounds=8)).decode()}'\n"
        for user in ("prometheus", "federate")
    )
    took: dict[bytes, list[float]] = {b"prometheus": [], b"nobody": []}
    with serving(web_config(tmp_path, "basic_auth_users:\n" + users)) as served:
        for _ in range(7):
            for user, times in took.items():
                # a new wrong password each time: each answer costs one bcrypt
                request = _request(_basic(user, secrets.token_hex(8).encode()))
                started = time.perf_counter()
                assert statuses(exchange(served.port, request)) == [401]
                times.append(time.perf_counter() - started)
    assert [len(spent[True]), len(spent[False])] == [7, 7]
    known, unknown = (statistics.median(spent[known]) for known in (True, False))
    replies = ", ".join(
        f"{u.decode()} {statistics.median(t) * 1e3:.1f} ms" for u, t in took.items()
    )
    print(f"median bcrypt CPU: known user {known * 1e3:.1f} ms, unknown {unknown * 1e3:.1f} ms;"
          f" median 401 reply: {replies}")  # fmt: skip
    assert 0.5 <= unknown / known <= 2.0


def test_a_credential_is_checked_once(tmp_path: Path, checked_costs: list[int]) -> None:
    with serving(web_config(tmp_path, _users(tmp_path, cost=4))) as served:
        for _ in range(5):
            assert statuses(exchange(served.port, _request(_basic(b"prometheus", b"s3cret")))) == [
                200
            ]
        # a repeated wrong password is remembered too; each new one costs its bcrypt
        for password in (b"wrong", b"wrong", b"wrong", b"other"):
            assert statuses(exchange(served.port, _request(_basic(b"prometheus", password)))) == [
                401
            ]
    assert len(checked_costs) == 3


@pytest.mark.parametrize(
    ("password", "status"),
    [
        (b"x" * 100, 401),  # bcrypt raises for > 72 bytes: before, the client got an empty reply
        (b"\xff\xfe" * 40, 401),  # not UTF-8
        (b"s3cret", 200),
    ],
)
def test_any_password_is_answered(tmp_path: Path, password: bytes, status: int) -> None:
    with serving(web_config(tmp_path, _users(tmp_path, cost=4))) as served:
        assert statuses(exchange(served.port, _request(_basic(b"prometheus", password)))) == [
            status
        ]


def test_a_long_password_is_checked_by_its_first_72_bytes_as_go_does(tmp_path: Path) -> None:
    long = b"p" * 72
    with serving(web_config(tmp_path, _users(tmp_path, cost=4, password=long))) as served:
        assert statuses(exchange(served.port, _request(_basic(b"prometheus", long + b"tail")))) == [
            200
        ]


@pytest.mark.parametrize(
    "header", ["Basic", "Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode(), "Bearer x"]
)
def test_malformed_credentials_get_401(tmp_path: Path, header: str) -> None:
    with serving(web_config(tmp_path, _users(tmp_path, cost=4))) as served:
        raw = exchange(served.port, _request(header))
        assert statuses(raw) == [401] and b'WWW-Authenticate: Basic realm="nvwatch"' in raw


def _from(source: str, port: int, request: bytes, timeout: float = 30) -> list[int]:
    """Statuses of `request` sent from the loopback address `source`."""
    with socket.create_connection(("127.0.0.1", port), timeout, (source, 0)) as sock:
        sock.sendall(request)
        return statuses(read_until_closed(sock, timeout))


def test_beyond_the_bcrypt_budget_requests_get_429_at_once(tmp_path: Path) -> None:
    limits = ServerLimits(bcrypt_workers=1, bcrypt_queue=2)
    with serving(web_config(tmp_path, _users(tmp_path, cost=12)), limits) as served:
        codes: list[int] = []

        def attempt(source: str) -> None:
            password = secrets.token_hex(8).encode()  # new each time: never remembered
            codes.extend(_from(source, served.port, _request(_basic(b"x", password))))

        # eight clients on four addresses: one place per address, three places in all
        sources = [f"127.0.0.{1 + i % 4}" for i in range(8)]
        threads = [threading.Thread(target=attempt, args=(source,)) for source in sources]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(codes) == 8 and codes.count(401) <= 3 and codes.count(429) >= 5
        assert served.refused()["auth_busy"] == codes.count(429)


_ATTACKER = textwrap.dedent(
    """
    import base64, http.client, os, sys, threading
    port, clients = int(sys.argv[1]), int(sys.argv[2])
    def attack():
        while True:
            # a new wrong password each time, so no cache can answer for bcrypt
            password = os.urandom(8).hex().encode()
            token = base64.b64encode(b"prometheus:" + password).decode()
            header = {"Authorization": "Basic " + token}
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request("GET", "/metrics", headers=header)
                c.getresponse().read()
                c.close()
            except OSError:
                pass
    for _ in range(clients):
        threading.Thread(target=attack, daemon=True).start()
    print("attacking", flush=True)
    threading.Event().wait()
    """
)


@contextlib.contextmanager
def _flood(port: int, clients: int = 50) -> Iterator[None]:
    """`clients` wrong-password clients in another process (as remote attackers are)."""
    attacker = subprocess.Popen(
        [sys.executable, "-c", _ATTACKER, str(port), str(clients)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert attacker.stdout is not None and attacker.stdout.readline() == "attacking\n"
        time.sleep(1.0)  # let the flood reach its pace
        yield
    finally:
        attacker.kill()
        attacker.wait(10)


GOOD = {"Authorization": _basic(b"prometheus", b"s3cret")}


@contextlib.contextmanager
def _agent(web: Path) -> Iterator[int]:
    """`nvwatch serve` in its own process, as on a node; yields its port once it answers."""
    port = free_port()
    argv = [sys.executable, "-m", "nvwatch.agent.cli", "serve", "--sources", "host",
            "--interval", "1s", "--listen", f"127.0.0.1:{port}",
            "--web-config", str(web)]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, http.client.HTTPException):
                probe = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                probe.request("GET", "/healthz", headers=GOOD)
                if probe.getresponse().status == 200:
                    break
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(10)


def _p99_of_scrapes(scraper: http.client.HTTPConnection, count: int) -> float:
    took = []
    for _ in range(count):
        started = time.perf_counter()
        scraper.request("GET", "/metrics", headers=GOOD)
        response = scraper.getresponse()
        assert response.status == 200 and response.read()
        took.append(time.perf_counter() - started)
        time.sleep(0.01)
    return sorted(took)[int(count * 0.99) - 1]


FLOODED_P99_S = 0.150


def test_authorised_scrapes_keep_their_latency_under_a_wrong_password_flood(
    tmp_path: Path,
) -> None:
    # before: p99 5.6 -> 350 ms, with 126 % of a core spent on the attackers' bcrypt
    web = tmp_path / "web.yml"
    web.write_text(_users(tmp_path, cost=10))
    with _agent(web) as port, _flood(port):
        scraper = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        # Up to three rounds of 200: the suite shares two cores with other work, and a
        # round spoilt by a neighbour's burst says nothing about the server. The old
        # server's p99 was 350 ms; this one's 6 ms alone and up to 90 ms with the whole
        # suite on two cores: the bound sits between.
        rounds = []
        while len(rounds) < 3 and (not rounds or min(rounds) > FLOODED_P99_S):
            rounds.append(_p99_of_scrapes(scraper, 200))
        scraper.close()
    print("authorised p99 per round:", ", ".join(f"{p99 * 1e3:.1f} ms" for p99 in rounds))
    assert min(rounds) <= FLOODED_P99_S


def test_a_new_scraper_is_verified_during_a_flood_from_another_host(tmp_path: Path) -> None:
    with serving(web_config(tmp_path, _users(tmp_path, cost=10))) as served, _flood(served.port):
        assert _from("127.0.0.2", served.port, _request(GOOD["Authorization"])) == [200]
