"""`nvwatch doctor`'s findings: each source up, absent or down, as lines or JSON, and the
exit code a health check reads.

Exit codes: 0 when every source is up or absent (absent is hardware the node does not
have: nothing to fix) and at least one is up; 1 when a source is down (its hardware is
there and cannot be read: something to fix), a BMC asked for (--bmc-target) cannot be
read, or nothing at all can be collected; bad input is 2, as for every command
(agent/cli). systemd's ExecStartPre, a Kubernetes exec probe and Slurm's
HealthCheckProgram read that code (README, docs/deploy.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.poller import SourceStatus

if TYPE_CHECKING:
    from nvwatch.agent.sources.scheduler.source import SchedulerSource

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1


@dataclass(frozen=True)
class Finding:
    """One line of the report: a source, or the XID history, or the simulation."""

    name: str
    # up, absent, down; xid-history: up, limited; simulation: on; bmc-config: loaded
    state: str
    detail: str
    series: int | None = None  # what an up source serves
    duration_seconds: float | None = None  # how long its poll took
    extra: Mapping[str, Any] = field(default_factory=dict)  # more keys of its JSON

    def line(self) -> str:
        return f"{self.name:<11} {self.state:<8} {self.detail}"

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "detail": self.detail,
            "series": self.series,
            "duration_seconds": self.duration_seconds,
            **self.extra,
        }


def slurm_finding(source: SchedulerSource, simulated: bool) -> Finding:
    """The real commands the scheduler source runs and the SLURM_CONF they run with, or
    why it runs none: `--simulate` simulates a node, never Slurm, so an operator must see
    when a simulated agent reads a real cluster."""
    from nvwatch.agent.sources.scheduler.slurm_commands import SchedulerError

    commands = [list(argv) for argv in source.commands]
    import shlex  # doctor's output only: serve imports this module too

    shown = ", ".join(shlex.join(argv) for argv in commands)
    real = "the real Slurm (--simulate simulates the node, not Slurm): " if simulated else ""
    try:
        conf = str(source.slurm_conf())
    except SchedulerError as exc:
        none: dict[str, Any] = {"commands": [], "slurm_conf": None, "real_slurm": False}
        return Finding("slurm", "none", f"runs no Slurm command: {exc}", extra=none)
    extra: dict[str, Any] = {"commands": commands, "slurm_conf": conf, "real_slurm": True}
    return Finding("slurm", "runs", f"{real}{shown} with SLURM_CONF={conf}", extra=extra)


def source_finding(status: SourceStatus) -> Finding:
    """up: what it serves; absent: how we know the hardware is not there; down: why it
    cannot be read."""
    if status.absent:
        return Finding(status.name, status.state, status.absent_reason or "")
    if status.up and isinstance(status.prepared, FamilySet):
        series = sum(len(f.samples) for f in status.prepared)
        return Finding(
            status.name,
            status.state,
            f"{series} series in {status.duration_seconds:.3f}s",
            series=series,
            duration_seconds=status.duration_seconds,
        )
    return Finding(
        status.name, status.state, status.error or "", duration_seconds=status.duration_seconds
    )


@dataclass(frozen=True)
class Diagnosis:
    sources: tuple[Finding, ...]
    xid_history: Finding | None = None
    simulated: str | None = None  # the profile of a simulated node
    slurm: Finding | None = None  # the scheduler source's commands (slurm_finding)
    bmc: tuple[Finding, ...] = ()  # the BMC config and the BMCs read (agent/doctor_bmc.py)

    @property
    def down(self) -> tuple[Finding, ...]:
        return tuple(f for f in (*self.sources, *self.bmc) if f.state == "down")

    @property
    def collecting(self) -> bool:
        return any(f.state == "up" for f in self.sources)

    @property
    def exit_code(self) -> int:
        return EXIT_HEALTHY if self.collecting and not self.down else EXIT_UNHEALTHY

    def lines(self) -> list[str]:
        findings = [*self.sources]
        if self.xid_history is not None:
            findings.append(self.xid_history)
        if self.slurm is not None:
            findings.append(self.slurm)
        findings += self.bmc
        if self.simulated is not None:
            findings.append(
                Finding("simulation", "on", f"profile {self.simulated} (not real hardware)")
            )
        return [f.line() for f in findings]

    def as_json(self) -> dict[str, Any]:
        return {
            "healthy": self.exit_code == EXIT_HEALTHY,
            "exit_code": self.exit_code,
            "sources": [f.as_json() for f in self.sources],
            "xid_history": None if self.xid_history is None else self.xid_history.as_json(),
            "simulated_profile": self.simulated,
            "slurm": None if self.slurm is None else self.slurm.as_json(),
            "bmc": [f.as_json() for f in self.bmc],
        }


def diagnose(
    statuses: Iterable[SourceStatus],
    xid_history: Finding | None = None,
    simulated: str | None = None,
    slurm: Finding | None = None,
    bmc: Iterable[Finding] = (),
) -> Diagnosis:
    findings = tuple(source_finding(s) for s in statuses)
    return Diagnosis(findings, xid_history, simulated, slurm, tuple(bmc))
