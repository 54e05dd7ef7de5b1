"""One scenario syntax (nvwatch.agent.config.SCENARIO_SYNTAX) in serve/dump, `simulate exec`,
`simulate fleet` and NVWATCH_SCENARIO; --onset and --time-scale for exec; one-line
errors (exit 2, no traceback) that use the user's words; nothing left in TMPDIR."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvwatch.sim.nvml import SimulatedNvml

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("NVWATCH_")}

# a pynvml script: is GPU 3 answering now, and after WAIT seconds?
PROBE = """
import sys, time, pynvml
pynvml.nvmlInit()
def state(i):
    try:
        pynvml.nvmlDeviceGetTemperature(pynvml.nvmlDeviceGetHandleByIndex(i), 0)
        return "ok"
    except pynvml.NVMLError_GpuIsLost:
        return "lost"
before = state(3)
time.sleep(float(sys.argv[1]))
print(before, state(3), state(2))
"""


def _nvwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NVWATCH, *args], capture_output=True, text=True, timeout=90, env=env or CLEAN_ENV
    )


def _exec_probe(*options: str, wait: float, env: dict[str, str] | None = None) -> str:
    completed = _nvwatch(
        "simulate", "exec", "--profile", "dgx-h100", *options, "--",
        sys.executable, "-c", PROBE, str(wait), env=env,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "Traceback" not in completed.stderr
    return completed.stdout.strip()


def test_exec_takes_a_gpu_target_and_an_onset() -> None:
    # gpu-lost: XID 79, then lost 2 simulated seconds later; onset 0: from the start
    assert _exec_probe("--scenario", "gpu-lost@3", "--onset", "0", wait=3.0) == "ok lost ok"


def test_exec_time_scale_brings_the_default_onset_forward() -> None:
    # the default onset (30 s) + 2 s to the loss = 32 simulated s = 1.6 real s at x20
    assert _exec_probe("--scenario", "gpu-lost@3", "--time-scale", "20", wait=2.5) == ("ok lost ok")
    # the same without a time scale: still healthy 2.5 s in
    assert _exec_probe("--scenario", "gpu-lost@3", wait=2.5) == "ok ok ok"


def test_exec_takes_from_in_the_spec_like_serve() -> None:
    assert _exec_probe("--scenario", "gpu-lost@3,from=0", wait=3.0) == "ok lost ok"


def test_one_nvwatch_scenario_value_means_the_same_to_every_command() -> None:
    env = {**CLEAN_ENV, "NVWATCH_SCENARIO": "gpu-lost@3,from=0"}
    assert _exec_probe(wait=3.0, env=env) == "ok lost ok"
    dump = _nvwatch(
        "dump", "--simulate", "dgx-h100", "--sources", "nvml", "--settle", "3s", env=env
    )
    assert dump.returncode == 0, dump.stderr
    assert 'nvwatch_gpu_up{gpu="3",' in dump.stdout
    up = {
        line.split('gpu="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
        for line in dump.stdout.splitlines()
        if line.startswith("nvwatch_gpu_up{")
    }
    assert up["3"] == "0.0" and up["2"] == "1.0"
    fleet = _nvwatch(
        "simulate", "fleet", "--profile", "dgx-h100", "--nodes", "2", "--base-port", "0",
        "--listen-host", "127.0.0.1", "--duration", "1s", env=env,
    )  # fmt: skip
    assert fleet.returncode == 0, fleet.stderr
    nodes = [line for line in fleet.stdout.splitlines() if line.startswith("dgx-00")]
    # the table may pad a last column (jobs) that these nodes leave empty
    assert len(nodes) == 2 and all(line.rstrip().endswith("gpu-lost@3,from=0s") for line in nodes)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpu-lost@9", "gpu-lost@9: no GPU 9 in dgx-h100; gpu-lost needs a GPU index 0..7"),
        ("ib-congestion@mlx5_99", "no device 'mlx5_99' in dgx-h100 for ib-congestion"),
        ("meltdown", "unknown scenario 'meltdown'"),
        ("gpu-lost@3,from=soon", "invalid scenario 'gpu-lost@3,from=soon'"),
        ("fan-failure@9", "fan-failure@9: no FAN9 in dgx-h100; fan-failure takes FAN 1..4"),
        ("hot-aisle@warm", "hot-aisle@RISE takes the inlet's rise in °C"),
    ],
)
@pytest.mark.parametrize("command", ["exec", "dump", "fleet"])
def test_bad_scenarios_are_one_line_with_exit_2(spec: str, message: str, command: str) -> None:
    if command == "exec" and spec.startswith("ib-"):
        message = "an InfiniBand scenario; `simulate exec` simulates NVML only"
    if command == "exec" and spec.startswith(("fan-", "hot-")):
        message = "a scenario of the node's chassis; `simulate exec` simulates NVML only"
    args = {
        "exec": ["simulate", "exec", "--profile", "dgx-h100", "--scenario", spec, "--", "true"],
        "dump": ["dump", "--simulate", "dgx-h100", "--scenario", spec, "--settle", "0"],
        "fleet": ["simulate", "fleet", "--profile", "dgx-h100", "--nodes", "1",
                  "--base-port", "0", "--scenario", f"0:{spec}", "--duration", "1s"],
    }[command]  # fmt: skip
    completed = _nvwatch(*args)
    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.splitlines()
    assert line.startswith("nvwatch: error: ") and message in line, line


def test_exec_refuses_a_bad_onset_and_time_scale() -> None:
    for option, value in (("--onset", "soon"), ("--time-scale", "0")):
        completed = _nvwatch(
            "simulate", "exec", "--profile", "dgx-h100", option, value, "--", "true"
        )
        assert completed.returncode == 2
        assert len(completed.stderr.splitlines()) == 1, completed.stderr


@pytest.mark.parametrize(
    "spec", ["ib-congestion@mlx5_99", "ib-hca-vanish@nic7", "gpu-lost@9", "ib-degraded@3"]
)
def test_a_bad_target_leaves_nothing_in_tmpdir(spec: str, tmp_path: Path) -> None:
    env = {**CLEAN_ENV, "TMPDIR": str(tmp_path)}
    for args in (
        ["dump", "--simulate", "dgx-h100", "--scenario", spec, "--settle", "0"],
        ["serve", "--simulate", "dgx-h100", "--scenario", spec, "--listen", "127.0.0.1:0"],
    ):
        completed = _nvwatch(*args, env=env)
        assert completed.returncode == 2, completed.stderr
        assert list(tmp_path.iterdir()) == [], completed.stderr


def test_a_good_run_cleans_up_too(tmp_path: Path) -> None:
    env = {**CLEAN_ENV, "TMPDIR": str(tmp_path)}
    completed = _nvwatch("dump", "--simulate", "dgx-h100", "--settle", "0", env=env)
    assert completed.returncode == 0, completed.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_library_names_a_bad_gpu_in_scenario_words() -> None:
    with pytest.raises(ValueError) as caught:
        SimulatedNvml("dgx-h100", gpu_scenarios={9: "gpu-lost"})
    assert str(caught.value) == "gpu-lost@9: no GPU 9 in dgx-h100 (GPUs 0..7)"
