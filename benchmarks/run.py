"""Measure what nvwatch costs per node, beside node_exporter's infiniband collector.

    python benchmarks/run.py [--quick] [--out docs/performance.md] [--real-nvml]

Poll-cycle CPU per simulated profile (split per source and render), /metrics latency
under wrk, RSS over many polls, series per node, node_exporter's infiniband collector
over the same simulated sysfs tree (latency and value-for-value equality), and
nvitop-exporter's process CPU per exported sample on the same simulated node (installed
into a throwaway venv when it is not importable).
Prints a markdown report and writes it to --out. Every figure comes from this run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    # run as a script: make the checkout importable as `benchmarks` and `agent`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.attribution_cost import PROCESSES as ATTRIBUTION_PROCESSES
from benchmarks.attribution_cost import PROFILE as ATTRIBUTION_PROFILE
from benchmarks.attribution_cost import measure_attribution_cost
from benchmarks.bmc_fleet_section import BEGIN as FLEET_BEGIN
from benchmarks.bmc_fleet_section import END as FLEET_END
from benchmarks.bmc_read_section import BEGIN as READ_BEGIN
from benchmarks.bmc_read_section import END as READ_END
from benchmarks.common import (
    REPO_ROOT,
    cpu_model,
    package_version,
    section_of,
    tool_version,
    with_section,
)
from benchmarks.nvml_calls import measure_nvml_calls
from benchmarks.peer_cost import measure_peer_cost
from benchmarks.poll_cost import (
    PROFILES,
    measure_poll_cost,
    measure_render_split,
    profile_poll,
)
from benchmarks.poll_cost import count_series as count_series_of
from benchmarks.real_nvml import RealNvmlUnavailable, measure_real_nvml
from benchmarks.report import Machine, Results, render_markdown
from benchmarks.rss import measure_rss
from benchmarks.scheduler_refresh import BEGIN as SCHEDULER_BEGIN
from benchmarks.scheduler_refresh import END as SCHEDULER_END
from benchmarks.scrape import (
    node_exporter_side_by_side,
    node_exporter_version,
    scrape_simulated_agent,
    scratch_logs,
)
from benchmarks.sim_cost import measure_fleet_cpu, measure_serve_cpu
from benchmarks.startup import measure as measure_startup

EXIT_NO_DRIVER = 2


@dataclasses.dataclass(frozen=True)
class Settings:
    profiles: tuple[str, ...] = PROFILES
    scrape_profile: str = "dgx-h100"
    polls: int = 500
    poll_seconds: float = 45.0  # cap per profile, so a slow machine still finishes
    warmup: int = 5
    profile_polls: int = 20
    render_repeats: int = 30
    attribution_polls: int = 200
    connections: tuple[int, ...] = (1, 16, 64)
    wrk_seconds: float = 5.0
    rss_polls: int = 10_000
    rss_warmup: int = 20
    # each of the two loops in its own process, side by side: the traced one (~60 ms a
    # poll under tracemalloc on this 2-core machine) needs ~10 min for 10,000 polls
    rss_seconds: float = 900.0
    real_nvml: bool = False
    # whole process, simulator included: serve at 1 s, and the seed's cluster as a fleet
    serve_cpu_interval: float = 1.0
    serve_cpu_seconds: float = 20.0
    serve_cpu_warmup: float = 8.0
    fleet_nodes: int = 124
    fleet_profile: str = "dgx1-v100"
    fleet_interval: float = 15.0
    fleet_periods: int = 3  # judged periods of 2 intervals, after a start-up one
    # nvitop-exporter and nvwatch one after the other, each scraped once a second
    peer_interval: float = 1.0
    peer_seconds: float = 20.0
    peer_warmup: float = 8.0

    @staticmethod
    def quick() -> Settings:
        return Settings(
            polls=20,
            poll_seconds=5.0,
            warmup=2,
            profile_polls=3,
            render_repeats=5,
            attribution_polls=20,
            wrk_seconds=1.0,
            rss_polls=200,
            rss_warmup=5,
            rss_seconds=25.0,
            serve_cpu_seconds=3.0,
            serve_cpu_warmup=2.0,
            fleet_nodes=4,
            fleet_interval=1.0,
            fleet_periods=1,
            peer_seconds=3.0,
            peer_warmup=2.0,
        )


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def collect(settings: Settings) -> Results:
    logs = scratch_logs()
    results = Results(settings=dataclasses.asdict(settings))
    try:
        if settings.real_nvml:
            log("real NVML: batched vs per-call reads on this machine's driver")
            results.real_nvml = measure_real_nvml(max(20, settings.polls // 5), 120.0)
        for profile in settings.profiles:
            log(f"poll cost: {profile}, up to {settings.polls} polls")
            results.poll_costs.append(
                measure_poll_cost(profile, settings.polls, settings.warmup, settings.poll_seconds)
            )
        log(f"profiling {settings.scrape_profile} ({settings.profile_polls} polls, cProfile)")
        results.nvml_split, results.poll_split = profile_poll(
            settings.scrape_profile, settings.profile_polls
        )
        results.render_split = measure_render_split(
            settings.scrape_profile, settings.render_repeats
        )
        for profile in settings.profiles:
            log(f"series: {profile}")
            results.series.append(count_series_of(profile))
        log(f"attribution: {ATTRIBUTION_PROFILE}, {ATTRIBUTION_PROCESSES} GPU processes, slurm")
        results.attribution = measure_attribution_cost(
            settings.attribution_polls, settings.warmup, settings.poll_seconds
        )
        for profile in settings.profiles:
            log(f"NVML calls per GPU per poll: {profile}")
            results.nvml_calls.append(measure_nvml_calls(profile))
        log(f"RSS: {settings.rss_polls} polls, at most {settings.rss_seconds:g}s")
        results.rss = measure_rss(
            settings.scrape_profile,
            settings.rss_polls,
            settings.rss_warmup,
            settings.rss_seconds,
        )
        log(f"wrk against nvwatch serve --simulate {settings.scrape_profile}")
        results.scrape = scrape_simulated_agent(
            settings.scrape_profile, settings.connections, settings.wrk_seconds, logs
        )
        log(f"process CPU of serve --simulate {settings.scrape_profile}")
        results.serve_cpu = measure_serve_cpu(
            settings.scrape_profile,
            settings.serve_cpu_interval,
            settings.serve_cpu_seconds,
            settings.serve_cpu_warmup,
            logs,
        )
        log(f"simulated fleet: {settings.fleet_nodes} {settings.fleet_profile} nodes")
        results.fleet_cpu = measure_fleet_cpu(
            settings.fleet_nodes,
            settings.fleet_profile,
            settings.fleet_interval,
            settings.fleet_periods,
        )
        log(f"nvitop-exporter side by side on a simulated {settings.scrape_profile}")
        results.peer = measure_peer_cost(
            settings.scrape_profile,
            settings.peer_interval,
            settings.peer_seconds,
            settings.peer_warmup,
            logs,
        )
        log("start-up of serve, real and simulated")
        results.startup = measure_startup("this checkout", dict(os.environ), REPO_ROOT, 3)
        log("node_exporter side by side on one frozen simulated tree")
        results.side_by_side = node_exporter_side_by_side(
            settings.scrape_profile,
            settings.connections,
            settings.wrk_seconds,
            logs,
        )
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    return results


def machine(command: str) -> Machine:
    return Machine(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        cpu=cpu_model(),
        cores=os.cpu_count() or 0,
        kernel=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        packages={
            name: package_version(name)
            for name in ("nvwatch", "prometheus-client", "nvidia-ml-py", "psutil")
        },
        tools={
            "wrk": tool_version(["wrk", "-v"]),
            "node_exporter": node_exporter_version(),
        },
        command=command,
    )


# the markers of the sections other benchmarks write, in their order in the document:
# this run does not measure them (they need real BMCs, the fleet takes minutes, the
# scheduler's refresh a real Slurm with a thousand jobs)
KEPT_SECTIONS = (
    (READ_BEGIN, READ_END),
    (FLEET_BEGIN, FLEET_END),
    (SCHEDULER_BEGIN, SCHEDULER_END),
)


def kept_sections(out: Path, text: str) -> str:
    """`text` with the sections of `out` that other benchmarks write, carried over as
    they are."""
    old = out.read_text() if out.exists() else ""
    for begin, end in KEPT_SECTIONS:
        kept = section_of(old, begin, end)
        if kept is not None:
            text = with_section(text, kept, begin, end)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts (~1 minute)")
    parser.add_argument("--out", type=Path, help="write the markdown report here")
    parser.add_argument(
        "--real-nvml",
        action="store_true",
        help="also time NvmlSource and batched vs per-call reads on the real driver",
    )
    parser.add_argument("--rss-polls", type=int, help="polls for the leak check")
    parser.add_argument("--rss-seconds", type=float, help="time cap of the leak check")
    args = parser.parse_args(argv)
    settings = Settings.quick() if args.quick else Settings()
    changes: dict[str, object] = {"real_nvml": args.real_nvml}
    if args.rss_polls is not None:
        changes["rss_polls"] = args.rss_polls
    if args.rss_seconds is not None:
        changes["rss_seconds"] = args.rss_seconds
    settings = dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
    shown = ["python", "benchmarks/run.py", *(argv if argv is not None else sys.argv[1:])]
    command = shlex.join(shown)
    # SIGTERM unwinds like Ctrl-C, so every finally block stops its servers and removes
    # its simulated trees
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    started = time.monotonic()
    try:
        results = collect(settings)
    except RealNvmlUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NO_DRIVER
    results.seconds = time.monotonic() - started
    text = render_markdown(results, machine(command))
    print(text)
    if args.out is not None:
        out = args.out if args.out.is_absolute() else Path.cwd() / args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(kept_sections(out, text))
        log(f"wrote {out.relative_to(REPO_ROOT) if out.is_relative_to(REPO_ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
