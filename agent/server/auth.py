"""Basic auth against bcrypt hashes, with a bounded budget for the bcrypt work.

bcrypt is slow on purpose (tens of milliseconds at cost 10), so three things keep it from
becoming the attacker's lever:

- A credential checked once is remembered, keyed by an HMAC of user and password under
  a key made at start-up (the password itself is not kept), so an authorised scraper pays
  bcrypt once, not every scrape, and a client repeating a wrong password pays nothing
  more (exporter-toolkit caches both the same way).
- Every first check (wrong password, unknown user) costs exactly one bcrypt of the same
  cost: an unknown user is checked against a dummy hash of the configured cost, so the
  answer's timing does not tell which user names exist.
- bcrypt runs on a fixed number of worker threads with a short queue (ServerLimits); a
  request that finds no place is answered 429 at once, so a wrong-password flood costs
  at most those workers' cores and never delays verified scrapers. Which check waits and
  which runs next is the loop thread's Admission's business (agent/server/admission.py):
  clients known or new go before those whose checks keep failing.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import os
import queue
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import bcrypt

from nvwatch.agent.threads import start_thread

log = logging.getLogger(__name__)

# bcrypt reads the first 72 bytes of a password; Go's bcrypt and htpasswd do the same
# (the Python library raises instead), so a longer password is checked by those bytes.
_BCRYPT_BYTES = 72
_VERIFIED_SIZE = 64  # correct credentials remembered: only a valid password gets in
_BCRYPT_NICE = 10
_REFUSED_SIZE = 256  # wrong ones remembered; a flood of new passwords only cycles these


@dataclass(frozen=True)
class Pending:
    """A credential that needs one bcrypt check; `known` is False for an unknown user."""

    digest: bytes
    password: bytes
    hashed: bytes
    known: bool


def basic_credentials(header: str | None) -> tuple[bytes, bytes] | None:
    """(user, password) of an `Authorization: Basic` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = raw.partition(b":")
    return (user, password) if colon else None


def bcrypt_cost(hashed: bytes) -> int:
    return int(hashed.split(b"$")[2])


class BasicAuth:
    def __init__(self, users: Mapping[str, bytes]) -> None:
        self._users = {user.encode(): hashed for user, hashed in users.items()}
        # the web config refuses users of different costs (agent/webconfig.py): with two,
        # a known user of the lower cost would answer faster than an unknown user
        cost = max(bcrypt_cost(hashed) for hashed in users.values())
        # A valid salt of the configured cost and a checksum no password produces: checking
        # it costs one full bcrypt at that cost, like a known user's, and never succeeds.
        self._dummy = bcrypt.gensalt(rounds=cost, prefix=b"2b") + b"." * 31
        self._key = secrets.token_bytes(32)
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._refused: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, header: str | None) -> bool | Pending:
        """True or False for a remembered or missing credential, else the bcrypt to do."""
        credentials = basic_credentials(header)
        if credentials is None:
            return False
        user, password = credentials
        password = password[:_BCRYPT_BYTES]
        # length-prefixed, so ("ab", "c") and ("a", "bc") cannot share a digest
        framed = len(user).to_bytes(4, "big") + user + password
        digest = hmac.new(self._key, framed, hashlib.sha256).digest()
        with self._lock:
            if digest in self._verified:
                self._verified.move_to_end(digest)
                return True
            if digest in self._refused:
                return False
        hashed = self._users.get(user)
        return Pending(digest, password, hashed or self._dummy, hashed is not None)

    def verify(self, pending: Pending) -> bool:
        """The bcrypt check (slow: call it on a worker); remembers a success."""
        try:
            ok = bcrypt.checkpw(pending.password, pending.hashed)
        except ValueError:
            # hashes are validated at start-up (agent/webconfig.py); never drop the request
            log.warning("bcrypt could not check a password", exc_info=True)
            ok = False
        ok = ok and pending.known
        remembered, size = (
            (self._verified, _VERIFIED_SIZE) if ok else (self._refused, _REFUSED_SIZE)
        )
        with self._lock:
            remembered[pending.digest] = None
            while len(remembered) > size:
                remembered.popitem(last=False)
        return ok


Done = Callable[[object, bool], None]


class BcryptPool:
    """`workers` threads doing the bcrypt checks handed to them, in the order handed.

    Nothing waits in here by design: the loop thread's Admission keeps the waiting checks
    in its own order (agent/server/admission.py) and hands one over only when a worker is
    free, so the choice of what runs next is made as late as possible, and on one thread.
    """

    def __init__(self, auth: BasicAuth, workers: int) -> None:
        self._auth = auth
        self.workers = workers
        self._jobs: queue.Queue[tuple[Pending, object, Done] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads = [
            start_thread("nvwatch-http-auth", self._work, daemon=True) for _ in range(self.workers)
        ]

    def submit(self, pending: Pending, token: object, done: Done) -> None:
        """Start a check; `done(token, ok)` is called from the worker that made it."""
        self._jobs.put_nowait((pending, token, done))

    def stop(self, timeout: float) -> None:
        # drop checks not yet taken (their connections are being closed), then one stop
        # per worker
        with self._jobs.mutex:
            self._jobs.queue.clear()
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    def _work(self) -> None:
        # Below the loop thread's priority (Linux nice applies per thread): on a busy node
        # the scrapes the loop serves come first, strangers' bcrypt checks after.
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _BCRYPT_NICE)
        while (job := self._jobs.get()) is not None:
            pending, token, done = job
            try:
                ok = self._auth.verify(pending)
            except Exception:
                # a bug checking one credential refuses that request; the worker, which
                # every later check needs, lives on (the loop waits for every answer)
                log.exception("checking a credential failed; answering 401")
                ok = False
            done(token, ok)
