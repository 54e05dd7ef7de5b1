"""The stand-in for the rules' series waits for what vmalert wrote to be answered: on
VictoriaMetrics a slow group's first evaluation shows seconds after it ended, and the
stand-in read before then held none of its series (the report then read the samples).
And it waits for its own blocks with a query VictoriaMetrics answers at a thousand
nodes, where every recorded series at once is more than it selects in one query."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.scale.stack import Stack
from benchmarks.thousand.recorded import held_once_written, rule_grid, wait_loaded
from tests.conftest import require_tool
from tests.e2e.loopback import Endpoint
from tests.e2e.service_commands import victoria_metrics_argv

SLOW = {"gpu:report_up:max": 300.0}  # a report group's name and interval


# as at a thousand nodes, where the recorded series outnumber -search.maxUniqueTimeseries
FEW = {"search.maxUniqueTimeseries": "2"}


@pytest.fixture
def victoria_metrics(tmp_path: Path) -> Iterator[str]:
    require_tool("victoria-metrics")
    stack = Stack(tmp_path)
    endpoint = Endpoint.free()
    argv = victoria_metrics_argv(endpoint, tmp_path / "vm-data", FEW)
    try:
        stack.spawn("victoria-metrics", argv, f"{endpoint.url}/health")
        yield endpoint.url
    finally:
        stack.close()


def _import(url: str, gpus: list[str], at_s: float, name: str = "gpu:report_up:max") -> None:
    lines = "".join(
        f'{{"metric":{{"__name__":"{name}","gpu":"{gpu}"}},'
        f'"values":[1],"timestamps":[{int(at_s * 1000)}]}}\n'
        for gpu in gpus
    )
    request = urllib.request.Request(f"{url}/api/v1/import", data=lines.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass
    with urllib.request.urlopen(f"{url}/internal/force_flush", timeout=10):
        pass


def test_the_stand_in_waits_until_every_written_series_is_answered(
    victoria_metrics: str,
) -> None:
    # two GPUs' series a minute old; the third written only later, as remote write would
    at = time.time() - 60
    _import(victoria_metrics, ["0", "1"], at)
    late = threading.Timer(3.0, _import, (victoria_metrics, ["2"], at))
    late.start()
    try:
        held = held_once_written(victoria_metrics, SLOW, lambda: {"gpu:report_up:max": 3.0}, 60)
    finally:
        late.join()
    assert sorted(dict(labels)["gpu"] for labels, _ in held) == ["0", "1", "2"]


def test_the_stand_in_says_what_it_waited_for(victoria_metrics: str) -> None:
    _import(victoria_metrics, ["0"], time.time() - 60)
    with pytest.raises(AssertionError, match=r"rule groups wrote.*held: gpu:report_up:max 1 of 2"):
        held_once_written(victoria_metrics, SLOW, lambda: {"gpu:report_up:max": 2.0}, 3)


def test_the_stand_in_s_block_is_awaited_by_one_name(victoria_metrics: str) -> None:
    grid = rule_grid(time.time() - 3600, time.time() - 1800, 300)
    middle = grid.time_ms(grid.count // 2) / 1000.0
    _import(victoria_metrics, ["0", "1", "2"], middle)
    _import(victoria_metrics, ["0"], middle, name="cluster:report_up:sum")
    # every recorded series at once is more than this VictoriaMetrics selects
    with pytest.raises(urllib.error.HTTPError, match="422"):
        urllib.request.urlopen(
            f"{victoria_metrics}/api/v1/query?query=count(%7B__name__%3D~%22.%2B%3A.%2B%22%7D)"
            f"&time={middle}",
            timeout=10,
        )
    assert wait_loaded(victoria_metrics, grid, "cluster:report_up:sum", timeout_s=30) < 30
