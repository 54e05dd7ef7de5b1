"""A Prometheus and promtool of this machine, run on a TSDB in a directory of our own.

The evaluator starts Prometheus on 127.0.0.1 only, on a port the kernel just gave out,
serves a TSDB of backfilled blocks, and stops it by its pid. Whatever goes wrong
(a tool missing, a server that exits, promtool refusing a file) is an EvaluationError
whose message is one line.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

LOOPBACK = "127.0.0.1"
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 15.0
QUERY_TIMEOUT_S = 300.0


class EvaluationError(Exception):
    """The evaluation cannot go on; the message, one line, says why."""


def tool(name: str) -> str:
    """The path of `name` on PATH; EvaluationError when it is not there."""
    path = shutil.which(name)
    if path is None:
        raise EvaluationError(
            f"{name} not found on PATH: the evaluation runs the mixin's rules in a real "
            "Prometheus (Debian: apt-get install prometheus)"
        )
    return path


def promtool(*args: str, timeout: float) -> None:
    """Run `promtool ARGS`; its last line of output in an EvaluationError on failure."""
    try:
        done = subprocess.run(
            [tool("promtool"), *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise EvaluationError(f"promtool {args[0]} {args[1]} ran past {timeout:.0f}s") from exc
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        raise EvaluationError(f"promtool {' '.join(args[:3])}: {lines[-1][:300]}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


class LocalPrometheus:
    """Prometheus on `tsdb`, its lookback `lookback_s` (a backfilled series has no
    staleness marker where it ends: a short lookback stands in for one)."""

    def __init__(self, tsdb: Path, workdir: Path, *, lookback_s: float) -> None:
        self.tsdb = tsdb
        self.workdir = workdir
        self.lookback_s = lookback_s
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LocalPrometheus:
        config = self.workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\n", encoding="utf-8")
        port = free_port()
        self.url = f"http://{LOOPBACK}:{port}"
        log = self.workdir / "prometheus.log"
        argv = [
            tool("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={self.tsdb}",
            # retention counts back from the newest sample: keep every block
            "--storage.tsdb.retention.time=36500d",
            f"--query.lookback-delta={self.lookback_s:g}s",
            f"--web.listen-address={LOOPBACK}:{port}",
            "--log.level=warn",
        ]
        with log.open("wb") as out:
            self._process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            self._wait_ready(log)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _wait_ready(self, log: Path) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
                raise EvaluationError(f"prometheus exited at start: {tail[0][:300]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise EvaluationError(f"prometheus on {self.url} not ready in {READY_TIMEOUT_S:.0f}s")

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Any]:
        """The matrix `expr` gives at `start`, `start + step`, ... up to `end`."""
        params = {"query": expr, "start": repr(start), "end": repr(end), "step": repr(step)}
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/query_range", data=body)
        try:
            with urllib.request.urlopen(request, timeout=QUERY_TIMEOUT_S) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as exc:
            detail = json.loads(exc.read() or b"{}").get("error", exc.reason)
            raise EvaluationError(f"prometheus refused a query: {str(detail)[:300]}") from exc
        except OSError as exc:
            raise EvaluationError(f"prometheus on {self.url}: {exc}") from exc
        return list(answer["data"]["result"])
