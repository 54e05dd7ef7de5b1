"""The load generator and the check's load step, with a stand-in for PyTorch (this
machine has neither PyTorch nor a GPU): the loop stops on time and says what it did,
and the step starts it, records under it and stops it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.real_gpu.check import Options, Run, step_load

REPO = Path(__file__).resolve().parents[2]

# just enough of torch's API for benchmarks/real_gpu/load.py, on the CPU
FAKE_TORCH = """
__version__ = "0.0-fake"
bfloat16 = uint8 = object()


class _Tensor:
    def __init__(self, n=1):
        self._n = n
    def numel(self):
        return self._n
    def pin_memory(self):
        return self
    def copy_(self, other, non_blocking=False):
        return self


class _Cuda:
    Stream = staticmethod(lambda device=None: object())
    @staticmethod
    def is_available():
        return True
    @staticmethod
    def synchronize(device=None):
        pass
    @staticmethod
    def get_device_name(device=None):
        return "Fake GPU"
    @staticmethod
    def stream(s):
        import contextlib
        return contextlib.nullcontext()


cuda = _Cuda()
device = lambda name: name
randn = lambda *shape, **kw: _Tensor()
empty = lambda n, **kw: _Tensor(n)
empty_like = lambda t, **kw: _Tensor(t.numel())
matmul = lambda a, b: _Tensor()
"""


@pytest.fixture
def fake_torch(tmp_path: Path) -> Path:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    return tmp_path


def test_the_load_stops_on_time_and_reports(fake_torch: Path, tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    env = {**os.environ, "PYTHONPATH": f"{fake_torch}{os.pathsep}{REPO}"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.real_gpu.load", "--seconds", "0.3", "--size", "64",
         "--copy-mib", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=30, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["device"] == "Fake GPU" and 0.3 <= result["seconds"] < 5
    assert result["products"] > 0 and result["h2d_bytes"] == result["products"] // 4 * 2**20


def test_without_pytorch_the_load_says_so(tmp_path: Path) -> None:
    pytest.importorskip("benchmarks")
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("this Python has PyTorch")
    out = tmp_path / "load.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.real_gpu.load", "--seconds", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=30, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 3
    assert "PyTorch not importable" in json.loads(out.read_text())["error"]


def test_the_load_step_runs_the_load_around_the_loaded_recording(
    fake_torch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(fake_torch))
    run = Run(Options(outdir=tmp_path / "out", load_seconds=2.0, load_warmup=0.5))
    try:
        run.data["environment"] = {"torch": "0.0-fake"}
        step_load(run)
        steps = {s.name: s for s in run.steps}
        # no NVML here: the recording fails with its reason, the load itself ran
        assert steps["record-load"].status == "failed"
        assert steps["load"].status == "ok", steps["load"]
        assert run.data["load"]["device"] == "Fake GPU"
    finally:
        run.close()
