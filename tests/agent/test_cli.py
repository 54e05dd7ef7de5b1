from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import nvwatch.agent.cli as cli_module
from nvwatch.agent.cli import cli
from nvwatch.agent.config import AgentConfig, parse_listen
from nvwatch.common.durations import parse_duration
from nvwatch.dashboards.build import build_all
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.ports import free_port

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]


def _invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli, args, env=env)


def _one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got: {output!r}"
    assert lines[0].startswith("nvwatch: error: ")
    return lines[0]


@pytest.fixture
def unreadable_config(tmp_path: Path) -> str:
    return str(tmp_path / "does-not-exist.yaml")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["dump", "--sources", "host,gpus"], "unknown source gpus"),
        (["serve", "--interval", "5 parsecs"], "invalid interval"),
        (["serve", "--interval", "-1s"], "invalid interval"),
        (["serve", "--listen", "localhost"], "invalid listen address"),
        (["serve", "--listen", "127.0.0.1:99999"], "out of range"),
        (["dump", "--log-format", "xml"], "log-format"),
        (["dump", "--simulate", "dgx-9000", "--sources", "host"], "unknown hardware profile"),
        (["dump", "--scenario", "idle", "--sources", "host"], "--scenario needs --simulate"),
        (["dump", "--attribution", "slurm,lsf"], "unknown attribution mode lsf"),
        (["dump", "--attribution", "slurm", "--sources", "host"], "needs the nvml source"),
        (["dump", "--attribution-interval", "10ms"], "invalid attribution interval"),
        (["dump", "--hpc-job-mapping-dir", "/run/map"], "read by --attribution slurm"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], expected: str) -> None:
    result = _invoke(args)
    assert result.exit_code == 2, result.output
    assert expected in _one_line_error(result.output)


def test_unreadable_config_file(unreadable_config: str) -> None:
    result = _invoke(["dump", "--config", unreadable_config])
    assert result.exit_code == 2
    assert "cannot read config file" in _one_line_error(result.output)


def test_unknown_config_key(tmp_path: Path) -> None:
    path = tmp_path / "nvwatch.yaml"
    path.write_text("interval: 5s\nintervall: 10s\n")
    result = _invoke(["dump", "--config", str(path)])
    assert result.exit_code == 2
    assert "unknown key 'intervall'" in _one_line_error(result.output)


def test_config_file_that_is_not_yaml(tmp_path: Path) -> None:
    path = tmp_path / "nvwatch.yaml"
    path.write_text("interval: [5s\n")
    result = _invoke(["dump", "--config", str(path)])
    assert result.exit_code == 2
    assert "not valid YAML" in _one_line_error(result.output)


def test_listen_address_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _invoke(["serve", "--sources", "host", "--listen", f"127.0.0.1:{port}"])
    assert result.exit_code == 2
    assert "cannot listen on 127.0.0.1" in _one_line_error(result.output)


def test_precedence_flag_over_env_over_file_over_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[AgentConfig] = []

    def fake_poll(config: AgentConfig, sources: object, settle: float) -> Any:
        seen.append(config)
        raise SystemExit(0)

    monkeypatch.setattr(cli_module, "poll_and_render", fake_poll)
    path = tmp_path / "nvwatch.yaml"
    # interval: is serve's; dump leaves it to serve and takes the rest of the same file
    path.write_text("interval: 7s\nsources: [host]\nsysfs-root: /from/file\nseed: 3\n")
    args = ["dump", "--config", str(path)]
    env = {"NVWATCH_SEED": "9", "NVWATCH_SYSFS_ROOT": "/from/env"}
    assert _invoke([*args, "--seed", "11"], env=env).exit_code == 0
    assert _invoke(args, env=env).exit_code == 0
    assert _invoke(args).exit_code == 0
    assert _invoke(["dump", "--sources", "host"]).exit_code == 0
    flag, from_env, from_file, default = seen
    assert flag.seed == 11 and from_env.seed == 9 and from_file.seed == 3
    assert default.seed == 0
    assert from_env.sysfs_root == Path("/from/env") and from_file.sysfs_root == Path("/from/file")
    assert from_file.sources == ("host",)
    assert default.sysfs_root == Path("/sys")


def test_config_file_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[AgentConfig] = []
    monkeypatch.setattr(
        cli_module, "poll_and_render", lambda c, s, settle: (seen.append(c), sys.exit(0))
    )
    path = tmp_path / "nvwatch.yaml"
    path.write_text("seed: 4\nsources: host\n")
    assert _invoke(["dump"], env={"NVWATCH_CONFIG": str(path)}).exit_code == 0
    assert seen[0].seed == 4 and seen[0].sources == ("host",)


def test_parsers() -> None:
    assert parse_duration("500ms") == 0.5
    assert parse_duration("1.5m") == 90
    assert parse_duration("3") == 3
    assert parse_listen(":9477") == ("0.0.0.0", 9477)
    assert parse_listen("[::1]:9100") == ("::1", 9100)


