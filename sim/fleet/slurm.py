"""A simulated fleet's Slurm client commands: squeue, sinfo and sshare on a PATH of their own.

The fleet's queue (queue.py) is the controller; these are its client commands. A
directory holds three small executables named like Slurm's, each printing what the queue
looked like at the fleet's last tick (sim/queue/slurm_out.py renders it; the fleet rewrites the
files after every step of the queue, each whole or not at all). An agent whose PATH
starts with that directory runs, times and parses them exactly as it does Slurm's own,
through the same subprocess; asked anything but what the scheduler source asks, they
fail as a client would, with one line on stderr. Their environment names a slurm.conf of
their own (SLURM_CONF): the agent runs no Slurm command without a configuration, and a
real Slurm client reached by mistake would find this loopback cluster, never the host's.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from nvwatch.sim.queue.model import QueueModel
from nvwatch.sim.queue.slurm_out import sinfo_json, squeue_json, sshare_text

# command -> (the arguments it answers, the file it prints)
COMMANDS = {
    "squeue": ("--json", "squeue.json"),
    "sinfo": ("--json", "sinfo.json"),
    "sshare": (
        "--all --parsable2 --format=Account,User,NormShares,EffectvUsage,FairShare",
        "sshare.txt",
    ),
}


class SlurmCommands:
    """The executables and the texts they print, under `root`."""

    def __init__(self, root: Path, model: QueueModel, time_offset: float) -> None:
        self.root = root
        self.bin = root / "bin"
        self.model = model
        self.time_offset = time_offset
        self.bin.mkdir(parents=True, exist_ok=True)
        self.conf = root / "slurm.conf"
        self.conf.write_text(_CONF, encoding="utf-8")
        for command, (arguments, printed) in COMMANDS.items():
            script = self.bin / command
            script.write_text(_script(command, arguments, root / printed), encoding="utf-8")
            script.chmod(0o755)
        self.write()

    def write(self) -> None:
        """The queue as it is now, for the next command to print."""
        _write_atomic(self.root / "squeue.json", squeue_json(self.model, self.time_offset))
        _write_atomic(self.root / "sinfo.json", sinfo_json(self.model))
        _write_atomic(self.root / "sshare.txt", sshare_text(self.model))

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (this process's environment by default) with these commands first and
        their slurm.conf."""
        environ = dict(os.environ if base is None else base)
        environ["PATH"] = os.pathsep.join(filter(None, (str(self.bin), environ.get("PATH"))))
        environ["SLURM_CONF"] = str(self.conf)
        return environ

    def now(self) -> float:
        """The queue's time in Unix seconds: the clock of the sample a refresh describes."""
        return self.model.now + self.time_offset


# what the simulated commands "read": a cluster on loopback that no daemon serves
_CONF = (
    "# slurm.conf of a simulated Slurm (nvwatch simulate fleet --queue)\n"
    "ClusterName=simulated\n"
    "SlurmctldHost=localhost(127.0.0.1)\n"
)


def _script(command: str, arguments: str, printed: Path) -> str:
    return (
        "#!/bin/sh\n"
        f"# {command} of a simulated Slurm (nvwatch simulate fleet --queue)\n"
        f'if [ "$*" = {shlex.quote(arguments)} ]; then exec cat {shlex.quote(str(printed))}; fi\n'
        f"echo \"{command}: simulated: only '{command} {arguments}' is answered\" >&2\n"
        "exit 1\n"
    )


def _write_atomic(path: Path, text: str) -> None:
    """A command running meanwhile prints the old text or the new, never half of one."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
