"""What a management host pays to probe a fleet's BMCs: one agent, many real BMCs.

    python -m benchmarks.bmc_fleet [--bmcs 124] [--rounds 3] [--interval 30]
        [--modes spread,burst] [--concurrency 32] [--update docs/performance.md] [--quick]

Starts `--bmcs` real BMCs (OpenIPMI's ipmi_sim on loopback, the tests' 11-sensor BMC
with DCMI where the plug-in builds; as many as this machine starts), and one real
`nvwatch serve --sources host --bmc-config FILE` (python-ipmi, as on a management host).
Every BMC is probed once to walk its SDR (not counted), the agent idles a while (its CPU
without probes), then `--rounds` scrape intervals per mode (benchmarks/bmc_rounds.py:
spread over the interval as Prometheus does, and all at once). Measured: probe wall time,
late and failed probes, the agent's CPU per interval and its RSS, and from them the
share of one core the agent needs for 124 BMCs scraped every 30 s: measured when this
run is that, else extrapolated linearly and labelled so. Every process it starts is
stopped by pid (SIGKILL after a grace period). `--update FILE` rewrites this section of
FILE in place; benchmarks/run.py keeps it when it rewrites the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bmc_fleet_section import BEGIN, END, fleet_section
from benchmarks.bmc_rounds import (
    BURST,
    MODES,
    Outcome,
    Round,
    RoundPlan,
    cpu_seconds,
    peak_rss_mib,
    rss_mib,
    run_round,
)
from benchmarks.common import (
    cpu_model,
    nvwatch_command,
    package_version,
    percentile,
    replace_section,
    running,
)
from nvwatch.agent.server.probe import DEFAULT_CACHE_S, DEFAULT_WORKERS
from nvwatch.sim.ports import LOOPBACK, free_port
from tests.bmc.ipmi_sim import build_dcmi_plugin
from tests.bmc.ipmi_sim_fleet import SimFleet, running_ipmi_sims
from tests.bmc.sim_sensors import NAMES, PASSWORD, USER

# the seed's cluster: one BMC per node, scraped at ipmi_exporter's usual 30 s
REFERENCE_BMCS = 124
REFERENCE_INTERVAL_S = 30.0
MODULE = "bench"
OPENIPMI_HEADER = Path("/usr/include/OpenIPMI/mcserv.h")  # the DCMI plug-in's build needs it


@dataclass(frozen=True)
class FleetSettings:
    bmcs: int = REFERENCE_BMCS
    rounds: int = 3  # judged intervals per mode
    interval_s: float = REFERENCE_INTERVAL_S
    modes: tuple[str, ...] = MODES
    concurrency: int = 32  # client connections at once in a burst (fewer than the agent queues)
    scrape_timeout_s: float = 10.0  # Prometheus's default scrape_timeout
    module_timeout_s: float = 5.0  # the module's `timeout`: a silent BMC's cost
    idle_s: float = 10.0  # the agent without probes, after the warm-up
    start_parallel: int = 8  # ipmi_sim starts side by side

    @staticmethod
    def quick() -> FleetSettings:
        return FleetSettings(bmcs=3, rounds=1, interval_s=2.0, modes=(BURST,), idle_s=1.0)

    @property
    def cache_s(self) -> float:
        """The agent's probe cache: its default, shorter than half an interval so that
        no judged probe is answered from it."""
        return max(0.1, min(DEFAULT_CACHE_S, self.interval_s / 2))


@dataclass(frozen=True)
class ModeCost:
    mode: str
    rounds: int
    probes: int
    ok: int
    late: int
    failed: int
    reasons: tuple[str, ...]  # distinct reasons of late and failed probes, a few
    wall_ms_p50: float
    wall_ms_p99: float
    wall_ms_max: float
    last_answer_s: float  # from an interval's start to its last answer, the largest
    agent_cpu_s: float  # per interval, median of the rounds
    agent_cpu_s_max: float
    cpu_ms_per_probe: float  # a round's CPU less the idle rate's share, per probe; median
    core_share: float  # of one core, at REFERENCE_BMCS every REFERENCE_INTERVAL_S; median
    core_share_max: float
    bmcs_cpu_s: float  # every ipmi_sim together, per interval, median
    agent_rss_mib: float  # the largest at a round's end


@dataclass(frozen=True)
class Probing:
    """What the agent did under the probes."""

    warmup_ok: int  # of the warm-up's probes (every SDR walked once), read
    warmup_wall_ms_max: float
    warmup_cpu_s: float  # the agent's, for the warm-up: every SDR walked once
    idle_core_share: float  # the agent's CPU without probes, share of one core
    agent_rss_warm_mib: float  # after the warm-up
    agent_rss_peak_mib: float  # high-water mark at the end
    modes: tuple[ModeCost, ...]


@dataclass(frozen=True)
class FleetCost:
    settings: FleetSettings
    started: int
    start_failures: tuple[str, ...]
    start_s: float
    bmcs_rss_mib: float  # every ipmi_sim together, once started
    sensors: int  # per BMC
    dcmi: bool
    probing: Probing
    workers: int  # the agent's BMC read pool
    machine: str
    cores: int
    memory_gib: float
    load: str  # load average at the start: this machine is shared
    date: str
    python_ipmi: str

    @property
    def reference_label(self) -> str:
        """How the 124-BMC figure was got: measured, or extrapolated from what ran."""
        if self.started == REFERENCE_BMCS and self.settings.interval_s == REFERENCE_INTERVAL_S:
            return "measured"
        return (
            f"extrapolated linearly from {self.started} BMCs every {self.settings.interval_s:g} s"
        )


def _dcmi_plugin(root: Path) -> Path | None:
    """The DCMI plug-in where it builds (gcc, libopenipmi-dev): reads as a DGX's BMC
    answers them; without it the BMCs have no DCMI and a read is one request shorter."""
    if shutil.which("gcc") is None or not OPENIPMI_HEADER.exists():
        return None
    return build_dcmi_plugin(root)


def _write_config(path: Path, settings: FleetSettings) -> None:
    path.write_text(
        f"modules:\n  {MODULE}:\n    user: {USER}\n    pass: {PASSWORD}\n"
        f"    driver: LAN_2_0\n    privilege: admin\n"
        f"    timeout: {round(settings.module_timeout_s * 1000)}\n"
        "    collectors: [ipmi, dcmi]\n"
    )


def _agent_argv(port: int, config: Path, settings: FleetSettings) -> list[str]:
    return [
        *nvwatch_command(),
        "serve",
        "--sources=host",
        f"--listen={LOOPBACK}:{port}",
        f"--bmc-config={config}",
        f"--bmc-cache={round(settings.cache_s * 1000)}ms",
    ]


def _mode_cost(mode: str, rounds: Sequence[Round], idle_rate: float, bmcs: int) -> ModeCost:
    probes = [p for r in rounds for p in r.probes]
    walls = [p.wall_s * 1e3 for p in probes]
    per_probe = [max(0.0, r.agent_cpu_s - idle_rate * r.wall_s) / bmcs for r in rounds]
    shares = [idle_rate + cpu * REFERENCE_BMCS / REFERENCE_INTERVAL_S for cpu in per_probe]
    count = {o: sum(p.outcome is o for p in probes) for o in Outcome}
    return ModeCost(
        mode=mode,
        rounds=len(rounds),
        probes=len(probes),
        ok=count[Outcome.OK],
        late=count[Outcome.LATE],
        failed=count[Outcome.FAILED],
        reasons=tuple(sorted({p.reason for p in probes if p.reason}))[:5],
        wall_ms_p50=percentile(walls, 50),
        wall_ms_p99=percentile(walls, 99),
        wall_ms_max=max(walls),
        last_answer_s=max(r.last_answer_s for r in rounds),
        agent_cpu_s=statistics.median(r.agent_cpu_s for r in rounds),
        agent_cpu_s_max=max(r.agent_cpu_s for r in rounds),
        cpu_ms_per_probe=statistics.median(per_probe) * 1e3,
        core_share=statistics.median(shares),
        core_share_max=max(shares),
        bmcs_cpu_s=statistics.median(r.bmcs_cpu_s for r in rounds),
        agent_rss_mib=max(r.agent_rss_mib for r in rounds),
    )


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _probe_fleet(fleet: SimFleet, agent_pid: int, port: int, settings: FleetSettings) -> Probing:
    """Warm-up, idle, then the judged rounds of each mode, against a running agent."""
    plan = RoundPlan(
        probe_url=f"http://{LOOPBACK}:{port}/probe?module={MODULE}&target=",
        targets=tuple(sim.address for sim in fleet.sims),
        interval_s=settings.interval_s,
        concurrency=settings.concurrency,
        scrape_timeout_s=settings.scrape_timeout_s,
    )
    _log(f"warm-up: every BMC probed once (its SDR walked), {settings.concurrency} at a time")
    warmup = run_round(dataclasses.replace(plan, interval_s=0.0), BURST, agent_pid, fleet.pids)
    idle_s = max(settings.idle_s, settings.cache_s + 0.5)  # the warm-up's answers expire
    _log(f"idle {idle_s:g} s: the agent's CPU without probes")
    before, began = cpu_seconds([agent_pid]), time.monotonic()
    time.sleep(idle_s)
    idle_rate = (cpu_seconds([agent_pid]) - before) / (time.monotonic() - began)
    modes = []
    for mode in settings.modes:
        rounds = []
        for index in range(settings.rounds):
            _log(f"{mode} round {index + 1}/{settings.rounds}: {settings.interval_s:g} s")
            rounds.append(run_round(plan, mode, agent_pid, fleet.pids))
        modes.append(_mode_cost(mode, rounds, idle_rate, len(fleet.sims)))
    return Probing(
        warmup_ok=sum(p.outcome is Outcome.OK for p in warmup.probes),
        warmup_wall_ms_max=max(p.wall_s for p in warmup.probes) * 1e3,
        warmup_cpu_s=warmup.agent_cpu_s,
        idle_core_share=idle_rate,
        agent_rss_warm_mib=warmup.agent_rss_mib,
        agent_rss_peak_mib=peak_rss_mib(agent_pid),
        modes=tuple(modes),
    )


def measure(settings: FleetSettings, root: Path) -> FleetCost:
    """Start the BMCs and the agent under `root`, probe, stop everything by pid."""
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    plugin = _dcmi_plugin(root)
    _log(f"starting {settings.bmcs} ipmi_sim, {settings.start_parallel} at a time")
    with running_ipmi_sims(root / "bmcs", settings.bmcs, plugin,
                           parallel=settings.start_parallel) as fleet:  # fmt: skip
        if not fleet.sims:
            raise RuntimeError(f"no ipmi_sim started: {'; '.join(fleet.failures[:3])}")
        _log(f"{len(fleet.sims)} of {settings.bmcs} started in {fleet.start_s:.1f} s")
        bmcs_rss = sum(rss_mib(pid) for pid in fleet.pids)
        config, port = root / "bmc.yml", free_port()
        _write_config(config, settings)
        argv = _agent_argv(port, config, settings)
        ready = f"http://{LOOPBACK}:{port}/healthz"
        with running(argv, ready, log=root / "agent.log") as agent:
            probing = _probe_fleet(fleet, agent.pid, port, settings)
        _log("stopping every ipmi_sim")
    return FleetCost(
        settings=settings,
        started=len(fleet.sims),
        start_failures=tuple(fleet.failures[:5]),
        start_s=fleet.start_s,
        bmcs_rss_mib=bmcs_rss,
        sensors=len(NAMES),
        dcmi=plugin is not None,
        probing=probing,
        workers=DEFAULT_WORKERS,
        machine=cpu_model(),
        cores=os.cpu_count() or 0,
        memory_gib=_memory_gib(),
        load=load,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        python_ipmi=package_version("python-ipmi"),
    )


def _memory_gib() -> float:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def update(path: Path, cost: FleetCost, command: str) -> None:
    replace_section(path, fleet_section(cost, command), BEGIN, END)


def _settings(args: argparse.Namespace) -> FleetSettings:
    base = FleetSettings.quick() if args.quick else FleetSettings()
    changes = {
        key: value
        for key, value in (
            ("bmcs", args.bmcs),
            ("rounds", args.rounds),
            ("interval_s", args.interval),
            ("concurrency", args.concurrency),
            ("modes", tuple(args.modes.split(",")) if args.modes else None),
        )
        if value is not None
    }
    settings = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    if settings.bmcs < 1 or settings.rounds < 1 or settings.concurrency < 1:
        raise SystemExit("error: --bmcs, --rounds and --concurrency must be at least 1")
    if not set(settings.modes) <= set(MODES) or not settings.modes:
        raise SystemExit(f"error: --modes is a comma-separated list of {', '.join(MODES)}")
    if not 1.0 <= settings.interval_s <= 300.0:
        raise SystemExit("error: --interval must be from 1 to 300 seconds")
    return settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bmcs", type=int, help=f"BMCs to start (default {REFERENCE_BMCS})")
    parser.add_argument("--rounds", type=int, help="scrape intervals per mode (default 3)")
    parser.add_argument("--interval", type=float, help="seconds per interval (default 30)")
    parser.add_argument("--concurrency", type=int, help="connections at once in a burst")
    parser.add_argument("--modes", help=f"comma-separated, of {','.join(MODES)} (default all)")
    parser.add_argument("--quick", action="store_true", help="3 BMCs, one 2 s burst round")
    parser.add_argument("--update", type=Path, help="rewrite this section of a markdown file")
    args = parser.parse_args(argv)
    settings = _settings(args)
    command = " ".join(["python -m benchmarks.bmc_fleet", *(argv or sys.argv[1:])])
    # SIGTERM unwinds like Ctrl-C, so every BMC and the agent are stopped by pid
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="nvwatch-bmc-fleet-") as root:
        cost = measure(settings, Path(root))
    json.dump(dataclasses.asdict(cost), sys.stdout, indent=2)
    print()
    if args.update:
        update(args.update, cost, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
