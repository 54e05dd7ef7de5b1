"""The command lines of deploy/scale's systemd units, for the processes a test or the
scale benchmark starts: each unit's ExecStart with only the flags given replaced (ports,
paths, intervals), so a shipped flag the binaries reject fails there, not in production.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

SCALE = Path(__file__).resolve().parents[2] / "deploy" / "scale"


def unit_command(unit: str, overrides: dict[str, str], instance: str = "") -> list[str]:
    """argv of the unit's ExecStart, `-flag=value` replaced for every flag in overrides
    (values separated by newlines give a repeated flag, like vmalert's -rule); flags the
    unit does not give are appended. `%i` is the template instance."""
    text = (SCALE / unit).read_text(encoding="utf-8")
    (line,) = re.findall(r"^ExecStart=(.+)$", text, flags=re.M)
    argv = shlex.split(line.replace("%i", instance))
    out = [argv[0]]
    replaced: set[str] = set()
    for arg in argv[1:]:
        flag = arg.split("=", 1)[0].lstrip("-")
        if flag not in overrides:
            out.append(arg)
        elif flag not in replaced:
            replaced.add(flag)
            out.extend(f"-{flag}={v}" for v in overrides[flag].split("\n"))
    extra = [
        f"-{f}={v}" for f in sorted(set(overrides) - replaced) for v in overrides[f].split("\n")
    ]
    return out + extra
