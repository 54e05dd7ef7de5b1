"""`scripts/real-gpu-check [--simulate PROFILE] OUTDIR`: nvwatch against a real GPU.

One command, no network, idempotent: every step has a time budget and the whole run a
total (7.5 minutes by default, under the 8 the GPU machine's single call leaves room
for); a step that cannot run says why in the summary instead of failing the run. OUTDIR
gets four files: summary.json, summary.md, raw.tar.gz (every raw output) and check.log.

With --simulate PROFILE the same steps run with the simulated NVML under pynvml (the
probes under `nvwatch simulate exec`, the agent with --simulate): what needs the real
driver's nvidia-smi says so, and everything else proves the code without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
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


def step_environment(run: Run) -> None:
    started = time.monotonic()
    facts = environment_facts()
    facts["simulated"] = run.options.simulate
    (run.raw / "environment.json").write_text(json.dumps(facts, indent=1) + "\n")
    run.data["environment"] = facts
    step = Step("environment", "ok", files=["environment.json"])
    notes = [n for n in facts["notes"] if n]
    step.reason = "; ".join(notes)
    step.seconds = time.monotonic() - started
    run.record(step)


def environment_facts() -> dict[str, Any]:
    release = platform.release()
    gvisor = release.startswith("4.4.0")
    kmsg = _kmsg_state()
    driver_dir, read_only = _driver_dir()
    notes = [
        "kernel 4.4.0: gVisor likely (no hardware counters, maybe no /dev/kmsg)" if gvisor else "",
        f"/dev/kmsg: {kmsg}" if kmsg != "readable" else "",
        f"driver folder {driver_dir} is read-only" if read_only else "",
    ]
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "kernel": release,
        "gvisor_likely": gvisor,
        "dev_kmsg": kmsg,
        "driver_dir": driver_dir,
        "driver_dir_read_only": read_only,
        "nvidia_smi": shutil.which("nvidia-smi"),
        "torch": _module_version("torch"),
        "cpus": os.cpu_count(),
        "notes": notes,
    }


def _kmsg_state() -> str:
    path = Path("/dev/kmsg")
    if not path.exists():
        return "absent"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return f"not readable ({exc.strerror})"
    try:
        os.read(fd, 8192)
    except BlockingIOError:
        pass  # readable, and empty
    except OSError as exc:
        return f"not readable ({exc.strerror})"
    finally:
        os.close(fd)
    return "readable"


def _driver_dir() -> tuple[str | None, bool]:
    import ctypes.util

    candidates = [Path("/usr/local/nvidia/lib64"), Path("/usr/lib/x86_64-linux-gnu")]
    found = ctypes.util.find_library("nvidia-ml")
    for folder in candidates:
        if (folder / "libnvidia-ml.so.1").exists():
            try:
                flags = os.statvfs(folder).f_flag
            except OSError:
                return str(folder), False
            return str(folder), bool(flags & os.ST_RDONLY) or not os.access(folder, os.W_OK)
    return found, False


def _module_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def package_dirs(root: Path = REPO) -> dict[str, str]:
    """pyproject.toml's [tool.setuptools.package-dir]: installed package -> folder."""
    text = (root / "pyproject.toml").read_text()
    try:
        import tomllib
    except ImportError:  # Python 3.10: the table's lines are simple enough to read
        block = text.split("[tool.setuptools.package-dir]", 1)[-1].split("\n[", 1)[0]
        pairs = re.findall(r'^"([\w.]+)"\s*=\s*"([\w./-]+)"', block, re.MULTILINE)
        return dict(pairs)
    table = tomllib.loads(text).get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return {str(k): str(v) for k, v in table.items()}


