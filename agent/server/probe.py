"""/probe?target=HOST[:PORT]&module=NAME: one BMC's series, read when Prometheus asks.

The multi-target pattern of ipmi_exporter and snmp_exporter: a management host runs one
agent with `--bmc-config`, and Prometheus relabels each BMC address into `target`. A read
runs on a worker of a bounded pool, never on the server's loop, and is answered within
the module's timeout whatever the BMC does: a BMC that does not answer is
`nvwatch_bmc_up 0` for that target only, and holds one worker, not the loop nor another
target. Reads of one target and module within `cache_s` share one result, so a pair of
HA Prometheus servers costs the BMC one session, not two. With an allowlist
(agent/server/probe_allow.py), a target off it is answered 403 and sent nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

from nvwatch.agent.server.deferred import Deferred
from nvwatch.agent.server.request import Request
from nvwatch.agent.server.responses import Response, refusal
from nvwatch.agent.sources.bmc.reading import (
    DEFAULT_IPMI_PORT,
    DEFAULT_MODULE,
    BmcError,
    BmcReader,
    BmcReading,
    Module,
    Target,
)
from nvwatch.agent.threads import thread_pool

log = logging.getLogger(__name__)

PROBE_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_CACHE_S = 5.0
# a BMC that does not answer holds a worker until its module's timeout: this many of them
# at once before a healthy BMC's read waits for a worker (a blocked thread costs a stack)
DEFAULT_WORKERS = 64
# reads queued or running at most, per worker; past it a probe is refused at once (503)
# rather than queued behind reads that would make it late anyway
_QUEUE_PER_WORKER = 4
# the loop answers a read still running this long after the module's timeout itself
_LATE_GRACE_S = 0.5
_MAX_HOST = 253  # the longest DNS name


class Render(Protocol):
    """Writes one probe's body (agent/exposition/bmc.py): a reading, or a failure's reason
    and how long the read tried."""

    def __call__(
        self,
        reading: BmcReading | None,
        failure: str | None,
        module: Module,
        *,
        duration_s: float | None = None,
    ) -> bytes: ...


BUSY = refusal(503, "too many BMC reads in flight, retry later", None, (("Retry-After", "1"),))


class ProbeError(ValueError):
    """A /probe request that names no BMC this agent can read: answered 400."""


def parse_target(text: str) -> Target:
    """`host`, `host:port`, `[v6]:port` or a bare IPv6 address, as ipmi_exporter takes it."""
    text = text.strip()
    if not text or len(text) > _MAX_HOST + 8 or any(c.isspace() or c in "/?#@" for c in text):
        raise ProbeError("target must be a BMC's host or host:port")
    host, port = text, DEFAULT_IPMI_PORT
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ProbeError("target: a bracketed IPv6 address is [address] or [address]:port")
        port = _port(rest[1:]) if rest else port
    elif text.count(":") == 1:
        host, _, digits = text.partition(":")
        port = _port(digits)
    if not host:
        raise ProbeError("target names no host")
    return Target(host, port)


def _port(digits: str) -> int:
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 5 and 0 < int(digits) < 65536):
        raise ProbeError("target's port must be a number from 1 to 65535")
    return int(digits)


class ProbeService:
    """Answers /probe requests: cached, coalesced, bounded reads on a pool of workers."""

    def __init__(
        self,
        modules: Mapping[str, Module],
        reader: BmcReader,
        render: Render,
        *,
        cache_s: float = DEFAULT_CACHE_S,
        workers: int = DEFAULT_WORKERS,
        clock: Callable[[], float] = time.monotonic,
        allowed: Callable[[str], bool] | None = None,
    ) -> None:
        self._modules, self._reader, self._render = modules, reader, render
        self._allowed = allowed  # a target's host -> whether it may be sent IPMI
        self._cache_s, self._clock = cache_s, clock
        self._limit = workers * _QUEUE_PER_WORKER
        self._pool = thread_pool("nvwatch-bmc", workers)
        self._lock = threading.Lock()
        self._cached: dict[tuple[Target, str], tuple[float, Response]] = {}
        self._reading: dict[tuple[Target, str], Future[Response]] = {}

    def respond(self, request: Request) -> Response | Deferred:
        try:
            target, module = self._parse(request.target)
        except ProbeError as exc:
            return refusal(400, str(exc), None)
        if self._allowed is not None and not self._allowed(target.host):
            # before the cache too: a read made before the list changed is not served
            return refusal(403, f"target {target.host} is not on --bmc-allow: nothing sent", None)
        key = (target, module.name)
        with self._lock:
            now = self._clock()
            cached = self._cached.get(key)
            if cached is not None and now - cached[0] < self._cache_s:
                return cached[1]
            future = self._reading.get(key)
            if future is None:
                if len(self._reading) >= self._limit:
                    return BUSY
                future = self._pool.submit(self._read, target, module)
                self._reading[key] = future
        late = self._failed(
            module,
            f"no answer from {target} within {module.timeout_s:g} s",
            module.timeout_s + _LATE_GRACE_S,
        )
        return Deferred(future, module.timeout_s + _LATE_GRACE_S, late)

    def close(self) -> None:
        """Stop taking reads; running ones end on their own timeouts (not waited for)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _parse(self, request_target: str) -> tuple[Target, Module]:
        query = parse_qs(urlsplit(request_target).query, max_num_fields=8)
        targets = query.get("target", [])
        if len(targets) != 1:
            raise ProbeError("give exactly one target=HOST[:PORT]")
        name = (query.get("module") or [DEFAULT_MODULE])[-1]
        module = self._modules.get(name)
        if module is None:
            known = ", ".join(sorted(self._modules)) or "none"
            raise ProbeError(f"unknown module {name[:60]!r} (the BMC config has: {known})")
        return parse_target(targets[0]), module

    def _read(self, target: Target, module: Module) -> Response:
        try:
            response = self._answer(target, module)
        finally:
            with self._lock:
                self._reading.pop((target, module.name), None)
        return response

    def _answer(self, target: Target, module: Module) -> Response:
        began = time.monotonic()
        try:
            reading = self._reader.read(target, module)
        except BmcError as exc:
            log.warning("BMC %s (module %s) not read: %s", target, module.name, exc)
            response = self._failed(module, str(exc), time.monotonic() - began)
        except Exception as exc:  # a bug in reading one BMC costs that target only
            log.exception("BMC %s (module %s): internal error", target, module.name)
            response = self._failed(module, f"internal error: {exc}", time.monotonic() - began)
        else:
            response = Response(200, self._render(reading, None, module), PROBE_CONTENT_TYPE)
        with self._lock:
            self._cached[(target, module.name)] = (self._clock(), response)
            self._forget_stale()
        return response

    def _failed(self, module: Module, reason: str, tried_s: float | None = None) -> Response:
        body = self._render(None, reason, module, duration_s=tried_s)
        return Response(200, body, PROBE_CONTENT_TYPE)

    def _forget_stale(self) -> None:
        # a target probed once and never again must not be kept for the process's life
        now = self._clock()
        for key in [k for k, (at, _) in self._cached.items() if now - at >= self._cache_s]:
            del self._cached[key]
