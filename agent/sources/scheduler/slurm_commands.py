"""Running a Slurm client command (squeue, sinfo, sshare): only with a configuration,
with a deadline and a cap on its output (slurm_process.py runs it).

No configuration, no command: without a slurm.conf Slurm's configless mode asks DNS for
the controller's SRV record, a query off the machine that a host with no cluster should
never make. A configuration is SLURM_CONF naming a readable file, else one of the
standard locations (the packages' /etc/slurm/slurm.conf, and the copy slurmd or sackd
keeps in configless mode, /run/slurm/conf/slurm.conf); the command runs with SLURM_CONF
set to the one found, so what it reads is what `nvwatch doctor` names.

Every failure is a SchedulerError with one line saying why, so the source reports itself
down with that reason and the process and the other sources go on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from nvwatch.agent.config import SCHEDULER_MAX_OUTPUT_MIB
from nvwatch.agent.sources.scheduler.slurm_process import (
    Closed,
    Deadline,
    Overflow,
    ProcessGroups,
    collect,
)

STANDARD_CONF_PATHS = (Path("/etc/slurm/slurm.conf"), Path("/run/slurm/conf/slurm.conf"))
MIB = 2**20
_STDERR_LINE_CHARS = 200


class SchedulerError(Exception):
    """Slurm could not be read; the message is the one-line reason."""


class SlurmClient:
    """Runs the source's commands: finds the configuration, caps the output, and kills
    what is still running when closed. `conf_paths` are the locations searched when
    SLURM_CONF is not set (none: SLURM_CONF only), `conf_note` says why in the reason."""

    def __init__(
        self,
        max_output_bytes: int = SCHEDULER_MAX_OUTPUT_MIB * MIB,
        conf_paths: Sequence[Path] = STANDARD_CONF_PATHS,
        conf_note: str = "",
    ) -> None:
        self.max_output_bytes = max_output_bytes
        self.conf_paths = tuple(conf_paths)
        self.conf_note = conf_note
        self._groups = ProcessGroups()

    def find_conf(self, env: Mapping[str, str] | None = None) -> Path:
        """The slurm.conf a command would read; SchedulerError (one line) when none is."""
        environ = os.environ if env is None else env
        named = environ.get("SLURM_CONF", "")
        if named:
            if _readable_file(Path(named)):
                return Path(named)
            raise SchedulerError(
                f"SLURM_CONF names {named}, which is not a readable file; no Slurm command was run"
            )
        for path in self.conf_paths:
            if _readable_file(path):
                return path
        looked = " or ".join(str(p) for p in self.conf_paths)
        where = (
            f"SLURM_CONF is not set and {looked} is not readable"
            if looked
            else "SLURM_CONF is not set"
        )
        note = f" ({self.conf_note})" if self.conf_note else ""
        raise SchedulerError(
            f"no Slurm configuration: {where}{note}; set SLURM_CONF to the cluster's "
            "slurm.conf (no Slurm command was run)"
        )

    def run(
        self, argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None
    ) -> str:
        """The command's standard output; SchedulerError when there is no configuration,
        or it is missing, fails, hangs past `timeout_s`, prints more than the cap (it is
        killed, with what it started) or prints something that is not text."""
        conf = self.find_conf(env)
        child_env = {**(os.environ if env is None else env), "SLURM_CONF": str(conf)}
        try:
            process = self._groups.start(argv, child_env)
        except FileNotFoundError as exc:
            raise SchedulerError(f"{argv[0]} not found: is this a Slurm client host?") from exc
        except PermissionError as exc:
            raise SchedulerError(f"{argv[0]} cannot be run: {exc.strerror}") from exc
        except Closed as exc:
            raise SchedulerError(f"{argv[0]} not run: the scheduler source is closing") from exc
        kill = True
        try:
            done = collect(process, timeout_s, self.max_output_bytes)
            kill = False
        except Deadline as exc:
            raise SchedulerError(f"{argv[0]} did not finish within {timeout_s:g} s") from exc
        except Overflow as exc:
            raise SchedulerError(
                f"{argv[0]} printed more than {_size(self.max_output_bytes)}, the cap; raise "
                "--scheduler-max-output-mib for a queue this large"
            ) from exc
        finally:
            self._groups.end(process, kill)
        if done.returncode != 0:
            why = _first_line(done.stderr) or f"exit status {done.returncode}"
            raise SchedulerError(f"{argv[0]} failed: {why}")
        if done.stdout is None:
            raise SchedulerError(f"{argv[0]} printed bytes that are not UTF-8")
        return done.stdout

    def close(self) -> None:
        """Kill the commands running now (and all they started); start no other."""
        self._groups.close()


def run_slurm(argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None) -> str:
    """One command with the default cap and configuration search (SlurmClient.run)."""
    return SlurmClient().run(argv, timeout_s, env)


def _readable_file(path: Path) -> bool:
    return path.is_file() and os.access(path, os.R_OK)


def _size(size: int) -> str:
    return f"{size / MIB:g} MiB" if size >= MIB else f"{size:,} bytes"


def _first_line(stderr: bytes) -> str:
    text = stderr.decode(errors="replace").strip()
    line = text.splitlines()[0] if text else ""
    return line[:_STDERR_LINE_CHARS]
