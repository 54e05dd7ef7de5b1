"""The poller source `scheduler`: Slurm's queue and nodes, read off the poll path.

One thread (``nvwatch-scheduler``, see agent/threads.py) reads Slurm every `interval`
(30 s by default) and keeps the result; polls return what it kept, so no poll or scrape
waits on the controller. A refresh costs the controller exactly four RPCs, whatever the
number of jobs: `squeue --json` (REQUEST_JOB_INFO), `sinfo --json` (REQUEST_NODE_INFO,
REQUEST_PARTITION_INFO) and, through the fair-share reader, `sshare`
(REQUEST_SHARE_INFO). Each command runs through the source's SlurmClient: only with a
Slurm configuration, with a deadline (`timeout`) and a cap on its output, killed with
everything it started past either, so a refresh takes at most three deadlines; closing
the source kills a command still running.

Health: a refresh that could not read squeue or sinfo (missing, failing, hanging,
printing garbage, the controller down) makes the source down with that one-line reason
and serves nothing; a failed fair-share read serves the rest (`SourceDegraded`). A cache
older than two intervals plus a refresh's deadlines is down too: its numbers are old.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nvwatch.agent.sources import SourceDegraded, SourceUnavailable
from nvwatch.agent.sources.scheduler.fairshare import ARGV as SSHARE
from nvwatch.agent.sources.scheduler.model import AccountShare, SchedulerSample
from nvwatch.agent.sources.scheduler.slurm_commands import SchedulerError, SlurmClient
from nvwatch.agent.sources.scheduler.slurm_json import parse_jobs, parse_nodes
from nvwatch.agent.sources.scheduler.tally import Tally
from nvwatch.agent.threads import start_thread

log = logging.getLogger(__name__)

SQUEUE = ("squeue", "--json")
SINFO = ("sinfo", "--json")


class ShareRow(Protocol):
    """What the fair-share reader returns per account."""

    @property
    def account(self) -> str: ...
    @property
    def shares_norm(self) -> float: ...
    @property
    def usage_effective(self) -> float: ...
    @property
    def factor(self) -> float | None: ...


# (argv, timeout_s, env) -> the command's output; SchedulerError when it fails
CommandRunner = Callable[[Sequence[str], float, Mapping[str, str] | None], str]
# (timeout_s, env, run) -> the accounts' fair share, or None when the cluster has no
# accounting; sshare runs through `run`, as squeue and sinfo do
FairShareReader = Callable[
    [float, Mapping[str, str] | None, CommandRunner], Sequence[ShareRow] | None
]


@dataclass(frozen=True)
class _Cache:
    sample: SchedulerSample | None
    error: str | None  # why the last refresh failed (or, with a sample, its fair share)
    at: float  # monotonic time of the refresh


class SchedulerSource:
    name = "scheduler"

    def __init__(
        self,
        *,
        interval: float,
        timeout: float,
        max_accounts: int,
        max_users: int = 0,
        env: Mapping[str, str] | None = None,
        fairshare: FairShareReader | None = None,
        client: SlurmClient | None = None,
        first_wait: float = 3.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self._env = env
        self._fairshare = fairshare
        self.client = SlurmClient() if client is None else client
        self._first_wait = first_wait
        self._clock = clock
        self._tally = Tally(max_accounts, max_users)
        self.stale_after = 2 * interval + 3 * timeout
        self._cache: _Cache | None = None
        self._refreshed = threading.Event()
        self._stop = threading.Event()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def collect(self) -> SchedulerSample:
        self.start()  # on the first poll, in the poller's context; then a no-op
        if not self._refreshed.wait(self._first_wait):
            raise SourceUnavailable(
                f"the first read of Slurm has not finished after {self._first_wait:g} s"
            )
        cache = self._cache
        assert cache is not None  # set before the event
        age = time.monotonic() - cache.at
        if age > self.stale_after:
            raise SourceUnavailable(
                f"no refresh of Slurm for {age:.0f} s (limit {self.stale_after:g} s)"
            )
        if cache.sample is None:
            raise SourceUnavailable(cache.error or "no sample")
        if cache.error is not None:
            raise SourceDegraded(cache.sample, cache.error)
        return cache.sample

    def start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = start_thread("nvwatch-scheduler", self._loop, daemon=True)

    @property
    def commands(self) -> tuple[tuple[str, ...], ...]:
        """The argv of each command a refresh runs, in turn."""
        return (SQUEUE, SINFO) if self._fairshare is None else (SQUEUE, SINFO, SSHARE)

    def slurm_conf(self) -> Path:
        """The slurm.conf the commands run with; SchedulerError (one line) when none is
        found, and then no command runs."""
        return self.client.find_conf(self._env)

    def close(self) -> None:
        self._stop.set()
        # a command in flight would outlive a process that exits now (`doctor`): kill it
        self.client.close()
        if self._thread is not None:
            self._thread.join(0.5)

    def read_first(self) -> None:
        """Read Slurm now, in the caller's thread, bounded by each command's timeout:
        `doctor` then reports what this read found (squeue's own error) instead of a
        first read still running when its one poll comes. The loop, once started,
        reads again only an interval later."""
        if not self._refreshed.is_set():
            self.refresh()

    def _loop(self) -> None:
        if self._refreshed.is_set():  # read_first() read Slurm already
            self._stop.wait(self.interval)
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.interval)

    def refresh(self) -> SchedulerSample | None:
        """Read Slurm once and publish the result; the sample, or None when it failed."""
        try:
            sample, error = self._read()
        except SchedulerError as exc:
            sample, error = None, str(exc)
        except Exception as exc:  # a bug must cost this source, not the agent's process
            log.exception("reading Slurm failed")
            sample, error = None, f"{type(exc).__name__}: {exc}"
        self._cache = _Cache(sample, error, time.monotonic())
        self._refreshed.set()
        return sample

    def _read(self) -> tuple[SchedulerSample, str | None]:
        jobs = parse_jobs(self.client.run(SQUEUE, self.timeout, self._env))
        now = self._clock()  # the moment of the queue the sample describes
        nodes = parse_nodes(self.client.run(SINFO, self.timeout, self._env))
        shares, error = self._read_fairshare()
        return self._tally.update(jobs, nodes, shares, now), error

    def _read_fairshare(self) -> tuple[tuple[AccountShare, ...] | None, str | None]:
        if self._fairshare is None:
            return None, None
        try:
            rows = self._fairshare(self.timeout, self._env, self.client.run)
        except SchedulerError as exc:
            return None, str(exc)
        if rows is None:
            return None, None
        return tuple(
            AccountShare(r.account, r.shares_norm, r.usage_effective, r.factor) for r in rows
        ), None
