"""/probe on a real server: a BMC that does not answer costs its own target a bounded
wait and nothing else; reads are cached, shared and bounded.

The reader here is a test double standing at the boundary a BMC sits behind (the real
one, over IPMI against ipmi_sim, is tested in tests/bmc/); what is under test is the
server: its loop must never wait on a read.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from nvwatch.agent.server.probe import ProbeError, ProbeService, parse_target
from nvwatch.agent.sources.bmc.reading import BmcError, BmcReading, Module, Target
from tests.agent.server_helpers import Served, serving
from tests.e2e.loopback import wait_for

TIMEOUT_S = 1.0
MODULE = Module(
    name="default",
    user="admin",
    password="secret",
    privilege="admin",
    timeout_s=TIMEOUT_S,
    collectors=frozenset({"ipmi", "dcmi"}),
)
# a module whose hung reads outlast any test: they end when the test releases them, so
# what is answered before that waited for none of them, however loaded the machine
PATIENT = dataclasses.replace(MODULE, timeout_s=60.0)


def render(
    reading: BmcReading | None,
    failure: str | None,
    module: Module,
    *,
    duration_s: float | None = None,
) -> bytes:
    if reading is None:
        return f"up 0\n# {failure}\n".encode()
    return f"up 1\nwatts {reading.dcmi_watts}\n".encode()


class Bmcs:
    """BMCs by host: `watts` answer at once, `hung` never within the timeout, `broken`
    refuses, `buggy` raises what no reader should."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.release = threading.Event()
        self._lock = threading.Lock()

    def read(self, target: Target, module: Module) -> BmcReading:
        with self._lock:
            self.reads.append(target.host)
        if target.host.startswith("hung"):
            self.release.wait(10)
            raise BmcError("released")
        if target.host == "broken":
            raise BmcError("authentication failed (wrong user or password?)")
        if target.host == "buggy":
            raise KeyError("a bug")
        if target.host == "slow":
            time.sleep(0.3)
        return BmcReading(sensors=(), dcmi_watts=float(len(target.host)), duration_s=0.001)


@pytest.fixture
def bmcs() -> Iterator[Bmcs]:
    bmcs = Bmcs()
    yield bmcs
    bmcs.release.set()


def start(bmcs: Bmcs, module: Module = MODULE, **kwargs: float) -> ProbeService:
    return ProbeService({"default": module}, bmcs, render, **kwargs)  # type: ignore[arg-type]


def get(served: Served, path: str, timeout: float = 5.0) -> tuple[int, str, float]:
    began = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{served.port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode(), time.monotonic() - began
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), time.monotonic() - began


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("10.0.0.5", Target("10.0.0.5", 623)),
        ("bmc-7.mgmt:6230", Target("bmc-7.mgmt", 6230)),
        ("[fd00::5]:623", Target("fd00::5", 623)),
        ("[fd00::5]", Target("fd00::5", 623)),
        ("fd00::5", Target("fd00::5", 623)),
    ],
)
def test_targets_are_read_as_ipmi_exporter_reads_them(text: str, target: Target) -> None:
    assert parse_target(text) == target


@pytest.mark.parametrize("text", ["", "host:0", "host:70000", "host:x", "[::1", "a b", "h/x"])
def test_a_target_naming_no_bmc_is_refused(text: str) -> None:
    with pytest.raises(ProbeError):
        parse_target(text)


def test_a_hung_bmc_costs_its_own_probe_a_bounded_wait_and_nothing_else(bmcs: Bmcs) -> None:
    probe = start(bmcs)
    with serving(probe=probe.respond) as served, ThreadPoolExecutor(4) as pool:
        hung = pool.submit(get, served, "/probe?target=hung-1&module=default")
        time.sleep(0.1)
        # meanwhile another BMC, the node's own metrics and health answer at once
        assert get(served, "/probe?target=bmc-2")[:2] == (200, "up 1\nwatts 5.0\n")
        assert get(served, "/metrics")[0] == 200
        assert get(served, "/healthz")[0] == 200
        status, body, took = hung.result()
    probe.close()
    assert status == 200
    assert body.startswith("up 0\n# no answer from hung-1:623 within 1 s")
    # the loop answers at the module's timeout plus its grace, within a sweep tick
    assert TIMEOUT_S <= took < TIMEOUT_S + 1.0