def step_install(run: Run) -> None:
    """pip install --no-index of a copy of the tree and of the carried wheels into a
    folder put first on PYTHONPATH: the image's Python keeps its own packages (PyTorch,
    pynvml, ...). Where pip cannot build nvwatch (an old setuptools, say), its packages
    are copied into that folder as pyproject.toml maps them, which is what the wheel holds."""
    name = "install"
    if not run.options.install:
        run.data["missing"] = _missing_line(run)
        run.skip(name, "skipped: --no-install; the nvwatch this Python imports is used")
        return
    limit = run.budget(120.0)
    if limit is None:
        run.skip(name, "skipped: the total time budget is spent")
        return
    started = time.monotonic()
    site, source = run.scratch / "site", run.scratch / "source"
    mapping = package_dirs()
    _copy_tree(source, ["pyproject.toml", "README.md", "LICENSE", *sorted(set(mapping.values()))])
    wheels = sorted(run.options.wheels.glob("*.whl")) if run.options.wheels.is_dir() else []
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile"]
    pip += ["--no-build-isolation", "--disable-pip-version-check", "--upgrade"]
    pip += ["--target", str(site)]
    log: list[str] = []
    for wheel in wheels:
        _pip(pip, str(wheel), log, limit - (time.monotonic() - started))
    built = _pip(pip, str(source), log, limit - (time.monotonic() - started))
    how = f"pip installed nvwatch and {len(wheels)} wheel(s) from {_shown(run.options.wheels)}"
    status = "ok"
    if not built or not (site / "nvwatch" / "agent").is_dir():
        for package, folder in mapping.items():
            target = site.joinpath(*package.split("."))
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(REPO / folder, target, ignore=shutil.ignore_patterns("__pycache__"))
        how = (
            "pip could not build nvwatch (install.log): its packages were copied as "
            f"pyproject.toml maps them; {len(wheels)} wheel(s) from {_shown(run.options.wheels)}"
        )
        status = "failed"
    (run.raw / "install.log").write_text("\n".join(log) + "\n")
    run.site = site
    run.data["missing"] = _missing_line(run)
    reason = how + (f"; {run.data['missing']}" if run.data["missing"] else "")
    run.record(Step(name, status, reason, time.monotonic() - started, ["install.log"]))


def _copy_tree(into: Path, items: list[str]) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for item in items:
        path = REPO / item
        if path.is_dir():
            shutil.copytree(path, into / item, ignore=shutil.ignore_patterns("__pycache__"))
        elif path.is_file():
            shutil.copy2(path, into / item)


