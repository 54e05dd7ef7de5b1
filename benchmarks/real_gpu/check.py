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
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from benchmarks.common import stop as stop_process
from benchmarks.real_gpu.install import step_environment, step_install
from benchmarks.real_gpu.runner import (
    NO_SMI_SIMULATED,
    OUTPUTS,
    REPO,
    TOTAL_BUDGET_S,
    WHEELS,
    Options,
    Run,
    Step,
    _last_line,
)

__all__ = ["OUTPUTS", "Options", "Run", "Step"]


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
            stop_process(process)


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
