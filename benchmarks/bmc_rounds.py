"""Prometheus's side of the BMC fleet benchmark: scrape rounds against one agent's /probe.

A round is one scrape interval in which every BMC target is probed once, as Prometheus
does for a job of many targets: "spread" puts each target at its own offset in the
interval (Prometheus spreads a job's targets over the interval by a hash of each
target's labels), "burst" fires every probe at the interval's start, through at most
`concurrency` client connections at once (the worst case: targets whose offsets
coincide). The round lasts the whole interval, so the agent's CPU over it is what one
interval costs, idle time included.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

SPREAD, BURST = "spread", "burst"
MODES = (SPREAD, BURST)


class Outcome(str, Enum):
    OK = "ok"  # answered in time with nvwatch_bmc_up 1
    LATE = "late"  # no answer within the scrape timeout: Prometheus would drop it
    FAILED = "failed"  # answered in time, but not a read BMC (up 0, 503, an error)


@dataclass(frozen=True)
class Probe:
    outcome: Outcome
    wall_s: float  # from sending the request to the end of the answer
    start_lag_s: float  # how long after its slot in the interval it was sent
    reason: str = ""


@dataclass(frozen=True)
class Round:
    mode: str
    probes: tuple[Probe, ...]
    wall_s: float  # the round's length: the interval, or longer if probes ran over
    agent_cpu_s: float  # the agent's user + system CPU over the round
    bmcs_cpu_s: float  # every ipmi_sim's CPU over the round (the BMCs' side, for context)
    agent_rss_mib: float  # at the round's end
    last_answer_s: float  # from the round's start to its last probe's answer


@dataclass(frozen=True)
class RoundPlan:
    probe_url: str  # http://host:port/probe?module=NAME&target=
    targets: tuple[str, ...]  # host:port of each BMC
    interval_s: float
    concurrency: int
    scrape_timeout_s: float


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU of these processes so far (0 for one that is gone)."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def rss_mib(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def peak_rss_mib(pid: int) -> float:
    """The process's high-water RSS (VmHWM), which a sample at the round's end can miss."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return rss_mib(pid)


def probe_once(url: str, timeout_s: float, slot: float) -> Probe:
    """One scrape of /probe, judged as Prometheus would: in time, and the BMC read."""
    lag = max(0.0, time.monotonic() - slot)
    began = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            body = reply.read().decode()
    except urllib.error.HTTPError as exc:
        return Probe(Outcome.FAILED, time.monotonic() - began, lag, f"HTTP {exc.code}")
    except TimeoutError:  # socket.timeout is TimeoutError since Python 3.10
        return Probe(Outcome.LATE, time.monotonic() - began, lag, "scrape timeout")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        outcome = Outcome.LATE if isinstance(reason, TimeoutError) else Outcome.FAILED
        return Probe(outcome, time.monotonic() - began, lag, str(reason))
    wall = time.monotonic() - began
    if wall > timeout_s:
        return Probe(Outcome.LATE, wall, lag, "answered after the scrape timeout")
    up = _value(body, "nvwatch_bmc_up")
    if up != 1.0:
        return Probe(Outcome.FAILED, wall, lag, _reason(body) or f"nvwatch_bmc_up {up}")
    return Probe(Outcome.OK, wall, lag)


def _value(body: str, name: str) -> float | None:
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return None


def _reason(body: str) -> str:
    """The failure's one line, written as a comment of the probe's body."""
    prefix = "# nvwatch_bmc_up 0: "
    return next((line[len(prefix) :] for line in body.splitlines() if line.startswith(prefix)), "")


def offsets(mode: str, count: int, interval_s: float) -> list[float]:
    """Each target's send time, in seconds from the round's start."""
    if mode == SPREAD:
        return [index * interval_s / count for index in range(count)]
    return [0.0] * count


def run_round(plan: RoundPlan, mode: str, agent_pid: int, bmc_pids: Sequence[int]) -> Round:
    """One interval: every target probed once at its offset, then idle to the end."""
    agent_cpu, bmcs_cpu = cpu_seconds([agent_pid]), cpu_seconds(bmc_pids)
    start = time.monotonic()
    futures: list[Future[Probe]] = []
    slots = offsets(mode, len(plan.targets), plan.interval_s)
    with ThreadPoolExecutor(plan.concurrency, thread_name_prefix="scrape") as pool:
        for target, offset in zip(plan.targets, slots, strict=True):
            slot = start + offset
            time.sleep(max(0.0, slot - time.monotonic()))
            url = plan.probe_url + target
            futures.append(pool.submit(probe_once, url, plan.scrape_timeout_s, slot))
    # the pool's exit waited for every probe, each bounded by the scrape timeout
    probes = tuple(f.result() for f in futures)
    time.sleep(max(0.0, start + plan.interval_s - time.monotonic()))
    wall = time.monotonic() - start
    return Round(
        mode=mode,
        probes=probes,
        wall_s=wall,
        agent_cpu_s=cpu_seconds([agent_pid]) - agent_cpu,
        bmcs_cpu_s=cpu_seconds(bmc_pids) - bmcs_cpu,
        agent_rss_mib=rss_mib(agent_pid),
        last_answer_s=max(o + p.start_lag_s + p.wall_s for o, p in zip(slots, probes, strict=True)),
    )