def _pip(pip: list[str], target: str, log: list[str], seconds: float) -> bool:
    try:
        done = subprocess.run(
            [*pip, target],
            capture_output=True,
            text=True,
            timeout=max(5.0, seconds),
            check=False,
        )
    except subprocess.TimeoutExpired:
        log.append(f"$ pip install {target}: timed out")
        return False
    log.append(f"$ pip install {target} -> exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.returncode == 0


def _shown(path: Path) -> str:
    """A path as the summary shows it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


_CHECK_REQUIREMENTS = r"""
import json, re, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    Requirement = None
report = []
for text in json.loads(sys.argv[1]):
    name = re.split(r"[<>=!~;\[ ]", text, maxsplit=1)[0]
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        report.append([name, None, text])
        continue
    spec = Requirement(text).specifier if Requirement is not None else None
    if spec is not None and not spec.contains(version, prereleases=True):
        report.append([name, version, text])
print(json.dumps(report))
"""


def requirements(root: Path = REPO) -> list[str]:
    """pyproject.toml's [project] dependencies."""
    text = (root / "pyproject.toml").read_text()
    try:
        import tomllib
    except ImportError:
        block = text.split("dependencies = [", 1)[-1].split("\n]", 1)[0]
        return re.findall(r'^\s*"([^"]+)"', block, re.MULTILINE)
    return [str(r) for r in tomllib.loads(text).get("project", {}).get("dependencies", [])]


def _missing_line(run: Run) -> str:
    """One line: the agent's requirements that are missing or outside their range, as the
    Python that runs the agent sees them."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHECK_REQUIREMENTS, json.dumps(requirements())],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=run.scratch,
            env=run.env(),
            check=False,
        )
        report = json.loads(done.stdout)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        return "could not check nvwatch's requirements"
    if not report:
        return ""
    missing = [name for name, version, _ in report if version is None]
    off = [f"{name} {version} (needs {text})" for name, version, text in report if version]
    parts = []
    if missing:
        parts.append(
            f"missing: {', '.join(missing)} (put their CPython {sys.version_info[0]}."
            f"{sys.version_info[1]} manylinux x86-64 wheels in {_shown(run.options.wheels)})"
        )
    if off:
        parts.append("outside nvwatch's range: " + ", ".join(off))
    return "; ".join(parts)


SMI_VIEWS = (
    ("nvidia-smi-q", ["-q"], "nvidia-smi-q.txt", 40.0),
    ("nvidia-smi-topo", ["topo", "-m"], "nvidia-smi-topo.txt", 20.0),
    ("nvidia-smi-nvlink-s", ["nvlink", "-s"], "nvidia-smi-nvlink-s.txt", 20.0),
    ("nvidia-smi-nvlink-e", ["nvlink", "-e"], "nvidia-smi-nvlink-e.txt", 20.0),
    ("nvidia-smi-version", ["--version"], "nvidia-smi-version.txt", 10.0),
)
# fields read beside the agent's pairs (nvsmi_compare): identity and what the assumptions need
EXTRA_QUERY = (
    "index,name,uuid,pci.bus_id,driver_version,vbios_version,memory.total,memory.reserved,"
    "memory.used,clocks.max.sm,clocks.max.memory,power.default_limit,power.min_limit,"
    "power.max_limit,pcie.link.gen.max,pcie.link.width.max,mig.mode.current,mig.mode.pending"
)


def step_nvidia_smi(run: Run) -> None:
    from nvwatch.agent.nvsmi_compare import PAIRINGS

    names = [name for name, *_ in SMI_VIEWS] + ["nvidia-smi-query", "nvidia-smi-query-extra"]
    if run.options.simulate:
        for name in names:
            run.skip(name, NO_SMI_SIMULATED)
        return
    smi = shutil.which("nvidia-smi")
    if smi is None:
        for name in names:
            run.skip(name, "skipped: no nvidia-smi on this machine")
        return
    fields = ",".join(["index", *(p.query for p in PAIRINGS)])
    queries = (
        ("nvidia-smi-query", f"--query-gpu={fields}", "nvidia-smi-query.csv"),
        ("nvidia-smi-query-extra", f"--query-gpu={EXTRA_QUERY}", "nvidia-smi-query-extra.csv"),
    )
    for name, query, out in queries:
        run.command(name, [smi, query, "--format=csv"], 20.0, out=out)
    for name, args, out, wanted in SMI_VIEWS:
        run.command(name, [smi, *args], wanted, out=out)


def step_record(run: Run, phase: str, scenario: str | None) -> Step:
    o = run.options
    args = ["record", "--out", str(run.raw), "--phase", phase, "--settle", str(o.settle)]
    args += ["--timing-polls", str(o.timing_polls), "--window", str(o.window)]
    if o.simulate:
        args.append("--no-nvidia-smi")
    step = run.probe(f"record-{phase}", args, 90.0, scenario=scenario)
    step.files += [f.name for f in sorted(run.raw.glob(f"*-{phase}.*")) if f.name not in step.files]
    return step


def step_load(run: Run) -> None:
    """Idle recorded first; then the load generator, and the same recording under it."""
    o = run.options
    if o.simulate:
        run.skip(
            "load",
            "skipped: simulated node; the profile's training workload stands in for the "
            "PyTorch load (the loaded recording below runs under it)",
        )
        step_record(run, "load", None)
        return
    if run.data["environment"].get("torch") is None:
        run.skip("load", "skipped: PyTorch not importable here; no loaded recording")
        return
    if run.budget(o.load_seconds + 30) is None:
        run.skip("load", "skipped: the total time budget is spent")
        return
    started = time.monotonic()
    load_out = run.raw / "load.json"
    argv = [sys.executable, "-m", "benchmarks.real_gpu.load", "--seconds", str(o.load_seconds)]
    argv += ["--out", str(load_out)]
    with _process(argv, run, "load.log") as process:
        warm_until = time.monotonic() + o.load_warmup
        while time.monotonic() < warm_until and process.poll() is None:
            time.sleep(0.2)
        if process.poll() is not None:
            reason = _load_error(load_out) or f"the load exited with {process.returncode}"
            run.record(Step("load", "failed", reason, time.monotonic() - started, ["load.log"]))
            return
        step_record(run, "load", None)
    reason = "" if load_out.exists() else "the load wrote no result"
    result = json.loads(load_out.read_text()) if load_out.exists() else {}
    run.data["load"] = result
    if "error" in result:
        reason = result["error"]
    step = Step("load", "failed" if reason else "ok", reason, time.monotonic() - started)
    step.files = ["load.json", "load.log"]
    run.record(step)


def _load_error(path: Path) -> str | None:
    try:
        return str(json.loads(path.read_text()).get("error"))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _process(argv: Sequence[str], run: Run, log_name: str) -> Iterator[subprocess.Popen[bytes]]:
    """A child for the block: its own process group, stopped (TERM, then KILL) after."""
    with (run.raw / log_name).open("wb") as sink:
        process = subprocess.Popen(
            list(argv),
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=run.scratch,
            env=run.env(with_repo=True),
            start_new_session=True,
        )
        try:
            yield process
        finally:
            stop(process)


def stop(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        _kill_group(process)


def step_agent_views(run: Run) -> None:
    flags = run.agent_flags()
    nvwatch = run.nvwatch()
    run.command(
        "nvwatch-doctor",
        [*nvwatch, "doctor", *flags],
        40.0,
        out="nvwatch-doctor.txt",
        ok_codes=(0, 1),
    )
    for detail in ("link", "gpu"):
        run.command(
            f"nvwatch-dump-{detail}",
            [*nvwatch, "dump", "--nvlink-detail", detail, *flags],
            40.0,
            out=f"nvwatch-dump-{detail}.prom",
        )
    run.command(
        "nvwatch-topology", [*nvwatch, "topology", *flags], 30.0, out="nvwatch-topology.txt"
    )


def step_events(run: Run) -> None:
    step = run.probe("events", ["events", "--out", str(run.raw)], 40.0)
    step.files.append("events.json")


def step_device_queries(run: Run) -> None:
    """Every read-only pynvml device query on every GPU (tests/sim/every_device_query.py):
    the board's NotSupported set; on a real board also the simulator's for its profile."""
    script = str(REPO / "tests" / "sim" / "every_device_query.py")
    step, stdout = run.command(
        "device-queries",
        run.in_nvml([sys.executable, script]),
        60.0,
        out="device-queries.jsonl",
        ok_codes=(0, 1),  # 1: some query broke; the lines still say which
    )
    if step.status == "ok" and not stdout.strip():
        step.status = "failed"
        errors = run.raw / "device-queries.jsonl.stderr"
        step.reason = "no GPU answered: " + (
            _last_line(errors.read_text()) if errors.exists() else "no output"
        )
    if run.options.simulate:
        return
    profile = board_profile(run)
    if profile is None:
        run.skip("device-queries-simulated", "skipped: no simulated profile of this board")
        return
    argv = [*run.nvwatch(), "simulate", "exec", "--profile", profile, "--", sys.executable, script]
    run.command(
        "device-queries-simulated",
        argv,
        30.0,
        out="device-queries-simulated.jsonl",
        ok_codes=(0, 1),
    )


def board_profile(run: Run) -> str | None:
    """The simulated profile of the board the idle recording saw (by GPU name)."""
    if run.options.simulate:
        return run.options.simulate
    name = board_name(run.raw)
    if not name:
        return None
    from benchmarks.real_gpu.simulator import sim_module

    profiles = sim_module("profiles").PROFILES
    return next((p.name for p in profiles.values() if p.gpus[0].name == name), None)


def board_name(raw: Path) -> str | None:
    try:
        readings = json.loads((raw / "readings-idle.json").read_text())
        return str(readings["gpus"][0]["name"]["value"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def step_bench(run: Run) -> None:
    seconds = run.options.bench_seconds
    step = run.probe(
        "bench", ["bench", "--out", str(run.raw), "--seconds", str(seconds)], seconds + 20
    )
    step.files.append("bench-nvml.json")


def step_serve(run: Run) -> None:
    """`nvwatch serve` for serve_seconds, scraped once a second on 127.0.0.1."""
    from benchmarks.real_gpu.serve import measure_serve

    left = run.budget(run.options.serve_seconds + 30)
    if left is None:
        run.skip("serve", "skipped: the total time budget is spent")
        return
    seconds = min(run.options.serve_seconds, left - 20)
    if seconds < 2:
        run.skip("serve", "skipped: the total time budget is spent")
        return
    started = time.monotonic()
    argv = [*run.nvwatch(), "serve", "--interval", "1s", *run.agent_flags()]
    result = measure_serve(argv, seconds, run.raw, run.scratch, run.env())
    run.data["serve"] = result
    status = "ok" if result.get("scrapes") else "failed"
    step = Step("serve", status, result.get("error", ""), time.monotonic() - started)
    step.files = ["serve-samples.csv", "serve-last.prom", "serve.log"]
    run.record(step)


# --- the whole run -----------------------------------------------------------------------


def check(options: Options) -> int:
    from benchmarks.real_gpu.report import write_outputs

    run = Run(options)
    mode = f"SIMULATED ({options.simulate})" if options.simulate else "real driver"
    run.log(
        f"real-gpu-check: {mode}; total budget {options.total_budget:.0f}s; out {options.outdir}"
    )
    try:
        step_environment(run)
        step_install(run)
        step_nvidia_smi(run)
        step_record(run, "idle", "idle" if options.simulate else None)
        step_load(run)
        step_agent_views(run)
        step_events(run)
        step_device_queries(run)
        step_bench(run)
        step_serve(run)
        summary = write_outputs(run)
        for finding in summary["assumptions"]:
            run.log(f"assumption {finding['id']}: {finding['verdict']}")
        run.log(f"done in {time.monotonic() - run.started:.1f}s: {options.outdir}/summary.md")
    finally:
        run.close()
    return 0


def pack(raw: Path, archive: Path) -> None:
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(raw.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=f"raw/{path.relative_to(raw)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="real-gpu-check", description=__doc__.split("\n", 1)[0] if __doc__ else None
    )
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--simulate", metavar="PROFILE", help="run against the simulator")
    parser.add_argument("--total-seconds", type=float, default=TOTAL_BUDGET_S)
    parser.add_argument("--serve-seconds", type=float, default=60.0)
    parser.add_argument("--load-seconds", type=float, default=45.0)
    parser.add_argument("--bench-seconds", type=float, default=20.0)
    parser.add_argument("--timing-polls", type=int, default=20)
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--window", type=float, default=3.0, help="PCIe sampling seconds")
    parser.add_argument(
        "--wheels",
        type=Path,
        default=WHEELS,
        help="folder of the wheels to install (default: .whl at the repo root)",
    )
    parser.add_argument("--no-install", action="store_true", help="run nvwatch from the tree")
    args = parser.parse_args(argv)
    if args.simulate:
        from benchmarks.real_gpu.simulator import sim_module

        profiles = sim_module("profiles").PROFILES
        if args.simulate not in profiles:
            parser.error(f"unknown profile {args.simulate!r} (known: {', '.join(profiles)})")
    options = Options(
        outdir=args.outdir,
        simulate=args.simulate,
        total_budget=args.total_seconds,
        serve_seconds=args.serve_seconds,
        load_seconds=args.load_seconds,
        bench_seconds=args.bench_seconds,
        timing_polls=args.timing_polls,
        settle=args.settle,
        window=args.window,
        wheels=args.wheels,
        install=not args.no_install,
    )
    return check(options)


if __name__ == "__main__":
    sys.exit(main())
