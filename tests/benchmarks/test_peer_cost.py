"""A short real run of the nvitop-exporter side by side (benchmarks/peer_cost.py): both
exporters start, are scraped and measured, and stop. Shapes and positive numbers only.

nvitop-exporter comes from this interpreter or a throwaway venv (pip, PyPI); where it
cannot be installed the test skips, except in CI, where that is a failure."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from benchmarks import peer_cost
from benchmarks.peer_cost import NVWATCH_CONFIGS, PeerUnavailable, measure_peer_cost
from benchmarks.report import Results, verdicts


@pytest.mark.timeout(90)
def test_a_short_run_measures_both_exporters_and_stops_them(tmp_path: Path) -> None:
    # daemons of session fixtures (a backfilled Prometheus) may already run in this process
    before = set(psutil.Process().children(recursive=True))
    cost = measure_peer_cost(
        "dgx-h100", 1.0, seconds=2.0, warmup=1.0, log_dir=tmp_path, configs=NVWATCH_CONFIGS[:1]
    )
    if cost.peer is None:
        message = f"nvitop-exporter not measured: {cost.unavailable}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    assert cost.peer.name.startswith("nvitop-exporter 1.7.")
    (nvwatch,) = cost.nvwatch
    assert nvwatch.name == "nvwatch --sources=nvml --nvlink-detail=gpu"
    for exporter in (cost.peer, nvwatch):
        assert exporter.scrapes >= 2 and exporter.seconds >= 1.9
        # eight simulated GPUs: hundreds of samples each, and CPU spent polling them
        assert exporter.samples > 200 and exporter.cpu_ms_per_s > 0
        assert exporter.us_per_s_per_sample > 0
    (row,) = [v for v in verdicts(Results(settings={}, peer=cost)) if "exported sample" in v.target]
    assert row.figure.startswith(f"{nvwatch.name}: ") and f"vs {cost.peer.name}: " in row.figure
    # every process the run started is gone: the exporters, simulate exec, the job workers
    assert set(psutil.Process().children(recursive=True)) - before == set()


def test_an_exporter_that_cannot_be_installed_is_a_miss_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(venv: Path) -> tuple[list[str], str]:
        raise PeerUnavailable(f"pip install failed in {venv.name}: no index")

    monkeypatch.setattr(peer_cost, "peer_command", unavailable)
    cost = measure_peer_cost("dgx-h100", 1.0, 1.0, 0.0, tmp_path, configs=())
    assert cost.peer is None and cost.nvwatch == []
    assert cost.unavailable is not None and "no index" in cost.unavailable
    (row,) = verdicts(Results(settings={}, peer=cost))
    assert not row.passed and row.figure.startswith("not measured: pip install failed")
