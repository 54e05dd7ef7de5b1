"""The shipped unit's `MemoryDenyWriteExecute=yes` is safe for the agent: nothing it loads
(CPython, grpc's C core for the kubelet, bcrypt for basic auth, OpenSSL for TLS, psutil,
ctypes for NVML) maps memory writable and executable or makes data executable.

PID 1 here is not systemd, so the restriction is applied as systemd applies it, by
`tests/deploy/mdwe.py`: its seccomp filter, and the kernel's prctl that newer systemd uses.
First a control shows each one refuses a writable, executable mapping; then `doctor` (the
unit's ExecStartPre) and `serve` run under it with TLS, basic auth and Kubernetes
attribution over gRPC, and every source must read and every GPU be served.
The real libnvidia-ml.so is not here; it is a plain shared library that dlopen maps
without a writable, executable page, which the kernel and the filter allow.
"""

from __future__ import annotations

import base64
import http.client
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvwatch.sim.ports import free_port
from tests.attribution.kubelet_server import Pod, fake_kubelet
from tests.attribution.test_agent import Series, series_of
from tests.processes import stop

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "nvwatch.service"
NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
MODES = ("seccomp", "prctl")
WRITABLE_EXECUTABLE = (
    "import mmap; mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)"
)


def _under(mode: str, argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "tests.deploy.mdwe", mode, "--", *argv]


def test_the_shipped_unit_denies_writable_executable_memory() -> None:
    lines = UNIT.read_text(encoding="utf-8").splitlines()
    assert "MemoryDenyWriteExecute=yes" in lines


@pytest.mark.parametrize("mode", MODES)
def test_the_restriction_refuses_a_writable_executable_mapping(mode: str) -> None:
    free = subprocess.run([sys.executable, "-c", WRITABLE_EXECUTABLE], capture_output=True)
    assert free.returncode == 0, free.stderr
    denied = subprocess.run(
        _under(mode, [sys.executable, "-c", WRITABLE_EXECUTABLE]), capture_output=True, text=True
    )
    assert denied.returncode == 1
    assert "PermissionError" in denied.stderr


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `web-config init` directory whose certificate also names 127.0.0.1."""
    out = tmp_path_factory.mktemp("mdwe") / "web"
    argv = [*NVWATCH, "web-config", "init", "--out", str(out), "--host", "127.0.0.1"]
    done = subprocess.run([*argv, "--bcrypt-cost", "4"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def _scrape(port: int, web: Path, password: str) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(web / "nvwatch.crt"))
    user = (web / "prometheus.username").read_text(encoding="utf-8")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    client = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        client.request("GET", "/metrics", headers={"Authorization": f"Basic {token}"})
        response = client.getresponse()
        return response.status, response.read().decode()
    finally:
        client.close()


@pytest.fixture
def agent_port(tmp_path: Path) -> Iterator[tuple[int, list[subprocess.Popen[str]]]]:
    processes: list[subprocess.Popen[str]] = []
    yield free_port(), processes
    for process in processes:
        stop(process)


def _poll(process: subprocess.Popen[str], port: int, web: Path, done: object) -> Series:
    """Scrape until `done(series)` holds; bounded, and failing at once if the agent died."""
    password = (web / "prometheus.password").read_text(encoding="utf-8")
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, process.communicate()[1]
        try:
            status, body = _scrape(port, web, password)
            series = series_of(body) if status == 200 else {}
        except ConnectionError:
            series = {}
        if done(series):  # type: ignore[operator]
            return series
        assert time.monotonic() < deadline, f"not served as expected: {sorted(series)[:20]}"
        time.sleep(0.2)


def _allocated_pod(series: Series) -> list[tuple[str, str]]:
    return [(x["gpu"], x["pod"]) for x, _ in series.get("nvwatch_gpu_allocation_info", [])]


@pytest.mark.parametrize("mode", MODES)
def test_serve_runs_under_it_with_tls_basic_auth_and_grpc(
    mode: str, tmp_path: Path, web: Path, agent_port: tuple[int, list[subprocess.Popen[str]]]
) -> None:
    port, processes = agent_port
    socket = tmp_path / "pod-resources" / "kubelet.sock"
    argv = [
        *NVWATCH,
        "serve",
        "--simulate",
        "dgx-h100",
        "--sources",
        "nvml,infiniband,host",
        "--attribution",
        "kubernetes",
        "--kubelet-socket",
        str(socket),
        "--attribution-interval",
        "1s",
        "--interval",
        "1s",
        "--web-config",
        str(web / "web-config.yml"),
        "--listen",
        f"127.0.0.1:{port}",
    ]
    with fake_kubelet(socket) as kubelet:
        process = subprocess.Popen(_under(mode, argv), stderr=subprocess.PIPE, text=True)
        processes.append(process)
        first = _poll(process, port, web, lambda s: "nvwatch_gpu_info" in s)
        uuid = next(x["uuid"] for x, _ in first["nvwatch_gpu_info"] if x["gpu"] == "6")
        kubelet.set_pods(Pod("ml", "train-0", {"worker": [("nvidia.com/gpu", [uuid])]}))
        series = _poll(process, port, web, lambda s: _allocated_pod(s) == [("6", "train-0")])
    up = {x["source"]: v for x, v in series["nvwatch_agent_source_up"]}
    assert up == {"nvml": 1, "infiniband": 1, "host": 1, "attribution": 1}
    gpus_up = sorted(int(x["gpu"]) for x, v in series["nvwatch_gpu_up"] if v == 1)
    assert gpus_up == list(range(8))
    # the hash is checked in the agent: a wrong password is still refused under it
    assert _scrape(port, web, "wrong")[0] == 401
    assert process.poll() is None
    if mode == "seccomp":  # the agent itself is filtered (the launcher exec'd into it)
        status = Path(f"/proc/{process.pid}/status").read_text(encoding="utf-8")
        assert "Seccomp:\t2" in status.splitlines()


@pytest.mark.parametrize("mode", MODES)
def test_doctor_runs_under_it(mode: str) -> None:
    argv = [*NVWATCH, "doctor", "--simulate", "dgx-h100", "--sources", "nvml,host"]
    done = subprocess.run(_under(mode, argv), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    status = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines() if line}
    assert (status["nvml"], status["host"]) == ("up", "up")
    assert "Traceback" not in done.stderr
