"""Small shared pieces: percentiles, machine facts, subprocess lifetimes."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def source_path(filename: str) -> str:
    """A code path readers can find: the checkout's file relative to the repository (the
    editable install reaches it through a tree of links in build/, which are followed), a
    library's from its package down."""
    path = Path(filename)
    with contextlib.suppress(OSError):
        path = path.resolve()
    parts = path.parts
    for marker in ("site-packages", "dist-packages"):  # a library, even in the checkout's .venv
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1 :])
    if path.is_relative_to(REPO_ROOT):
        return str(path.relative_to(REPO_ROOT))
    return filename if len(parts) < 2 else "/".join(parts[-2:])


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: an observed value, never an interpolation between two."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def tool_version(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "not available"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[0].strip() if lines else "unknown"


def scratch_dir(prefix: str) -> Path:
    """A fresh directory on tmpfs where there is one: sysfs lives in memory, and a disk
    filesystem would make the simulated tree's file writes dominate the run."""
    shm = Path("/dev/shm")
    parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def nvwatch_command() -> list[str]:
    """The agent as a separate process, from the same interpreter and checkout."""
    return [sys.executable, "-m", "nvwatch.agent.cli"]


def wait_for_http(url: str, timeout: float, process: subprocess.Popen[bytes]) -> None:
    """Until `url` answers 200; raise with the process's output if it dies or times out."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode} before ready")
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last_error = str(exc)
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready after {timeout:g}s: {last_error}")


def fetch(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body


@contextlib.contextmanager
def running(
    argv: Sequence[str], ready_url: str, *, ready_timeout: float = 30.0, log: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A server subprocess for the duration of the block; always terminated, then killed."""
    sink = open(log, "wb") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    process = subprocess.Popen(
        list(argv),
        stdout=sink,
        stderr=subprocess.STDOUT,
        cwd=REPO_ROOT,
        env=env,
        start_new_session=True,  # its own group, so a kill reaches any children too
    )
    try:
        wait_for_http(ready_url, ready_timeout, process)
        yield process
    finally:
        stop(process)
        if log is not None and not isinstance(sink, int):
            sink.close()


def stop(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(grace)


def with_section(text: str, section: str, begin: str, end: str) -> str:
    """`text` with its part from `begin` to `end` replaced by `section` (which carries
    both markers), or `section` appended at the end."""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        return head + section + ("\n" + tail if tail else "")
    return text.rstrip() + "\n\n" + section


def replace_section(path: Path, section: str, begin: str, end: str) -> None:
    """Rewrite one benchmark's section of `path` in place: each benchmark regenerates its
    own figures and leaves the rest of the document alone."""
    path.write_text(with_section(path.read_text(), section, begin, end))


def section_of(text: str, begin: str, end: str) -> str | None:
    """The part of `text` from `begin` to `end`, markers included; None without both."""
    if begin not in text or end not in text:
        return None
    return begin + text.split(begin, 1)[1].split(end, 1)[0] + end + "\n"
