"""The simulator refuses, in one line, a pynvml without what it touches; the agent does not
need it (pyproject.toml's floor is the agent's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nvwatch.sim import pynvml_check

_WITHOUT = """
import sys
import pynvml
delattr(pynvml, {name!r})
from nvwatch.agent.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("name", ["_nvmlLib_refcount", "NVML_NVLINK_VERSION_4_0"])
def test_simulate_on_a_pynvml_without_what_it_touches_is_one_line_and_exit_2(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT.format(name=name), "dump", "--simulate=dgx-h100"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "the simulator cannot run on the installed nvidia-ml-py" in done.stderr
    assert name in done.stderr


def test_the_agent_runs_without_it() -> None:
    # real mode on this GPU-less machine: NVML is down, the command works
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT.format(name="_nvmlLib_refcount"), "doctor",
         "--sources=nvml,host"],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert "nvml" in done.stdout and "Traceback" not in done.stderr, done.stderr


def test_the_installed_pynvml_has_it() -> None:
    assert pynvml_check.missing() == []
