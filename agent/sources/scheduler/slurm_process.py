"""One Slurm client command, run to its end or killed with everything it started.

Each command starts in a session (and process group) of its own: a site's `squeue` is
often a wrapper script that runs the real one without `exec`, and killing the wrapper
alone would leave its child running, one orphan per timed-out refresh. Past the deadline
or the output cap the whole group gets SIGKILL and the leader is reaped; the group is
killed before the leader is reaped, so its id cannot have been reused.

Standard output is read as it comes, up to a cap, and decoded on the way (so the bytes
and their text are never both held whole); standard error keeps its first few KB only
(the reason shown is its first line), the rest is read and dropped so the command never
blocks on a full pipe. The deadline covers the reads and the exit: a background child that
keeps the pipe open after the command exits cannot hold the read past it.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

STDERR_KEEP_BYTES = 4096
_READ_BYTES = 64 * 1024
_REAP_S = 5.0  # a SIGKILLed process is gone at once unless stuck in the kernel


class Deadline(Exception):
    """The command ran past its deadline."""


class Overflow(Exception):
    """The command printed more than the cap on standard output."""


class Closed(Exception):
    """The commands' owner is closing: no new command starts."""


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str | None  # None: what it printed is not UTF-8
    stderr: bytes  # the first STDERR_KEEP_BYTES


class ProcessGroups:
    """The commands running now, so that closing their owner (the source, when `doctor`
    exits before a command's deadline) ends them and everything they started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    def start(self, argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._closed:
                raise Closed
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(env),
                start_new_session=True,
            )
            self._running.add(process)
        return process

    def end(self, process: subprocess.Popen[bytes], kill: bool) -> None:
        """Forget `process`, kill its group first when `kill`, reap it, close its pipes."""
        with self._lock:
            if kill:
                _kill_group(process)
            self._running.discard(process)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(_REAP_S)
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()

    def close(self) -> None:
        """Kill every running command's group; later starts raise Closed."""
        with self._lock:
            self._closed = True
            for process in self._running:
                _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    # only while the leader is not reaped: until then no process can take its group id
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def collect(process: subprocess.Popen[bytes], timeout_s: float, max_stdout: int) -> Finished:
    """Read the command's output and wait for its exit, by the deadline; Deadline or
    Overflow (the caller kills the group) otherwise."""
    deadline = time.monotonic() + timeout_s
    stdout = _Text(max_stdout)
    stderr = bytearray()
    assert process.stdout is not None and process.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, stdout)
        selector.register(process.stderr, selectors.EVENT_READ, stderr)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Deadline
            for key, _ in selector.select(remaining):
                data = os.read(key.fd, _READ_BYTES)
                if not data:
                    selector.unregister(key.fileobj)
                elif key.data is stdout:
                    stdout.add(data)
                else:
                    stderr += data[: max(0, STDERR_KEEP_BYTES - len(stderr))]
    try:
        returncode = process.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired as exc:
        raise Deadline from exc
    return Finished(returncode, stdout.text(), bytes(stderr))


class _Text:
    """Standard output decoded as it arrives, counted against the cap in bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self._pieces: list[str] = []
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._utf8 = True

    def add(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise Overflow
        if self._utf8:
            try:
                self._pieces.append(self._decoder.decode(data))
            except UnicodeDecodeError:
                self._utf8 = False
                self._pieces.clear()

    def text(self) -> str | None:
        if not self._utf8:
            return None
        try:
            self._pieces.append(self._decoder.decode(b"", final=True))
        except UnicodeDecodeError:
            return None
        text = "".join(self._pieces)
        self._pieces.clear()
        return text