def test_many_hung_bmcs_do_not_delay_a_healthy_one(bmcs: Bmcs) -> None:
    """The hung reads end only when released, after the healthy BMC's answer: had it
    waited for any of them it would have had none (its request gives up at 5 s)."""
    probe = start(bmcs, PATIENT)
    hung_targets = 24  # past what one worker per CPU, or a small fixed pool, would hold
    with serving(probe=probe.respond) as served, ThreadPoolExecutor(hung_targets) as pool:
        hung = [
            pool.submit(get, served, f"/probe?target=hung-{i}", 60.0) for i in range(hung_targets)
        ]
        wait_for("every hung BMC to be read", lambda: len(bmcs.reads) == hung_targets, 30)
        status, body, _ = get(served, "/probe?target=bmc-2")
        bmcs.release.set()
        assert all(future.result()[0] == 200 for future in hung)
    probe.close()
    assert (status, body) == (200, "up 1\nwatts 5.0\n")


def test_reads_within_the_cache_time_and_concurrent_ones_share_one_read(bmcs: Bmcs) -> None:
    probe = start(bmcs, cache_s=30.0)
    with serving(probe=probe.respond) as served, ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: get(served, "/probe?target=slow"), range(6)))
        answers.append(get(served, "/probe?target=slow"))
    probe.close()
    assert {a[:2] for a in answers} == {(200, "up 1\nwatts 4.0\n")}
    assert bmcs.reads == ["slow"]


def test_a_failed_read_is_the_target_down_with_its_reason(bmcs: Bmcs) -> None:
    probe = start(bmcs, cache_s=0.0)
    with serving(probe=probe.respond) as served:
        refused = get(served, "/probe?target=broken")
        bug = get(served, "/probe?target=buggy")
        after = get(served, "/probe?target=bmc-2")
    probe.close()
    assert refused[:2] == (200, "up 0\n# authentication failed (wrong user or password?)\n")
    assert bug[:2] == (200, "up 0\n# internal error: 'a bug'\n")
    assert after[:2] == (200, "up 1\nwatts 5.0\n")


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/probe", 400, "give exactly one target"),
        ("/probe?target=a&target=b", 400, "give exactly one target"),
        (
            "/probe?target=bmc-1&module=nope",
            400,
            "unknown module 'nope' (the BMC config has: default)",
        ),
        ("/probe?target=bmc-1:99999", 400, "port must be a number"),
    ],
)
def test_a_probe_naming_no_readable_bmc_gets_one_line(
    bmcs: Bmcs, path: str, status: int, says: str
) -> None:
    probe = start(bmcs)
    with serving(probe=probe.respond) as served:
        answer = get(served, path)
    probe.close()
    assert answer[0] == status
    assert says in answer[1] and answer[1].count("\n") == 1
    assert bmcs.reads == []


def test_an_agent_without_a_bmc_config_says_so() -> None:
    with serving() as served:
        status, body, _ = get(served, "/probe?target=bmc-1")
    assert status == 404 and "--bmc-config" in body


def test_reads_past_the_pool_s_queue_are_refused_at_once(bmcs: Bmcs) -> None:
    """Refused while the four reads in flight still hang (they end only when released,
    after the answer): at once, not once room was made."""
    probe = start(bmcs, PATIENT, workers=1)  # room for 4 reads in flight
    with serving(probe=probe.respond) as served, ThreadPoolExecutor(5) as pool:
        hung = [pool.submit(get, served, f"/probe?target=hung-{i}", 60.0) for i in range(4)]
        # one reading, three queued behind it: all four taken in
        wait_for("four reads in flight", lambda: len(probe._reading) == 4, 30)
        status, body, _ = get(served, "/probe?target=bmc-2")
        bmcs.release.set()
        for future in hung:
            assert future.result()[0] == 200
    probe.close()
    assert status == 503 and "too many BMC reads" in body
