"""The check's run: its options, its steps' records and their time budgets."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = ("summary.json", "summary.md", "raw.tar.gz", "check.log")
TOTAL_BUDGET_S = 450.0
RESERVE_S = 15.0  # kept back for the summary and the archive
WHEELS = REPO / ".whl"
NO_SMI_SIMULATED = (
    "skipped: simulated node; nvidia-smi reads the real driver, and the repository has no "
    "nvidia-smi stand-in for the simulator"
)


@dataclass
class Options:
    outdir: Path
    simulate: str | None = None
    total_budget: float = TOTAL_BUDGET_S
    serve_seconds: float = 60.0
    load_seconds: float = 45.0
    load_warmup: float = 8.0
    bench_seconds: float = 20.0
    timing_polls: int = 20
    settle: float = 1.0
    window: float = 3.0
    wheels: Path = WHEELS
    install: bool = True


@dataclass
class Step:
    name: str
    status: str  # ok | failed | timeout | skipped
    reason: str = ""
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)


class Run:
    """One check: the scratch folder, the clock, the steps taken, the log."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.deadline = self.started + options.total_budget
        self.scratch = Path(tempfile.mkdtemp(prefix="nvwatch-real-gpu-"))
        self.raw = self.scratch / "raw"
        self.raw.mkdir()
        self.steps: list[Step] = []
        self.data: dict[str, Any] = {}
        self.site: Path | None = None  # where nvwatch was installed (None: the tree)
        options.outdir.mkdir(parents=True, exist_ok=True)
        for name in OUTPUTS:
            with contextlib.suppress(FileNotFoundError):
                (options.outdir / name).unlink()
        self._log = (options.outdir / "check.log").open("a", encoding="utf-8")

    # --- time --------------------------------------------------------------------------

    def remaining(self) -> float:
        return self.deadline - RESERVE_S - time.monotonic()

    def budget(self, wanted: float) -> float | None:
        """The time a step may take now, or None when too little of the total is left."""
        left = self.remaining()
        if left < min(5.0, wanted):
            return None
        return min(wanted, left)

    def log(self, message: str) -> None:
        line = f"[{time.monotonic() - self.started:6.1f}s] {message}"
        print(line, flush=True)
        self._log.write(line + "\n")
        self._log.flush()

    def record(self, step: Step) -> Step:
        self.steps.append(step)
        detail = f": {step.reason}" if step.reason else ""
        self.log(f"{step.name}: {step.status} in {step.seconds:.1f}s{detail}")
        return step

    def skip(self, name: str, reason: str) -> Step:
        return self.record(Step(name, "skipped", reason))

    # --- environments ------------------------------------------------------------------

    def env(self, *, with_repo: bool = False) -> dict[str, str]:
        """The environment of a child: the installed nvwatch first (else the tree), the
        repository root after it for `benchmarks` when `with_repo`."""
        paths = [str(self.site)] if self.site is not None else [str(REPO)]
        if with_repo and str(REPO) not in paths:
            paths.append(str(REPO))
        existing = os.environ.get("PYTHONPATH")
        if existing:
            paths.append(existing)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1"}
        # a shell's NVWATCH_* settings must not change what the check runs
        for key in [k for k in env if k.startswith("NVWATCH_")]:
            del env[key]
        return env

    def nvwatch(self) -> list[str]:
        return [sys.executable, "-m", "nvwatch.agent.cli"]

    def in_nvml(self, argv: Sequence[str], scenario: str | None = None) -> list[str]:
        """`argv` where NVML is: as it is on a real node, under `simulate exec` here."""
        profile = self.options.simulate
        if profile is None:
            return list(argv)
        wrap = [*self.nvwatch(), "simulate", "exec", "--profile", profile]
        if scenario:
            wrap += ["--scenario", scenario]
        return [*wrap, "--", *argv]

    def agent_flags(self) -> list[str]:
        return ["--simulate", self.options.simulate] if self.options.simulate else []

    # --- running commands --------------------------------------------------------------

    def command(
        self,
        name: str,
        argv: Sequence[str],
        wanted: float,
        *,
        out: str | None = None,
        with_repo: bool = False,
        ok_codes: Sequence[int] = (0,),
    ) -> tuple[Step, str]:
        """Run `argv` within its budget; stdout to raw/`out`, stderr beside it.

        The child writes straight into files and runs in its own process group, which is
        killed whole at the budget; a child stuck in the driver that outlives even that
        is left behind (and said so) rather than holding up the run."""
        limit = self.budget(wanted)
        if limit is None:
            return self.skip(name, "skipped: the total time budget is spent"), ""
        started = time.monotonic()
        stdout_path = self.raw / (out or f"{name}.out")
        stderr_path = self.raw / f"{stdout_path.name}.stderr"
        try:
            with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
                process = subprocess.Popen(
                    list(argv),
                    stdout=stdout,
                    stderr=stderr,
                    stdin=subprocess.DEVNULL,
                    cwd=self.scratch,
                    env=self.env(with_repo=with_repo),
                    start_new_session=True,
                )
        except OSError as exc:
            return self.record(Step(name, "skipped", f"skipped: cannot run: {exc}")), ""
        timed_out = False
        try:
            process.wait(limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process)
        text = stdout_path.read_text(errors="replace")
        errors = stderr_path.read_text(errors="replace")
        files = [stdout_path.name] if out else []
        if not errors.strip():
            stderr_path.unlink()
        elif out:
            files.append(stderr_path.name)
        if not out:
            stdout_path.unlink()
        if timed_out:
            alive = " (it did not die: left behind)" if process.poll() is None else ""
            reason = f"stopped after its {limit:.0f}s budget{alive}"
            step = Step(name, "timeout", reason, time.monotonic() - started, files)
            return self.record(step), text
        status = "ok" if process.returncode in ok_codes else "failed"
        reason = "" if status == "ok" else f"exit {process.returncode}: {_last_line(errors)}"
        step = Step(name, status, reason, time.monotonic() - started, files)
        return self.record(step), text

    def probe(
        self, name: str, args: Sequence[str], wanted: float, scenario: str | None = None
    ) -> Step:
        argv = self.in_nvml([sys.executable, "-m", "benchmarks.real_gpu.probe", *args], scenario)
        step, _ = self.command(name, argv, wanted, out=f"{name}.log", with_repo=True)
        return step

    # --- finishing ---------------------------------------------------------------------

    def close(self) -> None:
        self._log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the child's whole process group, then a bounded wait."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5.0)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


# --- the steps -----------------------------------------------------------------------------
