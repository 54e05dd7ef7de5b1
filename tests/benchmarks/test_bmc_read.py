"""A short real run of the BMC read benchmark (benchmarks/bmc_read.py) against ipmi_sim:
shapes and sane numbers only, and every process it started is gone."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from benchmarks.bmc_read import measure
from tests.conftest import require_tool


@pytest.mark.timeout(90)
def test_a_short_run_times_reads_and_stops_its_bmc(tmp_path: Path) -> None:
    for tool in ("ipmi_sim", "sdrcomp", "gcc"):
        require_tool(tool)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    cost = measure(5, tmp_path)
    assert cost.sensors == 11  # the test BMC's, a shared record counted per sensor
    for timing in (cost.kept_records, cost.walk_every_read):
        assert timing.reads == 5
        assert 0 < timing.cpu_ms_median <= timing.cpu_ms_p99
        assert 0 < timing.wall_ms_median <= timing.wall_ms_p99 <= timing.wall_ms_max
    # a silent BMC costs its timeout and a little, never a retry's worth more
    assert 0 <= cost.silent_overrun_ms < 250
    # the run's own ipmi_sim is gone (another test's shared one may still be running)
    after = psutil.Process().children(recursive=True)
    assert not [p for p in after if p.pid not in before and p.name() == "ipmi_sim"]