def test_version() -> None:
    result = _invoke(["--version"])
    assert result.exit_code == 0 and "nvwatch, version" in result.output


# --- real subprocesses -----------------------------------------------------------------


def test_subprocess_bad_input_is_one_line_and_exit_2() -> None:
    completed = subprocess.run(
        [*NVWATCH, "serve", "--sources", "nvml,bogus"], capture_output=True, text=True, timeout=30
    )
    assert completed.returncode == 2
    assert "unknown source bogus" in _one_line_error(completed.stderr)
    assert completed.stdout == ""


def _wait_http(url: str, deadline: float) -> bytes:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return bytes(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize(
    ("signum", "sources"),
    [
        (signal.SIGTERM, ["--sources", "host"]),
        (signal.SIGINT, ["--sources", "host"]),
        # the simulated NVML has an XID listener thread blocked in nvmlEventSetWait
        (signal.SIGTERM, ["--simulate", "dgx-h100"]),
    ],
)
def test_serve_shuts_down_within_a_second(signum: int, sources: list[str]) -> None:
    port = free_port()
    process = subprocess.Popen(
        [*NVWATCH, "serve", *sources, "--interval", "1s",
         "--listen", f"127.0.0.1:{port}", "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        body = _wait_http(f"http://127.0.0.1:{port}/metrics", time.monotonic() + 20)
        assert b'nvwatch_agent_source_up{source="host"} 1.0' in body
        started = time.monotonic()
        process.send_signal(signum)
        process.wait(timeout=5)
        assert time.monotonic() - started < 1.0
        assert process.returncode == 0
        assert '"level": "info"' in (process.stderr.read() if process.stderr else "")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_without_a_gpu_reports_nvml_absent_and_serves_the_rest() -> None:
    """This machine has neither libnvidia-ml nor an NVIDIA PCI function: NVML is absent
    (up, no error counted, no page) with the reason, and no GPU is ever faked."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVWATCH_")}
    process = subprocess.Popen(
        [*NVWATCH, "serve", "--sources", "nvml,host", "--interval", "1s",
         "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        body = _wait_http(f"http://127.0.0.1:{port}/metrics", time.monotonic() + 20).decode()
        assert 'nvwatch_agent_source_up{source="nvml"} 1.0' in body
        assert 'nvwatch_agent_source_absent{source="nvml"} 1.0' in body
        assert 'nvwatch_agent_source_errors_total{source="nvml"} 0.0' in body
        assert 'nvwatch_agent_source_up{source="host"} 1.0' in body
        assert 'nvwatch_agent_source_absent{source="host"} 0.0' in body
        assert "nvwatch_gpu_" not in body
        landing = _wait_http(f"http://127.0.0.1:{port}/", time.monotonic() + 5).decode()
        assert "absent: no NVIDIA GPU on this node" in landing
    finally:
        process.terminate()
        process.wait(timeout=5)


def test_mixin_build_commands_write_files(tmp_path: Path) -> None:
    dashboards = _invoke(["dashboards", "build", "--out", str(tmp_path / "d")])
    assert dashboards.exit_code == 0, dashboards.output
    written = {path.name for path in (tmp_path / "d").glob("*.json")}
    assert written == set(build_all(MixinConfig()))  # one file per dashboard the builder knows
    alerts = _invoke(["alerts", "build", "--out", str(tmp_path / "a")])
    assert alerts.exit_code == 0, alerts.output
    assert (tmp_path / "a" / "nvwatch-alerts.yaml").read_text().startswith("groups:")


def test_mixin_build_rejects_an_unknown_config_key(tmp_path: Path) -> None:
    path = tmp_path / "mixin.yaml"
    path.write_text("job_selektor: 'job=\"x\"'\n")
    result = _invoke(["alerts", "build", "--out", str(tmp_path), "--config", str(path)])
    assert result.exit_code == 2
    assert "job_selektor" in _one_line_error(result.output)


def test_topology_on_a_simulated_dgx1_prints_the_cube_mesh() -> None:
    result = _invoke(["topology", "--simulate", "dgx1-v100"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[1:9]}
    assert rows["GPU0"][:5] == ["X", "NV1", "NV1", "NV2", "NV2"]
    assert rows["GPU0"][8] == "PIX"  # mlx5_0 shares GPU0's PCIe switch


def test_profiles_lists_every_profile() -> None:
    from nvwatch.sim.profiles import PROFILES

    result = _invoke(["profiles"])
    assert result.exit_code == 0
    for name in PROFILES:
        assert name in result.output


def test_simulate_exec_reaches_an_interpreter_outside_the_venv() -> None:
    """`simulate exec -- python ...` must work with a Python that has no pynvml itself."""
    base_python = getattr(sys, "_base_executable", sys.executable)
    code = (
        "import pynvml; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0);"
        "print(pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetName(h))"
    )
    completed = subprocess.run(
        [*NVWATCH, "simulate", "exec", "--profile", "dgx1-v100", "--", base_python, "-c", code],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "8 Tesla V100-SXM2-32GB"
