"""nvidia-smi's views as the check reads them, and the verdicts it draws from readings:
written out by hand, so a real run's numbers land in the verdict they should."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.real_gpu import smi
from benchmarks.real_gpu.assumptions import pcie_unit, violation_ns
from benchmarks.real_gpu.evidence import Evidence
from benchmarks.real_gpu.finding import CONFIRMED, INCONCLUSIVE, ONE_GPU, WRONG, Finding
from benchmarks.real_gpu.nvlink_assumptions import nvlink_speed

NVLINK_S = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b2c)
\t Link 0: 26.562 GB/s
\t Link 1: <inactive>
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-3d4e)
\t Link 0: 26.562 GB/s
"""
NVLINK_E = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b2c)
\t Link 0: Replay Errors: 0
\t Link 0: Recovery Errors: 2
\t Link 0: CRC Errors: 0
\t Link 12: Replay Errors: 5
"""
QUERY = """
==============NVSMI LOG==============

Driver Version                            : 580.159.04
Attached GPUs                             : 1
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    FB Memory Usage
        Total                             : 81559 MiB
        Reserved                          : 551 MiB
    Clocks Event Reasons
        SW Power Cap                      : Not Active
    Clocks Event Reasons Counters
        SW Power Capping                  : 40148 us
        Sync Boost                        : 0 us
    Retired Pages
        Single Bit ECC                    : N/A
    Temperature
        GPU Shutdown Temp                 : 92 C
        GPU Slowdown Temp                 : 89 C
"""


def test_nvidia_smi_views_are_read() -> None:
    assert smi.nvlink_speeds(NVLINK_S) == {0: {0: 26.562, 1: None}, 1: {0: 26.562}}
    counters = smi.nvlink_counters(NVLINK_E)[0]
    assert counters[0] == {"replay errors": 0, "recovery errors": 2, "crc errors": 0}
    assert counters[12] == {"replay errors": 5}
    (gpu,) = smi.query_sections(QUERY)
    assert gpu["bus_id"] == "00000000:18:00.0"
    assert smi.number(gpu["FB Memory Usage/Total"]) == 81559
    assert smi.number(smi.find(gpu, "Counters/SW Power Capping")) == 40148
    assert smi.number(gpu["Retired Pages/Single Bit ECC"]) is None
    assert smi.number(smi.find(gpu, "GPU Slowdown Temp")) == 89


def _evidence(tmp_path: Path, files: dict[str, Any], profile: str | None = None) -> Evidence:
    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content)
        (tmp_path / name).write_text(text)
    return Evidence(tmp_path, None, profile)


def _pcie(mean_kib: float, counter: float | None) -> dict[str, Any]:
    rx = {"throughput_mean": mean_kib, "counter_bytes_per_second": counter}
    return {"gpus": [], "pcie_rate": {"rx": rx}}


@pytest.mark.parametrize(
    ("counter", "verdict"),
    [
        (50e6 * 1024, CONFIRMED),  # 50 GB/s of KiB: x 1024 is right
        (50e6 * 1000, WRONG),  # KB after all
        (50e6 * 1011, INCONCLUSIVE),  # between the two: noise, not a unit
    ],
)
def test_pcie_unit_from_the_byte_counter(tmp_path: Path, counter: float, verdict: str) -> None:
    ev = _evidence(tmp_path, {"readings-load.json": _pcie(50e6, counter)})
    finding = Finding("pcie", "", "", "")
    pcie_unit(ev, finding)
    assert finding.verdict == verdict, finding


def test_pcie_unit_needs_pcie_to_move(tmp_path: Path) -> None:
    ev = _evidence(tmp_path, {"readings-load.json": _pcie(200.0, 200.0 * 1024)})
    finding = Finding("pcie", "", "", "")
    pcie_unit(ev, finding)
    assert finding.verdict == INCONCLUSIVE and "less than 1 GB/s" in finding.note


def _gpu(violation_ns: int, links: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "violation": {"0": {"value": {"violationTime": violation_ns, "referenceTime": 1}}},
        "nvlink": {"links": links},
    }


@pytest.mark.parametrize(
    ("nanoseconds", "verdict"), [(40_148_000_000, WRONG), (40_148_000, CONFIRMED)]
)
def test_violation_time_against_nvidia_smi_microseconds(
    tmp_path: Path, nanoseconds: int, verdict: str
) -> None:
    # nvidia-smi's 40148 us are 40,148,000 ns; NVML answering a thousand times more would
    # mean its unit is not the nanosecond the agent divides by
    readings = {"gpus": [_gpu(nanoseconds, [])]}
    ev = _evidence(tmp_path, {"readings-load.json": readings, "nvidia-smi-q.txt": QUERY})
    finding = Finding("violation", "", "", "")
    violation_ns(ev, finding)
    assert finding.verdict == verdict, finding


def test_nvlink_speed_on_one_gpu_without_links_is_not_testable(tmp_path: Path) -> None:
    links = [{"link": 0, "state": {"error": "NotSupported"}, "fields": []}]
    ev = _evidence(tmp_path, {"readings-idle.json": {"gpus": [_gpu(0, links)]}})
    finding = Finding("speed", "", "", "")
    nvlink_speed(ev, finding)
    assert finding.verdict == ONE_GPU


def test_nvlink_speed_against_nvidia_smi(tmp_path: Path) -> None:
    speed = {"field": 164, "scope": 0, "return": 0, "value": 26562.0}
    links = [{"link": 0, "state": {"value": 1}, "fields": [speed]}]
    files = {"readings-idle.json": {"gpus": [_gpu(0, links)]}, "nvidia-smi-nvlink-s.txt": NVLINK_S}
    finding = Finding("speed", "", "", "")
    nvlink_speed(_evidence(tmp_path, files), finding)
    assert finding.verdict == CONFIRMED, finding
    speed["value"] = 26562.0 / 1.048576  # the same rate counted in MiB/s: 5% short
    (tmp_path / "readings-idle.json").write_text(json.dumps({"gpus": [_gpu(0, links)]}))
    nvlink_speed(_evidence(tmp_path, {}), finding)
    assert finding.verdict == WRONG, finding
